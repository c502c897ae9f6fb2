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
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
)

const (
	issuer   = "https://idp.example"
	audience = "agtp://server.example"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

type key struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

func newKeys(t *testing.T) (rsaKey, ecKey, edKey key) {
	t.Helper()
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{"rsa-1", jose.RS256, r}, key{"ec-1", jose.ES256, e}, key{"ed-1", jose.EdDSA, ed}
}

func jwks(t *testing.T, keys ...key) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		jwk := jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
		set.Keys = append(set.Keys, jwk.Public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeJWKS(t *testing.T, path string, keys ...key) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, jwks(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type claims struct {
	jwt.Claims
	Scope string `json:"scope,omitempty"`
	Email string `json:"email,omitempty"`
}

func validClaims() claims {
	now := time.Now()
	return claims{Claims: jwt.Claims{
		Issuer: issuer, Subject: "alice", Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour)),
	}}
}

func sign(t *testing.T, k key, c any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func newVerifier(t *testing.T, o oauth.Options) *oauth.Verifier {
	t.Helper()
	v, err := oauth.New(o, discard)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fileOptions(path string) oauth.Options {
	return oauth.Options{JWKSFile: path, Issuer: issuer, Audiences: []string{audience}, ClockSkew: 5 * time.Second}
}

func TestBearerTokensAreVerifiedAgainstTheJWKS(t *testing.T) {
	rsaKey, ecKey, edKey := newKeys(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, rsaKey, ecKey, edKey)
	v := newVerifier(t, fileOptions(path))

	otherRSA, _, _ := newKeys(t)
	otherRSA.kid = rsaKey.kid // same kid, wrong key: a forged signature

	expired := validClaims()
	expired.Expiry = jwt.NewNumericDate(time.Now().Add(-time.Minute))
	withinSkew := validClaims()
	withinSkew.Expiry = jwt.NewNumericDate(time.Now().Add(-2 * time.Second))
	future := validClaims()
	future.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour))
	wrongAud := validClaims()
	wrongAud.Audience = jwt.Audience{"agtp://other.example"}
	wrongIss := validClaims()
	wrongIss.Issuer = "https://evil.example"
	noExp := validClaims()
	noExp.Expiry = nil
	noSub := validClaims()
	noSub.Subject = ""

	noneToken := b64(map[string]string{"alg": "none", "typ": "JWT"}) + "." + b64(validClaims()) + "."
	hmacSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, nil)
	hmacToken, _ := jwt.Signed(hmacSigner).Claims(validClaims()).Serialize()

	for _, tc := range []struct {
		name, auth, wantWhy string
	}{
		{"RS256 valid", "Bearer " + sign(t, rsaKey, validClaims()), ""},
		{"ES256 valid", "Bearer " + sign(t, ecKey, validClaims()), ""},
		{"EdDSA valid", "Bearer " + sign(t, edKey, validClaims()), ""},
		{"scheme is case-insensitive", "bearer " + sign(t, rsaKey, validClaims()), ""},
		{"expired within clock skew", "Bearer " + sign(t, rsaKey, withinSkew), ""},
		{"expired", "Bearer " + sign(t, rsaKey, expired), "expired"},
		{"wrongly signed", "Bearer " + sign(t, otherRSA, validClaims()), "signature"},
		{"wrong audience", "Bearer " + sign(t, rsaKey, wrongAud), "audience"},
		{"wrong issuer", "Bearer " + sign(t, rsaKey, wrongIss), "issuer"},
		{"not yet valid", "Bearer " + sign(t, rsaKey, future), "not valid yet"},
		{"no expiry", "Bearer " + sign(t, rsaKey, noExp), "no expiry"},
		{"no subject", "Bearer " + sign(t, rsaKey, noSub), "sub"},
		{"alg none", "Bearer " + noneToken, "allowed algorithm"},
		{"HS256 refused", "Bearer " + hmacToken, "allowed algorithm"},
		{"ES384 not in the allow-list", "Bearer " + sign(t, key{"ec-1", jose.ES384, mustEC(t, elliptic.P384())}, validClaims()), "allowed algorithm"},
		{"basic scheme", "Basic YWxpY2U6c2VjcmV0", "Bearer"},
		{"garbage", "Bearer not.a.jwt", "allowed algorithm"},
		{"too long", "Bearer " + strings.Repeat("a", 9000), "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), tc.auth)
			if tc.wantWhy == "" {
				if err != nil || p.ID != "alice" {
					t.Fatalf("Verify = %+v, %v; want principal alice", p, err)
				}
				return
			}
			var oe *oauth.Error
			if !errors.As(err, &oe) || oe.Reason != "oauth-invalid" {
				t.Fatalf("Verify error = %v; want oauth-invalid", err)
			}
			if !strings.Contains(oe.Explanation, tc.wantWhy) {
				t.Fatalf("explanation %q does not say %q", oe.Explanation, tc.wantWhy)
			}
			if strings.Contains(oe.Error(), strings.TrimPrefix(tc.auth, "Bearer ")) {
				t.Fatal("the error quotes the token")
			}
		})
	}
}

