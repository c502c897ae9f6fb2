package agentcert_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
)

// now is the fixed instant the tests issue and verify at.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// agent is an agent with its Genesis issuer key and the key it presents
// at the handshake.
type agent struct {
	id        string
	issuer    ed25519.PrivateKey
	issuerPub ed25519.PublicKey
	key       ed25519.PrivateKey
}

func newAgent(t testing.TB) agent {
	t.Helper()
	issuerPub, issuer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return agent{id: randomID(t), issuer: issuer, issuerPub: issuerPub, key: key}
}

func randomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func (a agent) request() agentcert.Request {
	return agentcert.Request{AgentID: a.id, PublicKey: a.key.Public(), Now: now}
}

// issued is a certificate IssueByIssuer made for a.
func (a agent) issued(t testing.TB) *x509.Certificate {
	t.Helper()
	der, err := agentcert.IssueByIssuer(a.request(), a.issuer)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, der)
}

// template is what the profile issues, for tests to break one part of.
func (a agent) template() *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: a.id},
		URIs:         []*url.URL{agentcert.URI(a.id)},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// signed is tmpl for a's key, signed by signer (named by its key, as the
// issuer-signed form is).
func (a agent) signed(t testing.TB, tmpl *x509.Certificate, signer crypto.Signer) *x509.Certificate {
	t.Helper()
	parent := &x509.Certificate{Subject: pkix.Name{CommonName: "issuer"}, PublicKey: signer.Public()}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, a.key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, der)
}

func parse(t testing.TB, der []byte) *x509.Certificate {
	t.Helper()
	cert, err := agentcert.Parse(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// sanURIs is a SAN extension holding uris exactly as given, which
// x509.CreateCertificate would otherwise re-encode through url.URL.
func sanURIs(t testing.TB, uris ...string) pkix.Extension {
	t.Helper()
	names := make([]asn1.RawValue, 0, len(uris))
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	v, err := asn1.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidSubjectAltName, Value: v}
}

// ca is a throwaway agent CA.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t testing.TB, name string, parent *ca, edit func(*x509.Certificate)) ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if edit != nil {
		edit(tmpl)
	}
	issuerCert, issuerKey := tmpl, key
	if parent != nil {
		issuerCert, issuerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuerCert, key.Public(), issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca{cert: cert, key: key}
}

func (c ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

func (c ca) issue(t testing.TB, a agent) *x509.Certificate {
	t.Helper()
	der, err := agentcert.IssueByCA(a.request(), c.cert, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, der)
}

// wantReason checks that err is an *agentcert.Error with reason, or nil
// when reason is empty.
func wantReason(t testing.TB, err error, reason string) {
	t.Helper()
	if reason == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var e *agentcert.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want an *agentcert.Error with reason %s", err, err, reason)
	}
	if e.Reason != reason {
		t.Fatalf("reason = %s (%s), want %s", e.Reason, e.Explanation, reason)
	}
	if e.Explanation == "" || !strings.HasPrefix(e.Error(), reason+": ") {
		t.Fatalf("Error() = %q: want the reason and an explanation", e.Error())
	}
}

