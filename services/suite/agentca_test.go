package suite

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	identitydemo "github.com/agtpsuite/agtp/identitysvc/demo"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// make run's identitysvc issues Agent Certificates from the state
// directory's agent CA, which is not the suite CA the services trust.
func TestSuiteIssuesAgentCertificatesFromItsAgentCA(t *testing.T) {
	s := startTestSuite(t, Config{})
	ctx := context.Background()

	l := s.Layout()
	admin, err := kit.LoadMTLS(l.CA(), l.Cert(devpki.Admin), l.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := kit.NewTelemetry(ctx, "test", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := kit.DialService(s.Addrs["identitysvc"], "identitysvc", admin, tel)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := identityv1.NewIdentityServiceClient(conn)

	demo, err := identitydemo.Ensure(filepath.Join(s.StateDir(), "demo-agent"))
	if err != nil {
		t.Fatal(err)
	}
	_, agentKey, _ := ed25519.GenerateKey(nil)
	csr, err := agentcert.CreateCSR(demo.AgentID, agentKey)
	if err != nil {
		t.Fatal(err)
	}
	req := &identityv1.IssueAgentCertificateRequest{AgentId: demo.AgentID, Csr: csr, IssuerSignature: agentcert.SignRequest(demo.PrivateKey, demo.AgentID, csr)}
	var res *identityv1.IssueAgentCertificateResponse
	// The demo agent is registered once identitysvc answers.
	testkit.WaitFor(t, 20*time.Second, "an Agent Certificate for the demo agent", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		res, err = client.IssueAgentCertificate(rctx, req)
		return err == nil
	})
	cert, err := agentcert.Parse(res.GetCertificate())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ca    string
		trust bool
	}{{l.AgentCA(), true}, {l.CA(), false}} {
		roots, err := keyfile.CertPool(tc.ca)
		if err != nil {
			t.Fatal(err)
		}
		err = agentcert.VerifyCA(cert, nil, roots, time.Now())
		if (err == nil) != tc.trust {
			t.Fatalf("verified against %s: %v, want trusted %v", tc.ca, err, tc.trust)
		}
	}
	if id, _ := agentcert.AgentID(cert); id != demo.AgentID {
		t.Fatalf("the certificate names %q", id)
	}
	if ca, _ := x509.ParseCertificate(res.GetCaChain()[0]); ca == nil || ca.Subject.CommonName != "AGTP suite development agent CA" {
		t.Fatal("ca_chain is not the development agent CA")
	}
}
