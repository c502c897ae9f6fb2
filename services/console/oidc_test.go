package console

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// issuer is a small real OpenID Connect provider: discovery document,
// JWKS, an authorization endpoint that approves at once, and a token
// endpoint that checks PKCE and signs ID tokens with go-jose. The console
// verifies its tokens on the real go-oidc path.
type issuer struct {
	srv      *httptest.Server
	key      *rsa.PrivateKey
	clientID string
	// claims are what the next ID token says beyond iss, aud, exp, iat
	// and nonce; tamper alters the token before it is signed.
	claims map[string]any
	tamper func(claims map[string]any)
	// signWith, when set, signs with another key than the published one.
	signWith *rsa.PrivateKey

	mu    sync.Mutex
	codes map[string]grant
}

type grant struct{ nonce, challenge, redirect string }

func newIssuer(t *testing.T, clientID string) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &issuer{key: key, clientID: clientID, codes: map[string]grant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		writeJSONTest(w, map[string]any{
			"issuer": iss.srv.URL, "authorization_endpoint": iss.srv.URL + "/authorize", "token_endpoint": iss.srv.URL + "/token",
			"jwks_uri": iss.srv.URL + "/jwks", "response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		writeJSONTest(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != clientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		code := randomToken()
		iss.mu.Lock()
		iss.codes[code] = grant{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
		iss.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		iss.mu.Lock()
		g, ok := iss.codes[r.PostForm.Get("code")]
		delete(iss.codes, r.PostForm.Get("code"))
		iss.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		id, _, _ := r.BasicAuth()
		if r.PostForm.Get("client_id") != "" {
			id = r.PostForm.Get("client_id")
		}
		if !ok || id != clientID || g.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			w.WriteHeader(http.StatusBadRequest)
			writeJSONTest(w, map[string]string{"error": "invalid_grant"})
			return
		}
		now := time.Now()
		claims := map[string]any{"iss": iss.srv.URL, "aud": clientID, "exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(), "nonce": g.nonce}
		for k, v := range iss.claims {
			claims[k] = v
		}
		if iss.tamper != nil {
			iss.tamper(claims)
		}
		signKey := iss.key
		if iss.signWith != nil {
			signKey = iss.signWith
		}
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: signKey}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		payload, _ := json.Marshal(claims)
		jws, err := signer.Sign(payload)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		idToken, _ := jws.CompactSerialize()
		writeJSONTest(w, map[string]any{"access_token": randomToken(), "token_type": "Bearer", "expires_in": 300, "id_token": idToken})
	})
	iss.srv = httptest.NewTLSServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

func writeJSONTest(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// oidcSignIn follows the sign-in from the console to the provider and
// back, as a browser does, and returns the callback's answer.
func oidcSignIn(t *testing.T, tc *testConsole, b *http.Client) (*http.Response, string) {
	t.Helper()
	resp := get(t, b, tc.URL()+"/login/oidc")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), "https://") {
		t.Fatalf("/login/oidc = %d %s, want a redirect to the provider", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = get(t, b, resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("provider's authorization = %d", resp.StatusCode)
	}
	callback := resp.Header.Get("Location")
	if !strings.HasPrefix(callback, tc.URL()+"/login/callback?") {
		t.Fatalf("provider redirected to %s", callback)
	}
	return get(t, b, callback), callback
}

func TestOIDCSignIn(t *testing.T) {
	const clientID = "agtp-console"
	iss := newIssuer(t, clientID)
	tc := startConsole(t, func(c *Config) {
		c.OIDC = OIDCConfig{Issuer: iss.srv.URL, ClientID: clientID, ClientSecret: "s3cret",
			RedirectURL: "https://" + c.Addr + "/login/callback", AllowedGroups: []string{"agtp-operators"}, HTTPClient: iss.srv.Client()}
	})
	rogue, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	member := map[string]any{"sub": "u-1", "email": "alice@example.test", "groups": []string{"staff", "agtp-operators"}}
	tests := []struct {
		name     string
		claims   map[string]any
		tamper   func(map[string]any)
		signWith *rsa.PrivateKey
		want     int
	}{
		{name: "member of an allowed group", claims: member, want: http.StatusOK},
		{name: "in no allowed group", claims: map[string]any{"sub": "u-2", "email": "mallory@example.test", "groups": []string{"staff"}}, want: http.StatusForbidden},
		{name: "no groups claim", claims: map[string]any{"sub": "u-3", "email": "eve@example.test"}, want: http.StatusForbidden},
		{name: "signed with an unpublished key", claims: member, signWith: rogue, want: http.StatusUnauthorized},
		{name: "for another client", claims: member, tamper: func(c map[string]any) { c["aud"] = "someone-else" }, want: http.StatusUnauthorized},
		{name: "from another issuer", claims: member, tamper: func(c map[string]any) { c["iss"] = "https://idp.evil.example" }, want: http.StatusUnauthorized},
		{name: "expired", claims: member, tamper: func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }, want: http.StatusUnauthorized},
		{name: "another sign-in's nonce", claims: member, tamper: func(c map[string]any) { c["nonce"] = randomToken() }, want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iss.claims, iss.tamper, iss.signWith = tt.claims, tt.tamper, tt.signWith
			b := tc.browser(t, iss.srv.Certificate())
			resp, callback := oidcSignIn(t, tc, b)
			if resp.StatusCode != tt.want {
				t.Fatalf("callback = %d, want %d", resp.StatusCode, tt.want)
			}
			signedIn := get(t, b, tc.URL()+"/health").StatusCode == http.StatusOK
			if signedIn != (tt.want == http.StatusOK) {
				t.Fatalf("signed in = %v after a callback of %d", signedIn, resp.StatusCode)
			}
			if tt.want != http.StatusOK {
				return
			}
			if p := tc.person(t, b); p != "alice@example.test" {
				t.Fatalf("signed in as %q, want the e-mail of the ID token", p)
			}
			// The callback's state was used up: replayed in another
			// browser, or in this one, it signs no one in.
			other := tc.browser(t, iss.srv.Certificate())
			if resp := get(t, other, callback); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("replayed callback in another browser = %d, want 401", resp.StatusCode)
			}
			if resp := get(t, b, callback); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("replayed callback = %d, want 401", resp.StatusCode)
			}
		})
	}
	t.Run("a callback in a browser that did not start the sign-in", func(t *testing.T) {
		iss.claims, iss.tamper, iss.signWith = member, nil, nil
		starter := tc.browser(t, iss.srv.Certificate())
		resp := get(t, starter, tc.URL()+"/login/oidc")
		resp = get(t, starter, resp.Header.Get("Location"))
		victim := tc.browser(t, iss.srv.Certificate())
		if resp := get(t, victim, resp.Header.Get("Location")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("callback without the binding cookie = %d, want 401", resp.StatusCode)
		}
	})
}

// person is who b's session is for.
func (tc *testConsole) person(t *testing.T, b *http.Client) string {
	t.Helper()
	u, _ := url.Parse(tc.URL())
	for _, ck := range b.Jar.Cookies(u) {
		if se, ok := tc.sessions.get(context.Background(), ck.Value); ck.Name == cookieName && ok {
			return se.person
		}
	}
	return ""
}