// oversizedDER is an Agent Certificate for a, otherwise within the
// profile, that is larger than MaxCertificateBytes (an extension of that
// size) while x509 still parses it.
func oversizedDER(t testing.TB, a agent) []byte {
	t.Helper()
	v, err := asn1.Marshal(make([]byte, agentcert.MaxCertificateBytes))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := a.template()
	tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 32473, 1}, Value: v}}
	parent := &x509.Certificate{Subject: pkix.Name{CommonName: "issuer"}, PublicKey: a.issuerPub}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, a.key.Public(), a.issuer)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestParse(t *testing.T) {
	a := newAgent(t)
	valid := a.issued(t).Raw
	oversized := oversizedDER(t, a)

	for _, tc := range []struct {
		name   string
		der    []byte
		reason string
	}{
		{"valid", valid, ""},
		{"empty", nil, agentcert.ReasonMalformed},
		{"garbage", []byte("not a certificate at all"), agentcert.ReasonMalformed},
		{"truncated", valid[:len(valid)/2], agentcert.ReasonMalformed},
		{"one byte short", valid[:len(valid)-1], agentcert.ReasonMalformed},
		{"trailing data", append(append([]byte(nil), valid...), 0), agentcert.ReasonMalformed},
		{"PEM instead of DER", []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), agentcert.ReasonMalformed},
		{"larger than MaxCertificateBytes", oversized, agentcert.ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, err := agentcert.Parse(tc.der)
			wantReason(t, err, tc.reason)
			if tc.reason == "" && cert == nil {
				t.Fatal("no certificate")
			}
		})
	}
	if _, err := x509.ParseCertificate(oversized); err != nil {
		t.Fatalf("x509 does not parse the oversized certificate, so the bound is not what refuses it: %v", err)
	}
}

func TestAgentID(t *testing.T) {
	a := newAgent(t)
	id := a.id
	other := randomID(t)
	upper := strings.ToUpper(id)
	manyURIs := []string{"agtp://" + id}
	for i := range agentcert.MaxURIs {
		manyURIs = append(manyURIs, "https://example.com/"+string(rune('a'+i)))
	}

	for _, tc := range []struct {
		name   string
		uris   []string // nil: no SAN extension at all
		reason string
	}{
		{"canonical", []string{"agtp://" + id}, ""},
		{"beside a SPIFFE ID", []string{"spiffe://example.org/agent", "agtp://" + id}, ""},
		{"MaxURIs URIs", manyURIs[:agentcert.MaxURIs], ""},
		{"no SAN", nil, agentcert.ReasonNoAgentID},
		{"no agtp URI", []string{"spiffe://example.org/agent", "https://example.com/" + id}, agentcert.ReasonNoAgentID},
		{"two agents", []string{"agtp://" + id, "agtp://" + other}, agentcert.ReasonNoAgentID},
		{"the same agent twice", []string{"agtp://" + id, "agtp://" + id}, agentcert.ReasonNoAgentID},
		{"more than MaxURIs URIs", manyURIs, agentcert.ReasonNoAgentID},
		{"path", []string{"agtp://" + id + "/agents/helper"}, agentcert.ReasonNoAgentID},
		{"trailing slash", []string{"agtp://" + id + "/"}, agentcert.ReasonNoAgentID},
		{"port", []string{"agtp://" + id + ":4480"}, agentcert.ReasonNoAgentID},
		{"empty port", []string{"agtp://" + id + ":"}, agentcert.ReasonNoAgentID},
		{"userinfo", []string{"agtp://" + other + "@" + id}, agentcert.ReasonNoAgentID},
		{"empty userinfo", []string{"agtp://@" + id}, agentcert.ReasonNoAgentID},
		{"query", []string{"agtp://" + id + "?scope=all"}, agentcert.ReasonNoAgentID},
		{"empty query", []string{"agtp://" + id + "?"}, agentcert.ReasonNoAgentID},
		{"fragment", []string{"agtp://" + id + "#x"}, agentcert.ReasonNoAgentID},
		{"empty fragment", []string{"agtp://" + id + "#"}, agentcert.ReasonNoAgentID},
		{"opaque", []string{"agtp:" + id}, agentcert.ReasonNoAgentID},
		{"uppercase hex", []string{"agtp://" + upper}, agentcert.ReasonNoAgentID},
		{"uppercase scheme", []string{"AGTP://" + id}, agentcert.ReasonNoAgentID},
		{"short id", []string{"agtp://" + id[:63]}, agentcert.ReasonNoAgentID},
		{"long id", []string{"agtp://" + id + "0"}, agentcert.ReasonNoAgentID},
		{"not hex", []string{"agtp://" + strings.Repeat("g", 64)}, agentcert.ReasonNoAgentID},
		{"a name, not an id", []string{"agtp://helper.example.com"}, agentcert.ReasonNoAgentID},
		{"empty host", []string{"agtp:///" + id}, agentcert.ReasonNoAgentID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := a.template()
			tmpl.URIs = nil
			if tc.uris != nil {
				tmpl.ExtraExtensions = []pkix.Extension{sanURIs(t, tc.uris...)}
			}
			cert := a.signed(t, tmpl, a.issuer)
			got, err := agentcert.AgentID(cert)
			wantReason(t, err, tc.reason)
			if tc.reason == "" && got != id {
				t.Fatalf("AgentID = %q, want %q", got, id)
			}
			if tc.reason != "" && got != "" {
				t.Fatalf("AgentID = %q along with an error", got)
			}
		})
	}
}

