package manifest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/jcs"
)

func TestSignVerifyJCS(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	s, err := NewSigner(priv, "k1")
	if err != nil {
		t.Fatal(err)
	}
	body, err := Finish(map[string]any{"b": 1, "a": "x", "manifest_signature": "stale"}, s)
	if err != nil {
		t.Fatal(err)
	}
	// The body is JCS: re-canonicalising changes nothing.
	if c, _ := jcs.Canonicalize(body); string(c) != string(body) {
		t.Fatalf("not canonical: %s", body)
	}
	if kid, err := Verify(body, pub); err != nil || kid != "k1" {
		t.Fatalf("verify: %q %v", kid, err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if _, err := Verify(body, other); err == nil {
		t.Fatal("verified with another key")
	}
	if strings.Count(string(body), "..") != 1 {
		t.Fatalf("signature is not a detached compact JWS: %s", body)
	}
	unsigned, _ := Finish(map[string]any{"a": "x"}, nil)
	if string(unsigned) != `{"a":"x","manifest_signature":null}` {
		t.Fatalf("unsigned body %s", unsigned)
	}
	if _, err := Verify(unsigned, pub); err == nil {
		t.Fatal("unsigned manifest verified")
	}
	if ETag(body) == ETag(unsigned) || !strings.HasPrefix(ETag(body), `"`) {
		t.Fatal("etag")
	}
}

func TestNewSignerRefusesOtherKeys(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := NewSigner(ec, "k"); err == nil {
		t.Fatal("ECDSA key accepted")
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	if _, err := NewSigner(priv, ""); err == nil {
		t.Fatal("empty kid accepted")
	}
}
