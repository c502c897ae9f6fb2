package callerproof

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
)

func key(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func parse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func record(issuer ed25519.PrivateKey) *identityv1.AgentRecord {
	pub := issuer.Public().(ed25519.PublicKey)
	return &identityv1.AgentRecord{IssuerPublicKey: pub, IssuerFingerprint: genesis.Fingerprint(pub)}
}

func TestInspectAndVerify(t *testing.T) {
	const id = "aa00000000000000000000000000000000000000000000000000000000000001"
	issuer, stranger := key(t), key(t)
	now := time.Now()
	issued := func(signer ed25519.PrivateKey, at time.Time) *x509.Certificate {
		der, err := agentcert.IssueByIssuer(agentcert.Request{AgentID: id, PublicKey: key(t).Public(), Now: at, Lifetime: time.Hour}, signer)
		if err != nil {
			t.Fatal(err)
		}
		return parse(t, der)
	}
	caKey := key(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	caCert := parse(t, must(x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)))
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	caIssued := parse(t, must(agentcert.IssueByCA(agentcert.Request{AgentID: id, PublicKey: key(t).Public(), Lifetime: time.Hour}, caCert, caKey)))

	for _, tc := range []struct {
		name   string
		cert   *x509.Certificate
		rec    *identityv1.AgentRecord
		at     time.Time
		reason string
	}{
		{"issuer-signed", issued(issuer, now), record(issuer), now, ""},
		{"signed by another key", issued(stranger, now), record(issuer), now, agentcert.ReasonUntrusted},
		{"expired since the handshake", issued(issuer, now), record(issuer), now.Add(2 * time.Hour), agentcert.ReasonExpired},
		{"CA-issued", caIssued, record(stranger), now, ""},
		{"CA-issued, expired", caIssued, record(stranger), now.Add(2 * time.Hour), agentcert.ReasonExpired},
		{"a record without an issuer key", issued(issuer, now), &identityv1.AgentRecord{}, now, agentcert.ReasonUntrusted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := NewVerifier(pool).Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}})
			if peer == nil || peer.AgentID != id || peer.Err != nil {
				t.Fatalf("Inspect = %+v, want agent %s", peer, id)
			}
			for i := 0; i < 2; i++ { // the second time from the per-connection memory
				err := peer.VerifyAgent(tc.rec, tc.at)
				switch {
				case tc.reason == "" && err != nil:
					t.Fatalf("VerifyAgent = %v", err)
				case tc.reason != "" && (err == nil || err.Reason != tc.reason):
					t.Fatalf("VerifyAgent = %v, want %s", err, tc.reason)
				}
			}
		})
	}

	t.Run("the memory is per issuer key", func(t *testing.T) {
		peer := NewVerifier(nil).Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{issued(issuer, now)}})
		if err := peer.VerifyAgent(record(issuer), now); err != nil {
			t.Fatal(err)
		}
		if err := peer.VerifyAgent(record(stranger), now); err == nil || err.Reason != agentcert.ReasonUntrusted {
			t.Fatalf("after the record's issuer changed: %v, want %s", err, agentcert.ReasonUntrusted)
		}
	})

	t.Run("a later connection with the same certificate", func(t *testing.T) {
		v := NewVerifier(nil)
		cert := issued(issuer, now)
		conn := func(c *x509.Certificate) *Peer {
			return v.Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}})
		}
		if err := conn(cert).VerifyAgent(record(issuer), now); err != nil {
			t.Fatal(err)
		}
		// A record that names the issuer fingerprint but carries no key
		// can verify nothing: it passes only where the earlier
		// verification of this certificate against that key is reused.
		keyless := &identityv1.AgentRecord{IssuerFingerprint: genesis.Fingerprint(issuer.Public().(ed25519.PublicKey))}
		if err := NewVerifier(nil).Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}).VerifyAgent(keyless, now); err == nil {
			t.Fatal("a verifier that never saw the certificate accepted it without an issuer key")
		}
		if err := conn(cert).VerifyAgent(keyless, now); err != nil {
			t.Fatalf("second connection: %v, want the earlier verification reused", err)
		}
		if err := conn(cert).VerifyAgent(record(issuer), now.Add(2*time.Hour)); err == nil || err.Reason != agentcert.ReasonExpired {
			t.Fatalf("second connection after expiry: %v, want %s", err, agentcert.ReasonExpired)
		}
		if err := conn(cert).VerifyAgent(record(stranger), now); err == nil || err.Reason != agentcert.ReasonUntrusted {
			t.Fatalf("second connection, the record's issuer changed: %v, want %s", err, agentcert.ReasonUntrusted)
		}
		if err := conn(issued(stranger, now)).VerifyAgent(keyless, now); err == nil || err.Reason != agentcert.ReasonUntrusted {
			t.Fatalf("another certificate for the agent, not signed by its issuer: %v, want %s", err, agentcert.ReasonUntrusted)
		}
	})

	t.Run("a certificate that names no agent proves a key", func(t *testing.T) {
		k := key(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)}
		c := parse(t, must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)))
		peer := NewVerifier(nil).Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}})
		if peer.AgentID != "" || peer.Err != nil || peer.KeyFingerprint != genesis.Fingerprint(k.Public().(ed25519.PublicKey)) {
			t.Fatalf("peer = %+v, want the key's Genesis-issuer fingerprint and no agent", peer)
		}
	})

	if NewVerifier(nil).Inspect(&tls.ConnectionState{}) != nil {
		t.Fatal("no certificate must prove nothing")
	}
}