func TestAgentIDRefusesAnOversizedCertificate(t *testing.T) {
	a := newAgent(t)
	// Parsed by x509 itself, as a TLS stack hands it over.
	cert, err := x509.ParseCertificate(oversizedDER(t, a))
	if err != nil {
		t.Fatal(err)
	}
	_, err = agentcert.AgentID(cert)
	wantReason(t, err, agentcert.ReasonMalformed)
}

func TestHasAgentURI(t *testing.T) {
	a := newAgent(t)
	tmpl := a.template()
	tmpl.URIs = nil
	tmpl.ExtraExtensions = []pkix.Extension{sanURIs(t, "agtp://not-an-agent-id", "https://example.com/")}
	broken := a.signed(t, tmpl, a.issuer)
	tmpl.ExtraExtensions = []pkix.Extension{sanURIs(t, "https://example.com/")}
	plain := a.signed(t, tmpl, a.issuer)

	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want bool
	}{
		{"an Agent Certificate", a.issued(t), true},
		{"an agtp URI that names no agent", broken, true},
		{"no agtp URI", plain, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentcert.HasAgentURI(tc.cert); got != tc.want {
				t.Fatalf("HasAgentURI = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVerifyIssuerSigned(t *testing.T) {
	a := newAgent(t)
	_, otherIssuer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := a.issued(t)
	edit := func(f func(*x509.Certificate)) *x509.Certificate {
		tmpl := a.template()
		f(tmpl)
		return a.signed(t, tmpl, a.issuer)
	}
	byOther, err := agentcert.IssueByIssuer(a.request(), otherIssuer)
	if err != nil {
		t.Fatal(err)
	}
	agentCA := newCA(t, "agent CA", nil, nil)

	for _, tc := range []struct {
		name   string
		cert   *x509.Certificate
		issuer ed25519.PublicKey
		at     time.Time
		reason string
	}{
		{"issued by IssueByIssuer", good, a.issuerPub, now, ""},
		{"at the end of its validity", good, a.issuerPub, good.NotAfter, ""},
		{"a clock a little behind", good, a.issuerPub, good.NotBefore.Add(-4 * time.Minute), ""},
		{"hand-made within the profile", edit(func(*x509.Certificate) {}), a.issuerPub, now, ""},
		{"anyExtendedKeyUsage", edit(func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageAny} }), a.issuerPub, now, ""},
		{"client and server auth", edit(func(c *x509.Certificate) {
			c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		}), a.issuerPub, now, ""},
		{"signed by another Ed25519 key", parse(t, byOther), a.issuerPub, now, agentcert.ReasonUntrusted},
		{"checked against another agent's issuer", good, otherIssuer.Public().(ed25519.PublicKey), now, agentcert.ReasonUntrusted},
		{"no issuer key on record", good, nil, now, agentcert.ReasonUntrusted},
		{"a truncated issuer key", good, a.issuerPub[:16], now, agentcert.ReasonUntrusted},
		{"signed with ECDSA", a.signed(t, a.template(), ecKey), a.issuerPub, now, agentcert.ReasonUntrusted},
		{"CA-issued", agentCA.issue(t, a), a.issuerPub, now, agentcert.ReasonUntrusted},
		{"expired", good, a.issuerPub, good.NotAfter.Add(time.Second), agentcert.ReasonExpired},
		{"not yet valid", good, a.issuerPub, good.NotBefore.Add(-6 * time.Minute), agentcert.ReasonExpired},
		{"a CA certificate", edit(func(c *x509.Certificate) {
			c.BasicConstraintsValid, c.IsCA = true, true
			c.KeyUsage |= x509.KeyUsageCertSign
		}), a.issuerPub, now, agentcert.ReasonProfile},
		{"server auth only", edit(func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} }), a.issuerPub, now, agentcert.ReasonProfile},
		{"no extended key usage", edit(func(c *x509.Certificate) { c.ExtKeyUsage = nil }), a.issuerPub, now, agentcert.ReasonProfile},
		{"an unknown extended key usage only", edit(func(c *x509.Certificate) {
			c.ExtKeyUsage = nil
			c.UnknownExtKeyUsage = []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 32473, 2}}
		}), a.issuerPub, now, agentcert.ReasonProfile},
		{"key usage without digitalSignature", edit(func(c *x509.Certificate) { c.KeyUsage = x509.KeyUsageKeyEncipherment }), a.issuerPub, now, agentcert.ReasonProfile},
		{"valid longer than MaxLifetime", edit(func(c *x509.Certificate) {
			c.NotBefore = now.Add(-time.Hour)
			c.NotAfter = c.NotBefore.Add(agentcert.MaxLifetime + time.Second)
		}), a.issuerPub, now, agentcert.ReasonProfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantReason(t, agentcert.VerifyIssuerSigned(tc.cert, tc.issuer, tc.at), tc.reason)
		})
	}
}

