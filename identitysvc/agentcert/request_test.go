package agentcert_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
)

// The message is the wire contract between an agent's issuer and any
// registrar: pinned byte for byte.
func TestRequestMessage(t *testing.T) {
	id := strings.Repeat("0a", 32)
	got := string(agentcert.RequestMessage(id, []byte("abc")))
	want := "agtp-agent-certificate-request\n" + id + "\n" +
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // SHA-256("abc")
	if got != want {
		t.Fatalf("RequestMessage = %q, want %q", got, want)
	}
}

func TestSignAndVerifyRequest(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	id, otherID := strings.Repeat("0a", 32), strings.Repeat("0b", 32)
	csr := []byte("csr")
	sig := agentcert.SignRequest(priv, id, csr)
	for _, tc := range []struct {
		name   string
		issuer ed25519.PublicKey
		id     string
		csr    []byte
		sig    []byte
		ok     bool
	}{
		{"the request", pub, id, csr, sig, true},
		{"another issuer", other, id, csr, sig, false},
		{"another agent", pub, otherID, csr, sig, false},
		{"another CSR", pub, id, []byte("csr2"), sig, false},
		{"a truncated signature", pub, id, csr, sig[:63], false},
		{"no issuer key", nil, id, csr, sig, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentcert.VerifyRequest(tc.issuer, tc.id, tc.csr, tc.sig); got != tc.ok {
				t.Fatalf("VerifyRequest = %v, want %v", got, tc.ok)
			}
		})
	}
}

func TestParseCSR(t *testing.T) {
	id := strings.Repeat("0a", 32)
	csrOf := func(key crypto.Signer) []byte {
		t.Helper()
		der, err := agentcert.CreateCSR(id, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	_, edKey, _ := ed25519.GenerateKey(nil)
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	swapped := csrOf(edKey)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	swapped = bytes.Replace(swapped, edKey.Public().(ed25519.PublicKey), otherPub, 1)

	for _, tc := range []struct {
		name string
		der  []byte
		key  crypto.PublicKey // nil: refused
		say  string
	}{
		{"Ed25519", csrOf(edKey), edKey.Public(), ""},
		{"ECDSA P-256", csrOf(p256), p256.Public(), ""},
		{"ECDSA P-384", csrOf(p384), p384.Public(), ""},
		{"RSA", csrOf(rsaKey), nil, "Ed25519 or ECDSA"},
		{"signed by another key than it carries", swapped, nil, "not signed by the key it carries"},
		{"empty", nil, nil, "empty"},
		{"not DER", []byte("CERTIFICATE REQUEST"), nil, "does not parse"},
		{"too large", make([]byte, agentcert.MaxCSRBytes+1), nil, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := agentcert.ParseCSR(tc.der)
			if tc.key == nil {
				if err == nil || !strings.Contains(err.Error(), tc.say) {
					t.Fatalf("ParseCSR = %v, want an error saying %q", err, tc.say)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !key.(interface{ Equal(crypto.PublicKey) bool }).Equal(tc.key) {
				t.Fatal("ParseCSR returned another key")
			}
		})
	}
	// The subject is for people; the CSR still parses as a request.
	if csr, err := x509.ParseCertificateRequest(csrOf(edKey)); err != nil || csr.Subject.CommonName != id {
		t.Fatalf("CreateCSR: %v %v", csr, err)
	}
}