func mustEC(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestPrincipalClaimAndScopes(t *testing.T) {
	rsaKey, _, _ := newKeys(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, rsaKey)
	o := fileOptions(path)
	o.PrincipalClaim = "email"
	o.MethodScopes = map[string][]string{"PURCHASE": {"payments.write"}}
	v := newVerifier(t, o)
	c := validClaims()
	c.Email = "alice@example.com"
	c.Scope = "openid payments.read"
	p, err := v.Verify(context.Background(), "Bearer "+sign(t, rsaKey, c))
	if err != nil || p.ID != "alice@example.com" {
		t.Fatalf("Verify = %+v, %v; want the email claim", p, err)
	}
	if missing, ok := v.MissingScope("PURCHASE", p); !ok || missing != "payments.write" {
		t.Fatalf("MissingScope = %q, %v; want payments.write", missing, ok)
	}
	if _, ok := v.MissingScope("QUERY", p); ok {
		t.Fatal("QUERY needs no OAuth scope")
	}
}

func TestFileRotationIsPickedUpOnAnUnknownKid(t *testing.T) {
	oldKey, _, _ := newKeys(t)
	newKey, _, _ := newKeys(t)
	newKey.kid = "rsa-2"
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, oldKey)
	o := fileOptions(path)
	o.MinRefetchInterval = time.Millisecond
	v := newVerifier(t, o)
	if _, err := v.Verify(context.Background(), "Bearer "+sign(t, newKey, validClaims())); err == nil {
		t.Fatal("a token signed with a key not yet published verified")
	}
	writeJWKS(t, path, oldKey, newKey)
	time.Sleep(2 * time.Millisecond)
	if _, err := v.Verify(context.Background(), "Bearer "+sign(t, newKey, validClaims())); err != nil {
		t.Fatalf("token with the rotated-in key: %v", err)
	}
}