func TestVerifyCA(t *testing.T) {
	a := newAgent(t)
	root := newCA(t, "agent root CA", nil, nil)
	inter := newCA(t, "agent intermediate CA", &root, nil)
	foreign := newCA(t, "another organisation's CA", nil, nil)
	serverOnly := newCA(t, "server-only CA", nil, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	good := root.issue(t, a)
	viaInter := inter.issue(t, a)
	byCA := func(edit func(*x509.Certificate)) *x509.Certificate {
		tmpl := a.template()
		edit(tmpl)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, a.key.Public(), root.key)
		if err != nil {
			t.Fatal(err)
		}
		return parse(t, der)
	}

	for _, tc := range []struct {
		name   string
		cert   *x509.Certificate
		inter  []*x509.Certificate
		roots  *x509.CertPool
		at     time.Time
		reason string
	}{
		{"issued by IssueByCA", good, nil, root.pool(), now, ""},
		{"through an intermediate", viaInter, []*x509.Certificate{inter.cert}, root.pool(), now, ""},
		{"a clock a little behind", good, nil, root.pool(), good.NotBefore.Add(-2 * time.Minute), ""},
		{"an intermediate not presented", viaInter, nil, root.pool(), now, agentcert.ReasonUntrusted},
		{"from another CA", foreign.issue(t, a), nil, root.pool(), now, agentcert.ReasonUntrusted},
		{"no agent CA configured", good, nil, nil, now, agentcert.ReasonUntrusted},
		{"issuer-signed", a.issued(t), nil, root.pool(), now, agentcert.ReasonUntrusted},
		{"from a CA for servers only", serverOnly.issue(t, a), nil, serverOnly.pool(), now, agentcert.ReasonUntrusted},
		{"expired", good, nil, root.pool(), good.NotAfter.Add(time.Second), agentcert.ReasonExpired},
		{"not yet valid", good, nil, root.pool(), good.NotBefore.Add(-6 * time.Minute), agentcert.ReasonExpired},
		{"the CA certificate itself", root.cert, nil, root.pool(), now, agentcert.ReasonProfile},
		{"server auth only", byCA(func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} }), nil, root.pool(), now, agentcert.ReasonProfile},
		{"no extended key usage", byCA(func(c *x509.Certificate) { c.ExtKeyUsage = nil }), nil, root.pool(), now, agentcert.ReasonProfile},
		{"valid longer than MaxLifetime", byCA(func(c *x509.Certificate) { c.NotAfter = c.NotBefore.Add(agentcert.MaxLifetime + time.Hour) }), nil, root.pool(), now, agentcert.ReasonProfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantReason(t, agentcert.VerifyCA(tc.cert, tc.inter, tc.roots, tc.at), tc.reason)
		})
	}
}

