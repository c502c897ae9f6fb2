package testkit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TokenIssuer signs OAuth access tokens (EdDSA JWTs) with a key whose
// JWKS it wrote to a file, for a policysvc configured to trust it.
type TokenIssuer struct {
	// Issuer and Audience are the iss and aud of every token.
	Issuer, Audience string
	// JWKSFile holds the public key set.
	JWKSFile string
	key      ed25519.PrivateKey
}

// NewTokenIssuer makes an issuer named issuer for audience.
func NewTokenIssuer(t testing.TB, issuer, audience string) *TokenIssuer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "test", Algorithm: string(jose.EdDSA), Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, set, 0o600); err != nil {
		t.Fatal(err)
	}
	return &TokenIssuer{Issuer: issuer, Audience: audience, JWKSFile: file, key: key}
}

// OAuthOptions is the "oauth" member of policysvc's options that trusts
// this issuer.
func (ti *TokenIssuer) OAuthOptions() map[string]any {
	return map[string]any{"jwks_file": ti.JWKSFile, "issuer": ti.Issuer, "audiences": []string{ti.Audience}}
}

// Bearer is an Authorization header value carrying a token valid for an
// hour, with the issuer's iss, aud, iat and exp and the given claims
// (which may replace them).
func (ti *TokenIssuer) Bearer(t testing.TB, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: ti.key}, (&jose.SignerOptions{}).WithHeader("kid", "test").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	all := map[string]any{"iss": ti.Issuer, "aud": ti.Audience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	tok, err := jwt.Signed(signer).Claims(all).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tok
}
