package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/testkit"
)

// tokenIssuer signs OAuth access tokens for the policysvc it configures.
type tokenIssuer struct{ *testkit.TokenIssuer }

// newTokenIssuer returns an issuer and a policysvc options file trusting it.
func newTokenIssuer(t *testing.T) (tokenIssuer, string) {
	t.Helper()
	ti := tokenIssuer{testkit.NewTokenIssuer(t, "https://idp.e2e.test", "agtp-e2e")}
	doc, err := json.Marshal(map[string]any{"oauth": ti.OAuthOptions()})
	if err != nil {
		t.Fatal(err)
	}
	opts := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(opts, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return ti, opts
}

// token is a bearer token naming agentID; with cert it is bound to that
// certificate (RFC 8705 cnf).
func (ti tokenIssuer) token(t *testing.T, agentID string, cert *tls.Certificate) string {
	t.Helper()
	claims := map[string]any{"sub": "operator-of-" + agentID[:8], "agtp_agent_id": agentID}
	if cert != nil {
		claims["cnf"] = map[string]any{"x5t#S256": agentcert.Thumbprint(cert.Certificate[0])}
	}
	return ti.Bearer(t, claims)
}

// agentCertWith issues an Agent Certificate for agentID signed by signer
// (the Genesis issuer key, or any other key to forge one), valid from
// notBefore for lifetime.
func agentCertWith(t *testing.T, agentID string, signer ed25519.PrivateKey, notBefore time.Time, lifetime time.Duration) *tls.Certificate {
	t.Helper()
	key := newKey(t)
	der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: agentID, PublicKey: key.Public(), Now: notBefore, Lifetime: lifetime}, signer)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// chainLength is the length of agentID's audit chain, read as an
// operator from auditsvc.
func (c *Cluster) chainLength(t *testing.T, agentID string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := auditv1.NewAuditServiceClient(c.Dial(t, "auditsvc")).GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: agentID})
	if status.Code(err) == codes.NotFound {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return r.GetLength()
}

// manifestEndpoint is an endpoint of the manifest with its path
// parameters filled in.
type manifestEndpoint struct {
	method, path string
	anonymous    bool
}

