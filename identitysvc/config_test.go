package identitysvc

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/testkit"
)

// validConfig is a configuration Validate accepts: the test PKI, its
// agent CA, and loopback listeners.
func validConfig(pki devpki.Layout) Config {
	c := DefaultConfig()
	c.CAFile, c.CertFile, c.KeyFile = pki.CA(), pki.Cert("identitysvc"), pki.Key("identitysvc")
	c.SigningKeyFile = pki.SigningKey()
	c.RedisURL = "redis://127.0.0.1:6379"
	c.Peers = map[string]string{"auditsvc": "127.0.0.1:7106"}
	c.AgentCACertFile, c.AgentCAKeyFile = pki.AgentCA(), pki.AgentCAKey()
	return c
}

// writeCA writes a CA certificate signed by parent (self-signed when
// parent is nil) and its key, and returns the two paths.
func writeCA(t *testing.T, name string, parent *x509.Certificate, parentKey crypto.Signer) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func TestValidate(t *testing.T) {
	pki := testkit.PKI(t)
	servicePair, err := tls.LoadX509KeyPair(pki.CA(), pki.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	underService, underServiceKey := writeCA(t, "agent CA under the service CA", servicePair.Leaf, servicePair.PrivateKey.(crypto.Signer))
	ownCA, ownKey := writeCA(t, "an organisation's agent CA", nil, nil)

	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string // "" means valid
	}{
		{"the dev PKI's agent CA", func(*Config) {}, ""},
		{"no agent CA", func(c *Config) { c.AgentCACertFile, c.AgentCAKeyFile = "", "" }, ""},
		{"an agent CA of its own", func(c *Config) { c.AgentCACertFile, c.AgentCAKeyFile = ownCA, ownKey }, ""},
		{"the service CA as agent CA", func(c *Config) { c.AgentCACertFile, c.AgentCAKeyFile = pki.CA(), pki.CAKey() }, "is the service CA"},
		{"an agent CA issued by the service CA", func(c *Config) { c.AgentCACertFile, c.AgentCAKeyFile = underService, underServiceKey }, "issued by the service CA"},
		{"an agent CA without its key", func(c *Config) { c.AgentCAKeyFile = "" }, "needs both"},
		{"an agent CA with another key", func(c *Config) { c.AgentCAKeyFile = ownKey }, "agent CA"},
		{"a service certificate as agent CA", func(c *Config) {
			c.AgentCACertFile, c.AgentCAKeyFile = pki.Cert("identitysvc"), pki.Key("identitysvc")
		}, "not a CA certificate"},
		{"open lifecycle on loopback", func(c *Config) { c.Options.LifecycleAuth = "open" }, ""},
		{"open lifecycle on IPv6 loopback, no gateway", func(c *Config) {
			c.Options.LifecycleAuth, c.GRPCAddr, c.HTTPAddr = "open", "[::1]:7104", ""
		}, ""},
		{"open lifecycle on localhost", func(c *Config) {
			c.Options.LifecycleAuth, c.GRPCAddr, c.HTTPAddr = "open", "localhost:7104", "localhost:8104"
		}, ""},
		{"open lifecycle with gRPC on every interface", func(c *Config) {
			c.Options.LifecycleAuth, c.GRPCAddr = "open", ":7104"
		}, "allowed only when every listener is on loopback"},
		{"open lifecycle with the gateway on a routable address", func(c *Config) {
			c.Options.LifecycleAuth, c.HTTPAddr = "open", "10.0.0.5:8104"
		}, "allowed only when every listener is on loopback"},
		{"genesis_issuer on every interface", func(c *Config) { c.GRPCAddr, c.HTTPAddr = "0.0.0.0:7104", "0.0.0.0:8104" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(pki)
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error saying %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestDefaultsAndEnvironment(t *testing.T) {
	c := DefaultConfig()
	if c.Options.LifecycleAuth != "genesis_issuer" {
		t.Fatalf("default lifecycle auth %q, want genesis_issuer", c.Options.LifecycleAuth)
	}
	if c.Options.AgentCertMaxLifetime != 24*time.Hour {
		t.Fatalf("default max certificate lifetime %v", c.Options.AgentCertMaxLifetime)
	}
	env := map[string]string{
		"AGTP_AGENT_CA_CERT_FILE": "/etc/agtp/agent-ca.pem", "AGTP_AGENT_CA_KEY_FILE": "/etc/agtp/agent-ca-key.pem",
		"AGTP_AGENT_CERT_MAX_LIFETIME": "6h", "AGTP_LIFECYCLE_AUTH": "open",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := c.ApplyEnv(lookup); err != nil {
		t.Fatal(err)
	}
	if c.AgentCACertFile != env["AGTP_AGENT_CA_CERT_FILE"] || c.AgentCAKeyFile != env["AGTP_AGENT_CA_KEY_FILE"] ||
		c.Options.AgentCertMaxLifetime != 6*time.Hour || c.Options.LifecycleAuth != "open" {
		t.Fatalf("environment not applied: %+v", c)
	}
	env["AGTP_AGENT_CERT_MAX_LIFETIME"] = "a day"
	if err := c.ApplyEnv(lookup); err == nil || !strings.Contains(err.Error(), "AGTP_AGENT_CERT_MAX_LIFETIME") {
		t.Fatalf("a bad duration must be refused naming the variable, got %v", err)
	}
}
