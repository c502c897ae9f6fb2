package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
)

const (
	fuzzIssuer   = "https://idp.example"
	fuzzAudience = "agtp://server.example"
)

type fuzzKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

// fuzzKeys are the signing keys behind the fixed JWKS. The Ed25519 and
// P-256 keys are fixed so that committed corpus entries signed with them
// stay valid; an RSA key takes too long to derive, so it is generated.
func fuzzKeys(tb testing.TB) []fuzzKey {
	tb.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(0x10 + i)
	}
	d := make([]byte, 32)
	for i := range d {
		d[i] = byte(0x20 + i)
	}
	ec, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	return []fuzzKey{
		{"ed-1", jose.EdDSA, ed25519.NewKeyFromSeed(seed)},
		{"ec-1", jose.ES256, ec},
		{"rsa-1", jose.RS256, r},
	}
}

func fuzzSign(tb testing.TB, k fuzzKey, header map[jose.HeaderKey]any, claims any) string {
	tb.Helper()
	opts := &jose.SignerOptions{ExtraHeaders: header}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}}, opts.WithType("JWT"))
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// fuzzSegments decodes the header and payload of a compact token as
// go-jose does (base64url, padding tolerated), the normal form two
// spellings of one signed token share.
func fuzzSegments(token string) (string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	var out []string
	for _, p := range parts[:2] {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p, "="))
		if err != nil {
			return "", false
		}
		out = append(out, string(b))
	}
	return out[0] + "\x00" + out[1], true
}

// FuzzVerify feeds arbitrary Authorization values to a Verifier with a
// fixed JWKS file. It must never panic, must refuse with an oauth-invalid
// *Error that does not quote the credential, and must accept only a
// token one of the keys signed with valid claims: the header and claims
// it accepts decode to those of such a token, and yield its principal.
func FuzzVerify(f *testing.F) {
	keys := fuzzKeys(f)
	var set jose.JSONWebKeySet
	for _, k := range keys {
		jwk := jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
		set.Keys = append(set.Keys, jwk.Public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		f.Fatal(err)
	}
	v, err := oauth.New(oauth.Options{JWKSFile: path, Issuer: fuzzIssuer, Audiences: []string{fuzzAudience, "other"},
		ClockSkew: 5 * time.Second, MinRefetchInterval: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}

	// Valid until 2100, so committed corpus entries stay valid.
	exp := jwt.NewNumericDate(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	iat := jwt.NewNumericDate(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	valid := map[string]string{} // normal form -> principal
	add := func(tok, principal string) {
		seg, ok := fuzzSegments(tok)
		if !ok {
			f.Fatalf("minted token %q does not split", tok)
		}
		// The seeds must be judged as intended, or the check below is
		// vacuous.
		p, err := v.Verify(context.Background(), "Bearer "+tok)
		if principal != "" {
			if err != nil || p.ID != principal {
				f.Fatalf("valid seed for %s: %+v, %v", principal, p, err)
			}
			valid[seg] = principal
		} else if err == nil {
			f.Fatalf("invalid seed accepted: %+v", p)
		}
		f.Add("Bearer " + tok)
	}
	for _, k := range keys {
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "sub": "alice-" + k.kid,
			"exp": exp, "iat": iat, "scope": "orders:read orders:write"}), "alice-"+k.kid)
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": []string{"x", "other"}, "sub": "bob-" + k.kid,
			"exp": exp, "nbf": iat, "scp": []any{"a", 1}, "agtp_agent_id": strings.Repeat("7f", 32),
			"cnf": map[string]any{"x5t#S256": "bwcK0esc3ACC3DB2Y5_lESsXE8o9ltc05O89jdN-dg2"}}), "bob-"+k.kid)
		// Refused: expired, another issuer, no expiry, no subject, a cnf
		// without a thumbprint.
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "sub": "c", "exp": iat}), "")
		add(fuzzSign(f, k, nil, map[string]any{"iss": "https://evil.example", "aud": fuzzAudience, "sub": "c", "exp": exp}), "")
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "sub": "c"}), "")
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "exp": exp}), "")
		add(fuzzSign(f, k, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "sub": "c", "exp": exp, "cnf": map[string]any{}}), "")
	}
	// A token without kid is tried against every key.
	noKid := keys[0]
	noKid.kid = ""
	add(fuzzSign(f, noKid, nil, map[string]any{"iss": fuzzIssuer, "aud": fuzzAudience, "sub": "no-kid", "exp": exp}), "no-kid")
	hdr := base64.RawURLEncoding.EncodeToString
	claims := hdr([]byte(`{"iss":"` + fuzzIssuer + `","aud":"` + fuzzAudience + `","sub":"mallory","exp":4102444800}`))
	for _, h := range []string{`{"alg":"none"}`, `{"alg":"HS256","kid":"ed-1"}`, `{"alg":"EdDSA","kid":"ed-1","crit":["b64"],"b64":false}`} {
		f.Add("Bearer " + hdr([]byte(h)) + "." + claims + ".")
	}
	for _, s := range []string{"", "Bearer", "Bearer ", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "bearer   a.b.c", "Bearer a.b.c.d.e", "Bearer {}"} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, authorization string) {
		p, err := v.Verify(context.Background(), authorization)
		_, token, _ := strings.Cut(strings.TrimSpace(authorization), " ")
		token = strings.TrimLeft(token, " ")
		if err != nil {
			var oe *oauth.Error
			if !errors.As(err, &oe) || oe.Reason != "oauth-invalid" || oe.Explanation == "" {
				t.Fatalf("error %v is not an oauth-invalid *oauth.Error", err)
			}
			if len(token) >= 16 && strings.Contains(err.Error(), token) {
				t.Fatalf("the error quotes the credential: %v", err)
			}
			if p.ID != "" || p.AgentID != "" || p.Scopes != nil {
				t.Fatalf("a refusal returned principal %+v", p)
			}
			return
		}
		seg, ok := fuzzSegments(token)
		if !ok {
			t.Fatalf("accepted a credential that is not a compact JWS: %q", authorization)
		}
		want, signed := valid[seg]
		if !signed {
			t.Fatalf("accepted a token no key signed with valid claims: %q", authorization)
		}
		if p.ID != want || p.Issuer != fuzzIssuer {
			t.Fatalf("principal %+v, want %s from %s", p, want, fuzzIssuer)
		}
	})
}
