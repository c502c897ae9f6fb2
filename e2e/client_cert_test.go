package e2e

import (
	"bufio"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// clientCert is a TLS client certificate for key, issued by the suite's
// service CA with no Agent-ID in it: with an agent's Genesis issuer key it
// proves possession of that key (core §7.2.19).
func (c *Cluster) clientCert(t *testing.T, key ed25519.PrivateKey) *tls.Certificate {
	t.Helper()
	return c.serviceCACert(t, key, nil)
}

// serviceCACert is a certificate from the suite's service CA for key,
// with uris as its SAN URIs.
func (c *Cluster) serviceCACert(t *testing.T, key ed25519.PrivateKey, uris []*url.URL) *tls.Certificate {
	t.Helper()
	readPEM := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s: no PEM block", path)
		}
		return block.Bytes
	}
	ca, err := x509.ParseCertificate(readPEM(c.PKI.CA()))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(readPEM(c.PKI.CAKey()))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "e2e client"},
		URIs:         uris,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialAGTPWith opens an AGTP connection presenting cert (none when nil).
func (c *Cluster) dialAGTPWith(t *testing.T, cert *tls.Certificate) *agtpConn {
	t.Helper()
	cfg := agtp.ClientTLSConfig("localhost", c.Admin.Pool())
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.Dial("tcp", c.Procs["frontdoor"].AGTPAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &agtpConn{t: t, conn: conn, br: bufio.NewReader(conn), bw: bufio.NewWriter(conn)}
}

// asIssuer opens an AGTP connection as the holder of a Genesis issuer
// key, whom lifecycle_auth genesis_issuer (the default) lets run the
// lifecycle methods for that Genesis's agent.
func (c *Cluster) asIssuer(t *testing.T, issuer ed25519.PrivateKey) *agtpConn {
	t.Helper()
	return c.dialAGTPWith(t, c.clientCert(t, issuer))
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestLifecycleGenesisIssuerOverAGTP runs core 108 over the wire: with
// lifecycle_auth genesis_issuer, a lifecycle call without a client
// certificate is 401, with a certificate for another key 403, and with
// the Genesis issuer's key it runs.
func TestLifecycleGenesisIssuerOverAGTP(t *testing.T) {
	c := Start(t, Options{ServiceEnv: map[string][]string{"identitysvc": {"AGTP_LIFECYCLE_AUTH=genesis_issuer"}}})
	agent, issuer := c.registerAgentKey(t, "e2e-self-governed", "orders:read")
	deactivate := withJSON(request(t, "DEACTIVATE", "/"), `{"agent_id":"`+agent+`","reason":"maintenance"}`)
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		status int
	}{
		{"no client certificate", nil, 401},
		{"a certificate for another key", c.clientCert(t, newKey(t)), 403},
		{"the Genesis issuer's certificate", c.clientCert(t, issuer), 200},
	} {
		resp := c.dialAGTPWith(t, tc.cert).do(deactivate)
		if resp.Status != tc.status {
			t.Fatalf("%s: DEACTIVATE = %d %s, want %d", tc.name, resp.Status, resp.Body, tc.status)
		}
		if tc.status != 200 {
			if st := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent)).Status; st != 200 {
				t.Fatalf("%s: the refused DEACTIVATE still took effect (QUERY = %d)", tc.name, st)
			}
		}
	}
	waitStatus(t, c, 503, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
}

// TestInspectAgentOnly runs core 87 with the agent_only read ACL: a caller
// is the agent its Agent-ID names only when its client certificate
// carries that agent's Genesis issuer key. Without a certificate 401; a
// certificate that does not authenticate the Agent-ID 403; the agent
// reads its own chain but not another agent's, and a refusal names
// neither.
func TestInspectAgentOnly(t *testing.T) {
	c := Start(t, Options{Env: []string{"AGTP_INSPECT_ACL=agent_only"}})
	alice, aliceKey := c.registerAgentKey(t, "e2e-alice", "orders:read")
	bob := c.registerAgent(t, "e2e-bob", "orders:read")
	for _, a := range []string{alice, bob} {
		if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, a)); resp.Status != 200 {
			t.Fatalf("QUERY = %d %s", resp.Status, resp.Body)
		}
	}
	chainOf := func(subject string) *agtp.Request {
		return request(t, "INSPECT", "/?target=chain_head&agent_id="+subject, agtp.HeaderAgentID, alice)
	}
	for _, tc := range []struct {
		name    string
		cert    *tls.Certificate
		subject string
		status  int
		reason  string
	}{
		{"no client certificate", nil, alice, 401, "acl-anonymous-blocked"},
		{"a certificate that is not alice's", c.clientCert(t, newKey(t)), alice, 403, "inspect-forbidden"},
		{"alice reads her own chain", c.clientCert(t, aliceKey), alice, 200, ""},
		{"alice reads bob's chain", c.clientCert(t, aliceKey), bob, 403, "inspect-forbidden"},
		{"alice reads the server chain", c.clientCert(t, aliceKey), "server", 403, "inspect-forbidden"},
	} {
		resp := c.dialAGTPWith(t, tc.cert).do(chainOf(tc.subject))
		if resp.Status != tc.status {
			t.Fatalf("%s: INSPECT = %d %s, want %d", tc.name, resp.Status, resp.Body, tc.status)
		}
		if tc.reason != "" {
			if r := errorBody(t, resp)["reason"]; r != tc.reason {
				t.Errorf("%s: reason %v, want %s", tc.name, r, tc.reason)
			}
			if strings.Contains(string(resp.Body), bob) {
				t.Errorf("%s: the refusal names another agent: %s", tc.name, resp.Body)
			}
		}
	}
}

// issuerOf is the Genesis issuer key of an agent the harness registered.
func issuerOf(t *testing.T, agent string) ed25519.PrivateKey {
	t.Helper()
	k, ok := agentIssuers.Load(agent)
	if !ok {
		t.Fatalf("the harness did not register %s", agent)
	}
	return k.(ed25519.PrivateKey)
}