// manifestEndpoints lists every endpoint of the manifest: the built-ins
// and the demo domain's.
func (c *Cluster) manifestEndpoints(t *testing.T) []manifestEndpoint {
	t.Helper()
	resp := c.roundTrip(t, request(t, "DISCOVER", "/"))
	var m struct {
		Endpoints []struct {
			Method    string `json:"method"`
			Path      string `json:"path"`
			Anonymous bool   `json:"anonymous"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(resp.Body, &m); err != nil || resp.Status != 200 {
		t.Fatalf("manifest = %d %s", resp.Status, resp.Body)
	}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	var out []manifestEndpoint
	guarded := 0
	for _, e := range m.Endpoints {
		out = append(out, manifestEndpoint{e.Method, param.ReplaceAllString(e.Path, "ord-1001"), e.Anonymous})
		if !e.Anonymous {
			guarded++
		}
	}
	if len(out) < 40 || guarded < 10 {
		t.Fatalf("%d endpoints, %d of them not anonymous, in the manifest: %s", len(out), guarded, resp.Body)
	}
	return out
}

// TestImpersonationIsRefused is the caller-proof matrix (docs/identity.md,
// "Proven callers"): over every endpoint of the manifest, built-ins
// included, each way of claiming another agent's identity is refused with
// its documented status and reason (a bare header on an endpoint that
// serves anonymous callers is answered as anonymous), nothing runs as the
// victim, and nothing is appended to the victim's chain; the same calls
// with proof get through.
func TestImpersonationIsRefused(t *testing.T) {
	tokens, policyFile := newTokenIssuer(t)
	c := Start(t, Options{ServiceEnv: map[string][]string{"policysvc": {"AGTP_POLICY_FILE=" + policyFile}}})
	victim, victimIssuer := c.registerAgentKey(t, "e2e-victim", "orders:read", "orders:write", "payments:purchase",
		"authorization:grant", "documents:read", "reports:run")
	thief, _ := c.registerAgentKey(t, "e2e-thief", "orders:read")
	revoked, revokedIssuer := c.registerAgentKey(t, "e2e-revoked", "orders:read")
	revokedCert := AgentCertificate(revoked)
	if resp := c.asIssuer(t, revokedIssuer).do(withJSON(request(t, "REVOKE", "/"), `{"agent_id":"`+revoked+`","reason":"e2e"}`)); resp.Status != 200 {
		t.Fatalf("REVOKE = %d %s", resp.Status, resp.Body)
	}
	// The victim binds a session; the thief then tries to join it.
	session := "e2e-session-" + strings.Repeat("s", 24)
	if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim, agtp.HeaderSessionID, session)); resp.Status != 200 {
		t.Fatalf("the victim's own session = %d %s", resp.Status, resp.Body)
	}

	forged := agentCertWith(t, victim, newKey(t), time.Now(), time.Hour)
	expired := agentCertWith(t, victim, victimIssuer, time.Now().Add(-3*time.Hour), time.Hour)
	attempts := []struct {
		name    string
		cert    *tls.Certificate
		headers []string
		status  int
		reason  string
		// tokenChecked marks a token that policysvc judges, after the
		// input is validated: input this generic body does not fit is
		// refused first (422, or 400 from PROPOSE, whose status set has
		// no 422), unattributed all the same.
		tokenChecked bool
		// claimOnly marks a bare header, which an endpoint that serves
		// anonymous callers answers as anonymous, whatever that answer
		// is: only its attribution is checked there.
		claimOnly bool
	}{
		{"a bare Agent-ID header", nil, []string{agtp.HeaderAgentID, victim}, 401, "agent-unauthenticated", false, true},
		{"the thief's certificate with the victim's Agent-ID", AgentCertificate(thief), []string{agtp.HeaderAgentID, victim}, 401, "agent-unauthenticated", false, false},
		{"an expired certificate of the victim", expired, nil, 401, agentcert.ReasonExpired, false, false},
		{"a certificate signed by another key", forged, nil, 401, agentcert.ReasonUntrusted, false, false},
		{"a certificate from the service CA", c.serviceCACert(t, newKey(t), []*url.URL{agentcert.URI(victim)}), nil, 401, agentcert.ReasonUntrusted, false, false},
		{"a revoked agent's unexpired certificate", revokedCert, nil, 410, "agent-retired", false, false},
		{"a token naming another agent", nil, []string{agtp.HeaderAgentID, victim, agtp.HeaderAuthorization, tokens.token(t, thief, nil)}, 401, "agent-unauthenticated", true, false},
		{"a token bound to another certificate", nil, []string{agtp.HeaderAgentID, victim, agtp.HeaderAuthorization, tokens.token(t, victim, AgentCertificate(thief))}, 401, "agent-unauthenticated", true, false},
		{"the thief's certificate in the victim's session", AgentCertificate(thief), []string{agtp.HeaderSessionID, session}, 401, "", false, false},
	}
	endpoints := c.manifestEndpoints(t)
	ordersBefore := ordersBy(t, c, victim)
	before := c.chainLength(t, victim)
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			for _, ep := range endpoints {
				req := withJSON(request(t, ep.method, ep.path, a.headers...), `{"lines":[{"sku":"widget","quantity":1}],"agent_id":"`+victim+`","reason":"x"}`)
				req.Header.Set(agtp.HeaderIdempotencyKey, "imp-"+ep.method)
				resp := c.dialAGTPWith(t, a.cert).do(req)
				if rec, err := attribution.Parse(resp.Header.Get(agtp.HeaderAttributionRecord)); err != nil || rec.Payload.AgentID == victim {
					t.Fatalf("%s %s = %d: the record (%v) is attributed to the victim", ep.method, ep.path, resp.Status, err)
				}
				if a.claimOnly && ep.anonymous {
					continue
				}
				if slices.Contains(a.headers, agtp.HeaderSessionID) && ep.method == "RESUME" {
					continue // RESUME checks a session by its nonce, not by its binding
				}
				if resp.Status != a.status && !(a.tokenChecked && resp.Status == inputRefusal(ep.method)) {
					t.Fatalf("%s %s = %d %s, want %d", ep.method, ep.path, resp.Status, resp.Body, a.status)
				}
				if body := errorBody(t, resp); a.reason != "" && resp.Status == a.status && body["reason"] != a.reason {
					t.Fatalf("%s %s: reason %v, want %s (%s)", ep.method, ep.path, body["reason"], a.reason, resp.Body)
				}
			}
		})
	}
	if after := c.chainLength(t, victim); after != before {
		t.Fatalf("the victim's chain grew from %d to %d records during the impersonation attempts", before, after)
	}
	if n := ordersBy(t, c, victim); n != ordersBefore {
		t.Fatalf("orders created as the victim: %d, want %d", n, ordersBefore)
	}

	keys := c.signingKeys(t)
	t.Run("the same calls with proof get through", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			cert    *tls.Certificate
			headers []string
			by      string
			level   int
		}{
			{"the victim's Agent Certificate", AgentCertificate(victim), nil, "agent-certificate", 3},
			{"the certificate and a matching Agent-ID", AgentCertificate(victim), []string{agtp.HeaderAgentID, victim}, "agent-certificate", 3},
			{"the Genesis issuer key", c.clientCert(t, victimIssuer), []string{agtp.HeaderAgentID, victim}, "genesis-issuer-key", 3},
			{"a token naming the agent", nil, []string{agtp.HeaderAgentID, victim, agtp.HeaderAuthorization, tokens.token(t, victim, nil)}, "token", 2},
			{"a certificate-bound token with its certificate", AgentCertificate(victim), []string{agtp.HeaderAuthorization, tokens.token(t, victim, AgentCertificate(victim))}, "agent-certificate", 3},
		} {
			resp := c.dialAGTPWith(t, tc.cert).do(request(t, "QUERY", "/orders/ord-1001", tc.headers...))
			if resp.Status != 200 {
				t.Fatalf("%s: QUERY = %d %s", tc.name, resp.Status, resp.Body)
			}
			rec, err := attribution.Verify(resp.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Payload.AgentID != victim || rec.Payload.VerifiedBy != tc.by || rec.Payload.VerificationLevel != tc.level {
				t.Fatalf("%s: record says agent %s verified_by %q level %d", tc.name, rec.Payload.AgentID, rec.Payload.VerifiedBy, rec.Payload.VerificationLevel)
			}
			if tc.cert != nil && rec.Payload.CertificateFingerprint != agentcert.Fingerprint(tc.cert.Certificate[0]) {
				t.Fatalf("%s: certificate_fingerprint %q", tc.name, rec.Payload.CertificateFingerprint)
			}
			if tc.by == "token" && rec.Payload.TokenIssuer != tokens.Issuer {
				t.Fatalf("%s: token_issuer %q", tc.name, rec.Payload.TokenIssuer)
			}
		}
		resp := c.dialAs(t, victim).do(withJSON(request(t, "CREATE", "/orders", agtp.HeaderIdempotencyKey, "proven-1"), `{"lines":[{"sku":"widget","quantity":1}]}`))
		if resp.Status != 201 && resp.Status != 200 {
			t.Fatalf("CREATE with the victim's certificate = %d %s", resp.Status, resp.Body)
		}
		if n := ordersBy(t, c, victim); n != ordersBefore+1 {
			t.Fatalf("orders by the victim: %d, want %d", n, ordersBefore+1)
		}
	})

	t.Run("over QUIC too", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			cert   *tls.Certificate
			agent  string
			status int
		}{
			{"a bare Agent-ID header", nil, victim, 401},
			{"the thief's certificate with the victim's Agent-ID", AgentCertificate(thief), victim, 401},
			{"the victim's certificate", AgentCertificate(victim), victim, 200},
		} {
			opts := client.Options{RootCAs: c.Admin.Pool(), ServerName: "localhost", QUIC: true, AgentID: tc.agent}
			if tc.cert != nil {
				opts.Certificates = []tls.Certificate{*tc.cert}
			}
			cl, err := client.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := cl.Do(ctx, request(t, "QUERY", "/orders/ord-1001"), c.Procs["frontdoor"].AGTPAddr)
			cancel()
			cl.Close()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if resp.Status != tc.status {
				t.Fatalf("%s over QUIC = %d %s, want %d", tc.name, resp.Status, resp.Body, tc.status)
			}
		}
	})

	t.Run("anonymous lifecycle calls on another agent are refused", func(t *testing.T) {
		for _, method := range []string{"REVOKE", "DEACTIVATE", "DEPRECATE"} {
			body := `{"agent_id":"` + victim + `","reason":"x"}`
			if resp := c.roundTrip(t, withJSON(request(t, method, "/"), body)); resp.Status != 401 {
				t.Fatalf("anonymous %s = %d %s, want 401", method, resp.Status, resp.Body)
			}
			if resp := c.dialAs(t, thief).do(withJSON(request(t, method, "/"), body)); resp.Status != 403 && resp.Status != 401 {
				t.Fatalf("%s by another agent = %d %s, want 401 or 403", method, resp.Status, resp.Body)
			}
		}
		if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)); resp.Status != 200 {
			t.Fatalf("the victim after the refused lifecycle calls: %d %s", resp.Status, resp.Body)
		}
	})
}

// TestUnprovenClaimOnAnonymousEndpoint: under the default caller_proof
// (required), a core-draft client that sends Agent-ID on a read-only
// anonymous call is answered as anonymous, and its record names the claim
// it ignored.
func TestUnprovenClaimOnAnonymousEndpoint(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	agent := c.registerAgent(t, "e2e-claimant", "orders:read")
	resp := c.dialAGTP(t).do(request(t, "DISCOVER", "/", agtp.HeaderAgentID, agent))
	if resp.Status != 200 || resp.Header.Get(agtp.HeaderContentType) != agtp.MediaTypeManifestJSON {
		t.Fatalf("DISCOVER / with an unproven Agent-ID = %d %s %s, want the anonymous manifest", resp.Status, resp.Header.Get(agtp.HeaderContentType), resp.Body)
	}
	rec, err := attribution.Verify(resp.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: c.signingKeys(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Payload.AgentID != "" || rec.Payload.UnprovenAgentID != agent {
		t.Fatalf("record agent_id %q unproven_agent_id %q, want anonymous with the ignored claim", rec.Payload.AgentID, rec.Payload.UnprovenAgentID)
	}
}

// inputRefusal is the status a method answers input that does not fit its
// schema: 422, except PROPOSE, which keeps to its own status set and
// answers 400 with the violations (docs/decisions.md#D-decision-order).
func inputRefusal(method string) int {
	if method == "PROPOSE" {
		return 400
	}
	return 422
}
