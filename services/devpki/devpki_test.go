package devpki

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"os"
	"testing"
	"time"
)

// The agent CA is a CA of its own: a certificate it issues chains to it
// for client authentication and never to the suite CA, which the services
// trust for each other.
func TestEnsureMakesASeparateAgentCA(t *testing.T) {
	l, err := Ensure(t.TempDir(), "identitysvc")
	if err != nil {
		t.Fatal(err)
	}
	suite, err := tls.LoadX509KeyPair(l.CA(), l.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := tls.LoadX509KeyPair(l.AgentCA(), l.AgentCAKey())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(suite.Leaf.RawSubjectPublicKeyInfo, agent.Leaf.RawSubjectPublicKeyInfo) {
		t.Fatal("the agent CA has the suite CA's key")
	}
	if !agent.Leaf.IsCA || agent.Leaf.CheckSignatureFrom(suite.Leaf) == nil {
		t.Fatal("the agent CA must be a self-signed CA, not one the suite CA issued")
	}
	if info, err := os.Stat(l.AgentCAKey()); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("agent CA key mode: %v %v", info.Mode(), err)
	}

	pub, _, _ := ed25519.GenerateKey(nil)
	u, _ := url.Parse("agtp://" + string(bytes.Repeat([]byte("ab"), 32)))
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, agent.Leaf, pub, agent.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := func(c *x509.Certificate) *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(c)
		return p
	}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(agent.Leaf), KeyUsages: client}); err != nil {
		t.Fatalf("an agent certificate does not chain to the agent CA: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(suite.Leaf), KeyUsages: client}); err == nil {
		t.Fatal("an agent certificate chains to the suite CA")
	}
	// The agent CA is for client certificates only.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(agent.Leaf), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("the agent CA's certificates pass as server certificates")
	}
}

// Ensure keeps what exists, so restarts reuse the same identities, and
// creates what is missing, so an older state directory gains the agent
// CA.
func TestEnsureIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	l, err := Ensure(dir, "identitysvc")
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := []string{l.CA(), l.CAKey(), l.AgentCA(), l.AgentCAKey(), l.Cert("identitysvc"), l.Key("identitysvc"), l.SigningKey()}
	before := map[string][]byte{}
	for _, f := range files {
		before[f] = read(f)
	}
	if _, err := Ensure(dir, "identitysvc"); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !bytes.Equal(before[f], read(f)) {
			t.Fatalf("a second Ensure rewrote %s", f)
		}
	}

	if err := os.Remove(l.AgentCA()); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir, "identitysvc"); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before[l.AgentCA()], read(l.AgentCA())) || !bytes.Equal(before[l.CA()], read(l.CA())) {
		t.Fatal("a missing agent CA must be made again, and nothing else")
	}
	if _, err := tls.LoadX509KeyPair(l.AgentCA(), l.AgentCAKey()); err != nil {
		t.Fatalf("the new agent CA does not match its key: %v", err)
	}
}