func TestIssueByIssuer(t *testing.T) {
	a := newAgent(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		req      agentcert.Request
		lifetime time.Duration // of the certificate issued
	}{
		{"default lifetime", a.request(), agentcert.DefaultLifetime},
		{"an hour", agentcert.Request{AgentID: a.id, PublicKey: a.key.Public(), Now: now, Lifetime: time.Hour}, time.Hour},
		{"MaxLifetime", agentcert.Request{AgentID: a.id, PublicKey: a.key.Public(), Now: now, Lifetime: agentcert.MaxLifetime}, agentcert.MaxLifetime},
		{"an ECDSA agent key", agentcert.Request{AgentID: a.id, PublicKey: ecKey.Public(), Now: now}, agentcert.DefaultLifetime},
		{"a time with nanoseconds", agentcert.Request{AgentID: a.id, PublicKey: a.key.Public(), Now: now.Add(999_999_999), Lifetime: agentcert.MaxLifetime}, agentcert.MaxLifetime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := agentcert.IssueByIssuer(tc.req, a.issuer)
			if err != nil {
				t.Fatal(err)
			}
			cert := parse(t, der)
			if got := cert.NotAfter.Sub(cert.NotBefore); got != tc.lifetime {
				t.Fatalf("valid for %s, want %s", got, tc.lifetime)
			}
			if cert.NotBefore.After(tc.req.Now) {
				t.Fatalf("NotBefore %s is after issuance %s", cert.NotBefore, tc.req.Now)
			}
			id, err := agentcert.AgentID(cert)
			if err != nil || id != a.id {
				t.Fatalf("AgentID = %q, %v; want %q", id, err, a.id)
			}
			if len(cert.URIs) != 1 || cert.URIs[0].String() != "agtp://"+a.id {
				t.Fatalf("URIs = %v", cert.URIs)
			}
			wantReason(t, agentcert.VerifyIssuerSigned(cert, a.issuerPub, tc.req.Now), "")
			wantReason(t, agentcert.VerifyIssuerSigned(cert, a.issuerPub, cert.NotAfter), "")
			wantReason(t, agentcert.VerifyIssuerSigned(cert, a.issuerPub, cert.NotAfter.Add(time.Second)), agentcert.ReasonExpired)
		})
	}
}

func TestIssueByCA(t *testing.T) {
	a := newAgent(t)
	root := newCA(t, "agent root CA", nil, nil)
	ending := newCA(t, "a CA near its end", nil, func(c *x509.Certificate) { c.NotAfter = now.Add(time.Hour) })

	cert := root.issue(t, a)
	if id, err := agentcert.AgentID(cert); err != nil || id != a.id {
		t.Fatalf("AgentID = %q, %v; want %q", id, err, a.id)
	}
	wantReason(t, agentcert.VerifyCA(cert, nil, root.pool(), now), "")
	if got := cert.NotAfter.Sub(cert.NotBefore); got != agentcert.DefaultLifetime {
		t.Fatalf("valid for %s, want %s", got, agentcert.DefaultLifetime)
	}

	// A certificate does not outlive the CA that vouches for it.
	short := ending.issue(t, a)
	if !short.NotAfter.Equal(ending.cert.NotAfter) {
		t.Fatalf("NotAfter = %s, want the CA's %s", short.NotAfter, ending.cert.NotAfter)
	}
	wantReason(t, agentcert.VerifyCA(short, nil, ending.pool(), now), "")
}