func TestVerifiedCertsAreBounded(t *testing.T) {
	c := newVerifiedCerts(3)
	for _, cert := range []string{"a", "b", "c", "d", "e"} {
		c.add(cert, "issuer")
	}
	if len(c.m) != 3 {
		t.Fatalf("%d remembered, want the bound 3", len(c.m))
	}
	if !c.has("e", "issuer") || c.has("e", "another issuer") {
		t.Fatal("the latest certificate must be remembered, with its issuer only")
	}
}

// TestTrustedPeers: a certificate from a trusted peer's CA proves that
// peer's word only when it carries one of the peer names and is for
// client authentication.
func TestTrustedPeers(t *testing.T) {
	now := time.Now()
	caKey := key(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peer CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	ca := parse(t, must(x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(signer ed25519.PrivateKey, parent *x509.Certificate, name string, usage x509.ExtKeyUsage) *x509.Certificate {
		k := key(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), DNSNames: []string{name}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)}
		if parent == nil {
			parent = tmpl
			signer = k
		}
		return parse(t, must(x509.CreateCertificate(rand.Reader, tmpl, parent, k.Public(), signer)))
	}
	v := NewVerifier(nil)
	v.TrustPeers(pool, []string{"agtp.peer.example"})
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"the peer's certificate", leaf(caKey, ca, "agtp.peer.example", x509.ExtKeyUsageClientAuth), "agtp.peer.example"},
		{"another name from the peer's CA", leaf(caKey, ca, "other.example", x509.ExtKeyUsageClientAuth), ""},
		{"a server-only certificate", leaf(caKey, ca, "agtp.peer.example", x509.ExtKeyUsageServerAuth), ""},
		{"the peer's name, self-signed", leaf(nil, nil, "agtp.peer.example", x509.ExtKeyUsageClientAuth), ""},
	} {
		p := v.Inspect(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}})
		if p.PeerServer != tc.want {
			t.Errorf("%s: PeerServer %q, want %q", tc.name, p.PeerServer, tc.want)
		}
	}
}

func must(der []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return der
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Required, "required": Required, "informational": Informational, "off": Off} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("maybe"); err == nil {
		t.Error("ParseMode(maybe) succeeded")
	}
}
