package server

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// newAgentCA makes a self-signed agent CA.
func newAgentCA(t testing.TB) *AgentCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test agent CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour * 365),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &AgentCA{Chain: []*x509.Certificate{cert}, Key: key}
}

// issuerAgent is a registered agent with its Genesis issuer key.
type issuerAgent struct {
	id     string
	issuer ed25519.PrivateKey
}

func registerWithIssuer(t testing.TB, c identityv1.IdentityServiceClient, name string, activate bool) issuerAgent {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(nil)
	g, err := genesis.Create(genesis.Template{
		Owner: "Acme Corp", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "production",
		Scope: []string{"orders:query"}, TrustTier: 2, OrgLabel: name,
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterGenesis(context.Background(), &identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes()), Name: name, Activate: activate}); err != nil {
		t.Fatal(err)
	}
	return issuerAgent{id: g.AgentID, issuer: priv}
}

func csrFor(t testing.TB, id string, key crypto.Signer) []byte {
	t.Helper()
	der, err := agentcert.CreateCSR(id, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// certRequest is a well-formed request: a fresh Ed25519 agent key, its
// CSR, and the issuer's signature.
func certRequest(t testing.TB, a issuerAgent) (*identityv1.IssueAgentCertificateRequest, ed25519.PublicKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	csr := csrFor(t, a.id, priv)
	return &identityv1.IssueAgentCertificateRequest{AgentId: a.id, Csr: csr, IssuerSignature: agentcert.SignRequest(a.issuer, a.id, csr)}, pub
}

// certEnv is an identitysvc issuing certificates from ca, whose log
// lines are kept.
func certEnv(t testing.TB, opts Options) (identityv1.IdentityServiceClient, *testkit.SyncBuffer) {
	t.Helper()
	e := newEnv(t, Options{})
	logs := &testkit.SyncBuffer{}
	opts.SigningKey = suiteKey
	srv, err := New(e.rdb, slog.New(slog.NewTextHandler(logs, nil)), e.auditClient, opts)
	if err != nil {
		t.Fatal(err)
	}
	return identityv1.NewIdentityServiceClient(testkit.ServeGRPCAs(t, testkit.FrontDoor, srv.Register)), logs
}

func TestIssueAgentCertificate(t *testing.T) {
	ca := newAgentCA(t)
	c, logs := certEnv(t, Options{AgentCA: ca, AgentCertMaxLifetime: 48 * time.Hour, LifecycleAuth: registry.AuthOpen})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Chain[0])
	agent := registerWithIssuer(t, c, "orders-bot", true)
	deprecated := registerWithIssuer(t, c, "old-bot", true)
	if _, err := c.TransitionLifecycle(context.Background(), &identityv1.TransitionLifecycleRequest{
		AgentId: deprecated.id, Transition: tDEPRECATE, Reason: "v2",
	}); err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		agent    issuerAgent
		key      crypto.Signer
		lifetime uint32
		want     time.Duration
	}{
		{"Ed25519 key, default lifetime", agent, nil, 0, agentcert.DefaultLifetime},
		{"ECDSA key, one hour", agent, ecKey, 3600, time.Hour},
		{"the configured maximum", agent, nil, 48 * 3600, 48 * time.Hour},
		{"a deprecated agent is still served", deprecated, nil, 0, agentcert.DefaultLifetime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == nil {
				_, key, _ = ed25519.GenerateKey(nil)
			}
			csr := csrFor(t, tc.agent.id, key)
			before := time.Now()
			res, err := c.IssueAgentCertificate(context.Background(), &identityv1.IssueAgentCertificateRequest{
				AgentId: tc.agent.id, Csr: csr, IssuerSignature: agentcert.SignRequest(tc.agent.issuer, tc.agent.id, csr), LifetimeSeconds: tc.lifetime,
			})
			if err != nil {
				t.Fatal(err)
			}
			cert, err := agentcert.Parse(res.GetCertificate())
			if err != nil {
				t.Fatal(err)
			}
			if err := agentcert.VerifyCA(cert, nil, roots, time.Now()); err != nil {
				t.Fatalf("the certificate does not verify against the agent CA: %v", err)
			}
			if id, err := agentcert.AgentID(cert); err != nil || id != tc.agent.id {
				t.Fatalf("the certificate names %q (%v), want %s", id, err, tc.agent.id)
			}
			if !cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key.Public()) {
				t.Fatal("the certificate is not for the CSR's key")
			}
			if got := cert.NotAfter.Sub(cert.NotBefore); got != tc.want {
				t.Fatalf("valid for %v, want %v", got, tc.want)
			}
			if cert.NotBefore.After(before) {
				t.Fatalf("not valid before %v, after the request was made", cert.NotBefore)
			}
			if !res.GetNotAfter().AsTime().Equal(cert.NotAfter) {
				t.Fatalf("not_after %v, the certificate says %v", res.GetNotAfter().AsTime(), cert.NotAfter)
			}
			if len(res.GetCaChain()) != 1 || !bytes.Equal(res.GetCaChain()[0], ca.Chain[0].Raw) {
				t.Fatal("ca_chain must be the agent CA's certificate")
			}
			// Every issuance is logged with what identifies the certificate.
			line := ""
			for l := range strings.SplitSeq(logs.String(), "\n") {
				if strings.Contains(l, "fingerprint="+agentcert.Fingerprint(res.GetCertificate())) {
					line = l
				}
			}
			for _, want := range []string{"agent certificate issued", "agent_id=" + tc.agent.id, "serial=" + cert.SerialNumber.Text(16), "not_after="} {
				if !strings.Contains(line, want) {
					t.Fatalf("no issuance log line with %q:\n%s", want, logs.String())
				}
			}
		})
	}
}

