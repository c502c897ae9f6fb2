package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestInspectOperatorOnly runs the front door with the operator_only read
// ACL (core §7.2.4): no client certificate is 401, a certificate not on
// the allowlist 403, an operator's certificate reads the chain.
func TestInspectOperatorOnly(t *testing.T) {
	// The processes use the test binary's PKI, so the operator's
	// fingerprint is known before they start.
	operator := spkiFingerprint(t, testkit.PKI(t).Cert(devpki.Admin))
	c := Start(t, Options{Env: []string{"AGTP_INSPECT_ACL=operator_only", "AGTP_OPERATOR_FINGERPRINTS=" + operator}})
	agent := c.registerAgent(t, "e2e-inspected", "orders:read")
	if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent)); resp.Status != 200 {
		t.Fatalf("QUERY = %d %s", resp.Status, resp.Body)
	}
	target := "/?target=chain_head&agent_id=" + agent
	inspectWith := func(name string) *agtp.Response {
		var cert *tls.Certificate
		if name != "" {
			c, err := tls.LoadX509KeyPair(c.PKI.Cert(name), c.PKI.Key(name))
			if err != nil {
				t.Fatal(err)
			}
			cert = &c
		}
		return c.dialAGTPWith(t, cert).do(request(t, "INSPECT", target))
	}
	if resp := inspectWith(""); resp.Status != 401 || errorBody(t, resp)["reason"] != "acl-anonymous-blocked" {
		t.Fatalf("without a certificate = %d %s, want 401", resp.Status, resp.Body)
	}
	if resp := inspectWith("intruder"); resp.Status != 403 {
		t.Fatalf("with a certificate not on the allowlist = %d %s, want 403", resp.Status, resp.Body)
	}
	if resp := inspectWith(devpki.Admin); resp.Status != 200 {
		t.Fatalf("with the operator's certificate = %d %s, want 200", resp.Status, resp.Body)
	}
}

func spkiFingerprint(t *testing.T, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return inspect.KeyFingerprint(cert.RawSubjectPublicKeyInfo)
}
