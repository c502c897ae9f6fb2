package suite

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// negotiator registers a tier-2 agent holding rcns:negotiate (it passes
// every gate lock of the demo suite) under name and returns its Agent-ID,
// an Agent Certificate for it and the admin's mTLS material.
func negotiator(t *testing.T, s *Suite, name string) (string, tls.Certificate, *kit.MTLS) {
	t.Helper()
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	g, err := genesis.Create(genesis.Template{
		Owner: "negotiator@example.test", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
		Scope: []string{"orders:read", "documents:read", "rcns:negotiate"}, TrustTier: genesis.TierOrgAsserted,
		VerificationPath: genesis.PathOrgAsserted, OrgLabel: name,
	}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kit.LoadMTLS(s.layout.CA(), s.layout.Cert(devpki.Admin), s.layout.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := kit.NewTelemetry(context.Background(), "test", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := kit.DialService(s.Addrs["identitysvc"], "identitysvc", admin, tel)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := identityv1.NewIdentityServiceClient(conn).RegisterGenesis(ctx, &identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes()), Name: name, Activate: true})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetAgent().GetAgentId()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: id, PublicKey: key.Public()}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return id, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, admin
}

// agentClient is an AGTP client presenting certs (none: no client
// certificate) that trusts the suite's CA.
func agentClient(t *testing.T, s *Suite, certs ...tls.Certificate) *client.Client {
	t.Helper()
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{RootCAs: roots, Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func fields(kv ...string) agtp.Header {
	var h agtp.Header
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// The contract route asks rcnssvc for its caller before the authorize
// stage runs, so a bearer token is checked before it: a peer without a
// certificate that names another agent and sends a token that proves
// nothing is refused 401, and nothing is negotiated, accepted or spent in
// that agent's name; the agent's own proven request still negotiates.
func TestContractRouteChecksABearerTokenFirst(t *testing.T) {
	s := startTestSuite(t, Config{})
	victim, victimCert, admin := negotiator(t, s, "negotiator")
	attacker := agentClient(t, s)
	own := agentClient(t, s, victimCert)
	ctx := context.Background()
	testkit.WaitFor(t, 30*time.Second, "the front door's catalog", func() bool {
		resp, err := own.Send(ctx, "QUERY", "agtp://"+s.AGTPAddr()+"/orders?limit=1", nil, fields(agtp.HeaderAgentID, victim))
		return err == nil && resp.Status == agtp.StatusOK
	})
	forged := func(kv ...string) agtp.Header {
		return fields(append([]string{agtp.HeaderAgentID, victim, agtp.HeaderAuthorization, "Bearer forged"}, kv...)...)
	}
	for _, tc := range []struct {
		name   string
		target string
		header agtp.Header
	}{
		{"the gate", "/orders/ord-1001", forged(agtp.HeaderAllowRCNS, "true")},
		{"a presented contract", "/orders/ord-1001", forged(agtp.HeaderContractSynthesized, "syn_0123456789abcdef")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 12 { // more than the negotiation limit allows a minute
				resp, err := attacker.Send(ctx, "SUMMARIZE", "agtp://"+s.AGTPAddr()+tc.target, nil, tc.header)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Status != agtp.StatusUnauthorized {
					t.Fatalf("a forged token naming another agent got %d %s, want 401", resp.Status, resp.Body)
				}
			}
		})
	}
	tel, err := kit.NewTelemetry(ctx, "test", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := kit.DialService(s.Addrs["rcnssvc"], "rcnssvc", admin, tel)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := rcnsv1.NewRcnsServiceClient(conn).ListContracts(ctx, &rcnsv1.ListContractsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.GetContracts() {
		if c.GetOriginatingAgentId() == victim {
			t.Fatalf("rcnssvc holds a contract for the agent the forged requests named: %s %s", c.GetSynthesisId(), c.GetContractState())
		}
	}
	resp, err := own.Send(ctx, "SUMMARIZE", "agtp://"+s.AGTPAddr()+"/orders/ord-1001", nil, fields(agtp.HeaderAgentID, victim, agtp.HeaderAllowRCNS, "true"))
	if err != nil || resp.Status != agtp.StatusRCNSContractAvailable {
		t.Fatalf("the agent's own gate request = %v %v, want 461 with a preview", resp, err)
	}
}

// Under the default read ACL, agent_only, INSPECT of a contract or an
// RCNS attempt reads only the caller's own, like every other target.
func TestInspectReadsOnlyTheCallersOwnContracts(t *testing.T) {
	s := startTestSuite(t, Config{})
	owner, ownerCert, _ := negotiator(t, s, "negotiator")
	own := agentClient(t, s, ownerCert)
	demoCert, err := tls.LoadX509KeyPair(s.demoCert, s.demoCertKey)
	if err != nil {
		t.Fatal(err)
	}
	other := agentClient(t, s, demoCert)
	ctx := context.Background()
	testkit.WaitFor(t, 30*time.Second, "the front door's catalog", func() bool {
		resp, err := own.Send(ctx, "QUERY", "agtp://"+s.AGTPAddr()+"/orders?limit=1", nil, fields(agtp.HeaderAgentID, owner))
		return err == nil && resp.Status == agtp.StatusOK
	})
	gate, err := own.Send(ctx, "SUMMARIZE", "agtp://"+s.AGTPAddr()+"/orders/ord-1001", nil, fields(agtp.HeaderAgentID, owner, agtp.HeaderAllowRCNS, "true"))
	if err != nil || gate.Status != agtp.StatusRCNSContractAvailable {
		t.Fatalf("gate: %v %v", err, gate)
	}
	var preview struct {
		SynthesisID string `json:"synthesis_id"`
	}
	if err := json.Unmarshal(gate.Body, &preview); err != nil || preview.SynthesisID == "" {
		t.Fatalf("preview %s: %v", gate.Body, err)
	}
	refused, err := own.Send(ctx, "SUMMARIZE", "agtp://"+s.AGTPAddr()+"/nothing-here", nil, fields(agtp.HeaderAgentID, owner, agtp.HeaderAllowRCNS, "true"))
	if err != nil || refused.Header.Get(agtp.HeaderRCNSAttemptID) == "" {
		t.Fatalf("refused gate: %v %v", err, refused)
	}
	for _, tc := range []struct {
		name, query string
	}{
		{"contract", "target=contract&synthesis_id=" + preview.SynthesisID},
		{"rcns-attempt", "target=rcns-attempt&attempt_id=" + refused.Header.Get(agtp.HeaderRCNSAttemptID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine, err := own.Send(ctx, "INSPECT", "agtp://"+s.AGTPAddr()+"/?"+tc.query, nil, fields(agtp.HeaderAgentID, owner))
			if err != nil || mine.Status != agtp.StatusOK {
				t.Fatalf("the owner's INSPECT = %v %v, want 200", mine, err)
			}
			theirs, err := other.Send(ctx, "INSPECT", "agtp://"+s.AGTPAddr()+"/?"+tc.query, nil, fields(agtp.HeaderAgentID, s.demoAgent.AgentID))
			if err != nil {
				t.Fatal(err)
			}
			if theirs.Status != agtp.StatusForbidden {
				t.Fatalf("another agent's INSPECT = %d %s, want 403", theirs.Status, theirs.Body)
			}
		})
	}
}

// A caller proven by a bearer token pays for a contract's request what a
// caller proven by its certificate pays: the token is checked before
// rcnssvc acts, and that check spends none of the agent's rate limits, so
// the contract's own decision spends them once.
func TestContractRouteSpendsATokenCallersLimitsOnce(t *testing.T) {
	tokens := testkit.NewTokenIssuer(t, "https://idp.suite.test", "agtp-suite-test")
	s := startPolicySuite(t, map[string]any{"oauth": tokens.OAuthOptions(), "rate_limits": map[string]any{"tiers": map[string]any{"default": map[string]any{"limit": 6, "period": int64(time.Minute)}}}})
	ctx := context.Background()
	target := "agtp://" + s.AGTPAddr() + "/orders/ord-1001"
	testkit.WaitFor(t, 30*time.Second, "the front door's catalog", func() bool {
		resp, err := agentClient(t, s).Send(ctx, "DISCOVER", "agtp://"+s.AGTPAddr()+"/", nil, nil)
		return err == nil && resp.Status == agtp.StatusOK
	})

	// served counts the contract's requests answered before the agent's
	// limit of six a minute refuses one.
	served := func(t *testing.T, c *client.Client, proof ...string) int {
		t.Helper()
		gate, err := c.Send(ctx, "SUMMARIZE", target, nil, fields(append([]string{agtp.HeaderAllowRCNS, "true"}, proof...)...))
		if err != nil || gate.Status != agtp.StatusRCNSContractAvailable {
			t.Fatalf("gate: %v %v", gate, err)
		}
		var preview struct {
			SynthesisID string `json:"synthesis_id"`
		}
		if err := json.Unmarshal(gate.Body, &preview); err != nil || preview.SynthesisID == "" {
			t.Fatalf("preview %s: %v", gate.Body, err)
		}
		for n := range 12 {
			resp, err := c.Send(ctx, "SUMMARIZE", target, nil, fields(append([]string{agtp.HeaderContractSynthesized, preview.SynthesisID}, proof...)...))
			if err != nil {
				t.Fatal(err)
			}
			switch resp.Status {
			case agtp.StatusOK:
			case agtp.StatusRateLimited:
				return n
			default:
				t.Fatalf("the contract's request %d = %d %s", n+1, resp.Status, resp.Body)
			}
		}
		t.Fatal("the agent's limit of six a minute refused none of 12 requests")
		return 0
	}
	certified, cert, _ := negotiator(t, s, "negotiator-cert")
	byCert := served(t, agentClient(t, s, cert), agtp.HeaderAgentID, certified)
	tokened, _, _ := negotiator(t, s, "negotiator-token")
	byToken := served(t, agentClient(t, s), agtp.HeaderAgentID, tokened,
		agtp.HeaderAuthorization, tokens.Bearer(t, map[string]any{"sub": "operator", "agtp_agent_id": tokened}))
	if byCert == 0 || byToken != byCert {
		t.Fatalf("before the limit refused one, a certificate-proven caller had %d of the contract's requests served and a token-proven caller %d; want the same, at least one", byCert, byToken)
	}
}

// Tokens that prove nothing still spend the limits of the address they
// come from on the contract route, and past them the answer is 429, as on
// every route: one address cannot have policysvc check bad tokens without
// limit.
func TestContractRouteRefusesBadTokensPastTheAddressLimit(t *testing.T) {
	tokens := testkit.NewTokenIssuer(t, "https://idp.suite.test", "agtp-suite-test")
	s := startPolicySuite(t, map[string]any{"oauth": tokens.OAuthOptions(), "rate_limits": map[string]any{"per_ip": map[string]any{"limit": 3, "period": int64(time.Hour)}}})
	victim, _, _ := negotiator(t, s, "negotiator")
	attacker := agentClient(t, s)
	ctx := context.Background()
	wrong := tokens.Bearer(t, map[string]any{"sub": "someone", "agtp_agent_id": strings.Repeat("ab", 32)})
	var statuses []int
	for range 5 {
		resp, err := attacker.Send(ctx, "SUMMARIZE", "agtp://"+s.AGTPAddr()+"/orders/ord-1001", nil,
			fields(agtp.HeaderAgentID, victim, agtp.HeaderAuthorization, wrong, agtp.HeaderAllowRCNS, "true"))
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, resp.Status)
	}
	if want := []int{401, 401, 401, 429, 429}; !slices.Equal(statuses, want) {
		t.Fatalf("a token naming another agent, five times from one address under a limit of three an hour: %v, want %v", statuses, want)
	}
}

// startPolicySuite starts the suite with policysvc's options policy (as
// its AGTP_POLICY_FILE).
func startPolicySuite(t *testing.T, policy map[string]any) *Suite {
	t.Helper()
	doc, err := json.Marshal(policy)
	if err != nil {
		t.Fatal(err)
	}
	return startTestSuite(t, Config{LookupEnv: mapEnv(map[string]string{"AGTP_POLICY_FILE": writePolicyFile(t, string(doc))})})
}

// writePolicyFile writes policysvc's options doc to a file and returns its
// path.
func writePolicyFile(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