func TestIssueAgentCertificateRefusals(t *testing.T) {
	c, _ := certEnv(t, Options{AgentCA: newAgentCA(t), LifecycleAuth: registry.AuthOpen})
	ctx := context.Background()
	agent := registerWithIssuer(t, c, "orders-bot", true)
	sibling := registerWithIssuer(t, c, "sibling-bot", true)
	pending := registerWithIssuer(t, c, "pending-bot", false)
	suspended := registerWithIssuer(t, c, "paused-bot", true)
	retired := registerWithIssuer(t, c, "gone-bot", true)
	for _, tr := range []struct {
		id string
		t  identityv1.LifecycleTransition
	}{{suspended.id, tDEACTIVATE}, {retired.id, tREVOKE}} {
		if _, err := c.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{AgentId: tr.id, Transition: tr.t, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	_, stranger, _ := ed25519.GenerateKey(nil)
	unknown := strings.Repeat("ab", 32)

	for _, tc := range []struct {
		name   string
		edit   func(t testing.TB, r *identityv1.IssueAgentCertificateRequest)
		code   codes.Code
		reason string
	}{
		{"issuer signature by another key", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.IssuerSignature = agentcert.SignRequest(stranger, r.AgentId, r.Csr)
		}, codes.PermissionDenied, ReasonIssuerSignatureInvalid},
		{"issuer signature over another CSR", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			_, other, _ := ed25519.GenerateKey(nil)
			r.IssuerSignature = agentcert.SignRequest(agent.issuer, r.AgentId, csrFor(t, r.AgentId, other))
		}, codes.PermissionDenied, ReasonIssuerSignatureInvalid},
		{"issuer signature made for another agent", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.IssuerSignature = agentcert.SignRequest(sibling.issuer, sibling.id, r.Csr)
		}, codes.PermissionDenied, ReasonIssuerSignatureInvalid},
		{"truncated issuer signature", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.IssuerSignature = r.IssuerSignature[:32]
		}, codes.InvalidArgument, registry.ReasonParameterInvalid},
		{"CSR signed by another key than it carries", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			// Swap the CSR's public key for another: its signature, made
			// by the first key, no longer verifies.
			pub, priv, _ := ed25519.GenerateKey(nil)
			other, _, _ := ed25519.GenerateKey(nil)
			csr := csrFor(t, r.AgentId, priv)
			r.Csr = bytes.Replace(csr, pub, other, 1)
			r.IssuerSignature = agentcert.SignRequest(agent.issuer, r.AgentId, r.Csr)
		}, codes.InvalidArgument, ReasonCSRInvalid},
		{"CSR for the Genesis issuer key itself", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.Csr = csrFor(t, r.AgentId, agent.issuer)
			r.IssuerSignature = agentcert.SignRequest(agent.issuer, r.AgentId, r.Csr)
		}, codes.InvalidArgument, ReasonCSRInvalid},
		{"CSR that is not DER", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.Csr = []byte("-----BEGIN CERTIFICATE REQUEST-----")
			r.IssuerSignature = agentcert.SignRequest(agent.issuer, r.AgentId, r.Csr)
		}, codes.InvalidArgument, ReasonCSRInvalid},
		{"no CSR", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) { r.Csr = nil }, codes.InvalidArgument, ReasonCSRInvalid},
		{"lifetime above the maximum", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
			r.LifetimeSeconds = uint32(agentcert.DefaultLifetime/time.Second) + 1
		}, codes.InvalidArgument, ReasonLifetimeTooLong},
		{"unknown agent", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) { r.AgentId = unknown }, codes.NotFound, registry.ReasonAgentNotFound},
		{"not a canonical Agent-ID", func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) { r.AgentId = "orders-bot" }, codes.InvalidArgument, registry.ReasonInvalidCanonicalID},
		{"pending agent", useAgent(pending), codes.FailedPrecondition, callerpolicy.ReasonAgentNotActivated},
		{"suspended agent", useAgent(suspended), codes.FailedPrecondition, callerpolicy.ReasonAgentSuspended},
		{"retired agent", useAgent(retired), codes.FailedPrecondition, callerpolicy.ReasonAgentRetired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := certRequest(t, agent)
			tc.edit(t, req)
			res, err := c.IssueAgentCertificate(ctx, req)
			wantReason(t, err, tc.code, tc.reason)
			if res.GetCertificate() != nil {
				t.Fatal("a refusal carried a certificate")
			}
		})
	}
}