func TestIssueRefusesWhatTheProfileDoesNot(t *testing.T) {
	a := newAgent(t)
	root := newCA(t, "agent root CA", nil, nil)
	expired := newCA(t, "an expired CA", nil, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = now.Add(-48*time.Hour), now.Add(-24*time.Hour)
	})
	withReq := func(edit func(*agentcert.Request)) agentcert.Request {
		r := a.request()
		edit(&r)
		return r
	}
	long := withReq(func(r *agentcert.Request) { r.Lifetime = agentcert.MaxLifetime + time.Second })

	for _, tc := range []struct {
		name  string
		issue func() ([]byte, error)
		want  string
	}{
		{"issuer: lifetime over MaxLifetime", func() ([]byte, error) { return agentcert.IssueByIssuer(long, a.issuer) }, "lifetime"},
		{"CA: lifetime over MaxLifetime", func() ([]byte, error) { return agentcert.IssueByCA(long, root.cert, root.key) }, "lifetime"},
		{"negative lifetime", func() ([]byte, error) {
			return agentcert.IssueByIssuer(withReq(func(r *agentcert.Request) { r.Lifetime = -time.Hour }), a.issuer)
		}, "lifetime"},
		{"uppercase Agent-ID", func() ([]byte, error) {
			return agentcert.IssueByIssuer(withReq(func(r *agentcert.Request) { r.AgentID = strings.ToUpper(a.id) }), a.issuer)
		}, "not canonical"},
		{"short Agent-ID", func() ([]byte, error) {
			return agentcert.IssueByCA(withReq(func(r *agentcert.Request) { r.AgentID = a.id[:40] }), root.cert, root.key)
		}, "not canonical"},
		{"no agent key", func() ([]byte, error) {
			return agentcert.IssueByIssuer(withReq(func(r *agentcert.Request) { r.PublicKey = nil }), a.issuer)
		}, "no public key"},
		{"no issuer key", func() ([]byte, error) { return agentcert.IssueByIssuer(a.request(), nil) }, "issuer key"},
		{"no CA", func() ([]byte, error) { return agentcert.IssueByCA(a.request(), nil, root.key) }, "no CA"},
		{"an expired CA", func() ([]byte, error) { return agentcert.IssueByCA(a.request(), expired.cert, expired.key) }, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := tc.issue()
			if err == nil {
				t.Fatalf("issued a certificate (%d bytes)", len(der))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestURI(t *testing.T) {
	id := randomID(t)
	if got := agentcert.URI(id).String(); got != "agtp://"+id {
		t.Fatalf("URI = %s", got)
	}
}

func TestFingerprintAndThumbprint(t *testing.T) {
	a := newAgent(t)
	der := a.issued(t).Raw
	sum := sha256.Sum256(der)

	for _, tc := range []struct {
		name      string
		der       []byte
		fp, thumb string
	}{
		// SHA-256("abc"), FIPS 180-2 appendix B.1.
		{"a known digest", []byte("abc"),
			"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
			"ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"},
		{"a certificate", der, hex.EncodeToString(sum[:]), base64.RawURLEncoding.EncodeToString(sum[:])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentcert.Fingerprint(tc.der); got != tc.fp {
				t.Fatalf("Fingerprint = %s, want %s", got, tc.fp)
			}
			got := agentcert.Thumbprint(tc.der)
			if got != tc.thumb {
				t.Fatalf("Thumbprint = %s, want %s", got, tc.thumb)
			}
			// RFC 8705 §3.1: base64url without padding, 43 characters
			// for SHA-256.
			if len(got) != 43 || strings.ContainsAny(got, "=+/") {
				t.Fatalf("Thumbprint %q is not unpadded base64url of 32 bytes", got)
			}
		})
	}
}