func TestJWKSFromHTTPSIsCachedAndRefetchesAreBounded(t *testing.T) {
	rsaKey, _, _ := newKeys(t)
	rotated, _, _ := newKeys(t)
	rotated.kid = "rsa-2"
	var fetches atomic.Int32
	var mu sync.Mutex
	published := jwks(t, rsaKey)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(published)
	}))
	t.Cleanup(srv.Close)

	o := oauth.Options{JWKSURL: srv.URL + "/jwks", Issuer: issuer, Audiences: []string{audience},
		HTTPClient: srv.Client(), MinRefetchInterval: 200 * time.Millisecond}
	v := newVerifier(t, o)
	if fetches.Load() != 0 {
		t.Fatal("the URL was fetched before first use")
	}
	good := "Bearer " + sign(t, rsaKey, validClaims())
	for i := 0; i < 20; i++ {
		if _, err := v.Verify(context.Background(), good); err != nil {
			t.Fatalf("verify %d: %v", i, err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for 20 tokens with a known key, want 1 (cached)", n)
	}

	// Tokens naming an unknown kid may trigger at most one fetch per
	// MinRefetchInterval.
	unknown := "Bearer " + sign(t, rotated, validClaims())
	for i := 0; i < 50; i++ {
		_, _ = v.Verify(context.Background(), unknown)
	}
	if n := fetches.Load(); n > 2 {
		t.Fatalf("%d fetches after 50 unknown-kid tokens, want at most 2", n)
	}

	mu.Lock()
	published = jwks(t, rsaKey, rotated)
	mu.Unlock()
	time.Sleep(250 * time.Millisecond)
	if _, err := v.Verify(context.Background(), unknown); err != nil {
		t.Fatalf("token with the rotated key after the refetch gap: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	base := oauth.Options{JWKSFile: "/x", Issuer: issuer, Audiences: []string{audience}}
	for _, tc := range []struct {
		name string
		mod  func(*oauth.Options)
		ok   bool
	}{
		{"valid", func(*oauth.Options) {}, true},
		{"disabled", func(o *oauth.Options) { *o = oauth.Options{} }, true},
		{"required methods without keys", func(o *oauth.Options) { *o = oauth.Options{RequiredOnMethods: []string{"EXECUTE"}} }, false},
		{"alg none", func(o *oauth.Options) { o.Algorithms = []string{"none"} }, false},
		{"HS256", func(o *oauth.Options) { o.Algorithms = []string{"HS256"} }, false},
		{"http url", func(o *oauth.Options) { o.JWKSFile = ""; o.JWKSURL = "http://idp.example/jwks" }, false},
		{"file and url", func(o *oauth.Options) { o.JWKSURL = "https://idp.example/jwks" }, false},
		{"no issuer", func(o *oauth.Options) { o.Issuer = "" }, false},
		{"no audience", func(o *oauth.Options) { o.Audiences = nil }, false},
	} {
		o := base
		tc.mod(&o)
		if err := o.WithDefaults().Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestBadJWKSFileFailsAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := oauth.New(fileOptions(path), discard); err == nil {
		t.Fatal("a JWKS holding only a symmetric key was accepted")
	}
}

// TestJWKSRedirectsAreFollowedOnlyToHTTPS: the https JWKS URL redirecting
// to plain http loads no keys (the http server is never asked), so a
// token the http server's keys would verify is refused; a redirect to
// another https URL is followed.
func TestJWKSRedirectsAreFollowedOnlyToHTTPS(t *testing.T) {
	rsaKey, _, _ := newKeys(t)
	published := jwks(t, rsaKey)
	serve := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(published)
	}
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		serve(w, r)
	}))
	t.Cleanup(plain.Close)
	other := httptest.NewTLSServer(http.HandlerFunc(serve))
	t.Cleanup(other.Close)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-http":
			http.Redirect(w, r, plain.URL+"/jwks", http.StatusFound)
		case "/to-https":
			http.Redirect(w, r, other.URL+"/jwks", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	good := "Bearer " + sign(t, rsaKey, validClaims())
	for _, tc := range []struct {
		path string
		ok   bool
	}{{"/to-http", false}, {"/to-https", true}} {
		v := newVerifier(t, oauth.Options{JWKSURL: srv.URL + tc.path, Issuer: issuer, Audiences: []string{audience}, HTTPClient: srv.Client()})
		_, err := v.Verify(context.Background(), good)
		if (err == nil) != tc.ok {
			t.Errorf("JWKS behind %s: verify = %v, want ok %v", tc.path, err, tc.ok)
		}
	}
	if n := plainHits.Load(); n != 0 {
		t.Errorf("the plain http JWKS was fetched %d times", n)
	}
}

// TestDefaultJWKSClientUsesNoProxy: the default client reaches the IdP
// directly, whatever HTTPS_PROXY says (the proxy here is a listener that
// counts connections).
func TestDefaultJWKSClientUsesNoProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var proxied atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			proxied.Add(1)
			_ = c.Close()
		}
	}()
	t.Setenv("HTTPS_PROXY", "http://"+ln.Addr().String())
	t.Setenv("https_proxy", "http://"+ln.Addr().String())
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	rsaKey, _, _ := newKeys(t)
	v := newVerifier(t, oauth.Options{JWKSURL: "https://idp.example.invalid/jwks", Issuer: issuer, Audiences: []string{audience},
		FetchTimeout: 2 * time.Second})
	if _, err := v.Verify(context.Background(), "Bearer "+sign(t, rsaKey, validClaims())); err == nil {
		t.Fatal("a token verified without a reachable JWKS")
	}
	if n := proxied.Load(); n != 0 {
		t.Fatalf("the JWKS fetch went through the environment's proxy (%d connections)", n)
	}
}