// useAgent turns a request into a well-formed one for another agent.
func useAgent(a issuerAgent) func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
	return func(t testing.TB, r *identityv1.IssueAgentCertificateRequest) {
		r.AgentId = a.id
		r.IssuerSignature = agentcert.SignRequest(a.issuer, a.id, r.Csr)
	}
}

func TestIssueAgentCertificateWithoutAgentCA(t *testing.T) {
	c, _ := certEnv(t, Options{})
	agent := registerWithIssuer(t, c, "orders-bot", true)
	req, _ := certRequest(t, agent)
	_, err := c.IssueAgentCertificate(context.Background(), req)
	wantReason(t, err, codes.Unimplemented, ReasonAgentCANotConfigured)
	if !strings.Contains(err.Error(), "AGTP_AGENT_CA_CERT_FILE") {
		t.Fatalf("the refusal must say how to configure an agent CA: %v", err)
	}
}

func TestOptionsValidateAgentCertificates(t *testing.T) {
	ca := newAgentCA(t)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "not a CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
	}, ca.Chain[0], leafKey.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	for _, tc := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"an agent CA", Options{AgentCA: ca}, true},
		{"the longest lifetime", Options{AgentCertMaxLifetime: agentcert.MaxLifetime}, true},
		{"a lifetime over the profile's bound", Options{AgentCertMaxLifetime: agentcert.MaxLifetime + time.Hour}, false},
		{"a negative lifetime", Options{AgentCertMaxLifetime: -time.Hour}, false},
		{"an end-entity certificate as CA", Options{AgentCA: &AgentCA{Chain: []*x509.Certificate{leaf}, Key: leafKey}}, false},
		{"a CA without its key", Options{AgentCA: &AgentCA{Chain: ca.Chain}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.SigningKey = suiteKey
			err := tc.opts.WithDefaults().Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
	if got := (Options{}).WithDefaults().AgentCertMaxLifetime; got != agentcert.DefaultLifetime {
		t.Fatalf("default max lifetime %v", got)
	}
}
