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
	"os"
	"path/filepath"
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
	callback := startAtProvider(t, tc, b)
	return get(t, b, callback), callback
}

// startAtProvider starts a sign-in in b and follows it to the provider,
// which approves it; it returns the callback the provider sends b to,
// not yet followed.
func startAtProvider(t *testing.T, tc *testConsole, b *http.Client) string {
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
	return callback
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
	member := map[string]any{"sub": "u-1", "email": "alice@example.test", "email_verified": true, "groups": []string{"staff", "agtp-operators"}}
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

// withOIDC configures a console to sign people in through iss: members
// of agtp-operators may, and the login cookie is sealed with the secret
// in keyFile (empty: a random one of the console's process).
func withOIDC(iss *issuer, keyFile string) func(*Config) {
	return func(c *Config) {
		c.OIDC = OIDCConfig{Issuer: iss.srv.URL, ClientID: iss.clientID, ClientSecret: "s3cret",
			RedirectURL: "https://" + c.Addr + "/login/callback", AllowedGroups: []string{"agtp-operators"},
			LoginKeyFile: keyFile, HTTPClient: iss.srv.Client()}
	}
}

// loginKeyFile writes a login key for consoles to share.
func loginKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "console-login.key")
	if err := os.WriteFile(path, []byte(randomToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loginCookieOf is b's login cookie at tc, or "".
func loginCookieOf(tc *testConsole, b *http.Client) string {
	u, _ := url.Parse(tc.URL())
	for _, ck := range b.Jar.Cookies(u) {
		if ck.Name == loginCookie {
			return ck.Value
		}
	}
	return ""
}

func setLoginCookie(tc *testConsole, b *http.Client, value string) {
	u, _ := url.Parse(tc.URL())
	ck := &http.Cookie{Name: loginCookie, Value: value, Path: "/", Secure: true}
	if value == "" {
		ck.MaxAge = -1
	}
	b.Jar.SetCookies(u, []*http.Cookie{ck})
}

var operator = map[string]any{"sub": "u-1", "email": "alice@example.test", "email_verified": true, "groups": []string{"agtp-operators"}}

// TestOIDCSignInAfterAFloodOfStartedSignIns pins that starting a sign-in
// keeps nothing on the console: more anonymous starts than the console
// ever kept (1,000) crowd out no one, and an operator still signs in.
func TestOIDCSignInAfterAFloodOfStartedSignIns(t *testing.T) {
	iss := newIssuer(t, "agtp-console")
	iss.claims = operator
	tc := startConsole(t, withOIDC(iss, ""))
	anon := tc.browser(t)
	anon.Jar = nil
	for i := range 1100 {
		resp := get(t, anon, tc.URL()+"/login/oidc")
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("anonymous start %d = %d, want 302 to the provider", i+1, resp.StatusCode)
		}
		if i == 0 {
			// The login cookie: host-only, script cannot read it, and it
			// comes back with the provider's cross-site redirect (Lax).
			sc := resp.Header.Get("Set-Cookie")
			for _, attr := range []string{loginCookie + "=", "Path=/", "Max-Age=600", "HttpOnly", "Secure", "SameSite=Lax"} {
				if !strings.Contains(sc, attr) {
					t.Fatalf("login cookie %q lacks %s", sc, attr)
				}
			}
			if strings.Contains(strings.ToLower(sc), "domain=") {
				t.Fatalf("login cookie %q names a domain", sc)
			}
		}
	}
	b := tc.browser(t, iss.srv.Certificate())
	if resp, _ := oidcSignIn(t, tc, b); resp.StatusCode != http.StatusOK {
		t.Fatalf("the operator's sign-in after 1,100 anonymous starts = %d, want 200", resp.StatusCode)
	}
	if p := tc.person(t, b); p != "alice@example.test" {
		t.Fatalf("signed in as %q", p)
	}
}

// TestOIDCCallbackNeedsItsLoginCookie pins the sealed login cookie: the
// callback is refused (401, no session) when the cookie is missing,
// altered, sealed under another key, expired or from the future, or
// another sign-in's, or when the state is not the cookie's.
func TestOIDCCallbackNeedsItsLoginCookie(t *testing.T) {
	iss := newIssuer(t, "agtp-console")
	iss.claims = operator
	tc := startConsole(t, withOIDC(iss, ""))
	other := newOIDCLogin(tc.cfg.OIDC, []byte(randomToken()))
	// reseal opens b's login cookie and seals what it says, changed by
	// change, with the console's key (or another's).
	reseal := func(t *testing.T, o *oidcLogin, b *http.Client, change func(*loginState)) {
		t.Helper()
		ls, ok := tc.oidc.open(loginCookieOf(tc, b), time.Now())
		if !ok {
			t.Fatal("the console's own login cookie does not open")
		}
		change(&ls)
		v, err := o.seal(ls)
		if err != nil {
			t.Fatal(err)
		}
		setLoginCookie(tc, b, v)
	}
	tests := []struct {
		name string
		// alter changes b's cookies before the callback and returns the
		// callback to follow.
		alter func(t *testing.T, b *http.Client, callback string) string
		want  int
	}{
		{name: "as started", alter: func(_ *testing.T, _ *http.Client, cb string) string { return cb }, want: http.StatusOK},
		{name: "no login cookie", alter: func(_ *testing.T, b *http.Client, cb string) string {
			setLoginCookie(tc, b, "")
			return cb
		}, want: http.StatusUnauthorized},
		{name: "an altered login cookie", alter: func(_ *testing.T, b *http.Client, cb string) string {
			v := []byte(loginCookieOf(tc, b))
			v[len(v)/2] = flip(v[len(v)/2])[0]
			setLoginCookie(tc, b, string(v))
			return cb
		}, want: http.StatusUnauthorized},
		{name: "not a sealed cookie", alter: func(_ *testing.T, b *http.Client, cb string) string {
			setLoginCookie(tc, b, randomToken())
			return cb
		}, want: http.StatusUnauthorized},
		{name: "sealed under another key", alter: func(t *testing.T, b *http.Client, cb string) string {
			reseal(t, other, b, func(*loginState) {})
			return cb
		}, want: http.StatusUnauthorized},
		{name: "expired", alter: func(t *testing.T, b *http.Client, cb string) string {
			reseal(t, tc.oidc, b, func(ls *loginState) { ls.Started = time.Now().Add(-pendingTTL - time.Second).Unix() })
			return cb
		}, want: http.StatusUnauthorized},
		{name: "started in the future", alter: func(t *testing.T, b *http.Client, cb string) string {
			reseal(t, tc.oidc, b, func(ls *loginState) { ls.Started = time.Now().Add(time.Hour).Unix() })
			return cb
		}, want: http.StatusUnauthorized},
		{name: "another sign-in's login cookie", alter: func(t *testing.T, b *http.Client, cb string) string {
			o := tc.browser(t, iss.srv.Certificate())
			if resp := get(t, o, tc.URL()+"/login/oidc"); resp.StatusCode != http.StatusFound {
				t.Fatalf("start = %d", resp.StatusCode)
			}
			setLoginCookie(tc, b, loginCookieOf(tc, o))
			return cb
		}, want: http.StatusUnauthorized},
		{name: "another state", alter: func(_ *testing.T, _ *http.Client, cb string) string {
			u, _ := url.Parse(cb)
			q := u.Query()
			q.Set("state", randomToken())
			u.RawQuery = q.Encode()
			return u.String()
		}, want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tc.browser(t, iss.srv.Certificate())
			callback := startAtProvider(t, tc, b)
			if loginCookieOf(tc, b) == "" {
				t.Fatal("no login cookie after the start")
			}
			if resp := get(t, b, tt.alter(t, b, callback)); resp.StatusCode != tt.want {
				t.Fatalf("callback = %d, want %d", resp.StatusCode, tt.want)
			}
			if signedIn := tc.person(t, b) != ""; signedIn != (tt.want == http.StatusOK) {
				t.Fatalf("signed in = %v", signedIn)
			}
			if loginCookieOf(tc, b) != "" {
				t.Fatal("the callback left the login cookie in the browser")
			}
		})
	}
}

// TestOIDCSignInCompletesOnAnotherReplica pins that the console keeps no
// started sign-in: one started on a console completes on another behind
// the same URL that holds the same login key, and not on one without it.
func TestOIDCSignInCompletesOnAnotherReplica(t *testing.T) {
	iss := newIssuer(t, "agtp-console")
	iss.claims = operator
	key := loginKeyFile(t)
	one := startConsole(t, withOIDC(iss, key))
	// Replicas share the URL the provider sends people back to.
	replica := func(keyFile string) func(*Config) {
		return func(c *Config) {
			withOIDC(iss, keyFile)(c)
			c.OIDC.RedirectURL = one.cfg.OIDC.RedirectURL
		}
	}
	two, stranger := startConsole(t, replica(key)), startConsole(t, replica(""))
	tests := []struct {
		name string
		at   *testConsole
		want int
	}{
		{name: "another replica with the same login key", at: two, want: http.StatusOK},
		{name: "a console with a login key of its own", at: stranger, want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := one.browser(t, iss.srv.Certificate())
			callback := strings.Replace(startAtProvider(t, one, b), one.URL(), tt.at.URL(), 1)
			if resp := get(t, b, callback); resp.StatusCode != tt.want {
				t.Fatalf("callback at the other console = %d, want %d", resp.StatusCode, tt.want)
			}
			want := ""
			if tt.want == http.StatusOK {
				want = "alice@example.test"
			}
			if p := tt.at.person(t, b); p != want {
				t.Fatalf("signed in at the other console as %q, want %q", p, want)
			}
		})
	}
}

// TestOIDCPersonIsAVerifiedEmailElseTheSubject pins who a sign-in is for:
// the ID token's email only when email_verified is JSON true, else its
// subject; a name with a space or a control character signs no one in.
func TestOIDCPersonIsAVerifiedEmailElseTheSubject(t *testing.T) {
	iss := newIssuer(t, "agtp-console")
	tc := startConsole(t, withOIDC(iss, ""))
	tests := []struct {
		name   string
		claims map[string]any
		want   string // "" is refused (401)
	}{
		{name: "verified email", claims: map[string]any{"sub": "u-1", "email": "alice@example.test", "email_verified": true}, want: "alice@example.test"},
		{name: "unverified email", claims: map[string]any{"sub": "u-1", "email": "bob@example.test", "email_verified": false}, want: "u-1"},
		{name: "email_verified missing", claims: map[string]any{"sub": "u-1", "email": "bob@example.test"}, want: "u-1"},
		{name: "email_verified the string true", claims: map[string]any{"sub": "u-1", "email": "bob@example.test", "email_verified": "true"}, want: "u-1"},
		{name: "email_verified 1", claims: map[string]any{"sub": "u-1", "email": "bob@example.test", "email_verified": 1}, want: "u-1"},
		{name: "verified, no email", claims: map[string]any{"sub": "u-1", "email_verified": true}, want: "u-1"},
		{name: "unverified email with a space", claims: map[string]any{"sub": "u-1", "email": "bob smith@example.test"}, want: "u-1"},
		{name: "verified email with a space", claims: map[string]any{"sub": "u-1", "email": "alice smith@example.test", "email_verified": true}},
		{name: "verified email with a newline", claims: map[string]any{"sub": "u-1", "email": "alice@example.test\nperson=bob", "email_verified": true}},
		{name: "verified email with a NUL", claims: map[string]any{"sub": "u-1", "email": "alice@example.test\x00", "email_verified": true}},
		{name: "verified email with a no-break space", claims: map[string]any{"sub": "u-1", "email": "alice\u00a0@example.test", "email_verified": true}},
		{name: "verified email with a zero-width space", claims: map[string]any{"sub": "u-1", "email": "alice\u200b@example.test", "email_verified": true}},
		{name: "subject with a space", claims: map[string]any{"sub": "u 1", "email": "bob@example.test"}},
		{name: "subject with a tab", claims: map[string]any{"sub": "u-1\tadmin"}},
		{name: "subject with an escape", claims: map[string]any{"sub": "u-1\x1b[2J"}},
		{name: "no subject", claims: map[string]any{"email": "bob@example.test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iss.claims = map[string]any{"groups": []string{"agtp-operators"}}
			for k, v := range tt.claims {
				iss.claims[k] = v
			}
			b := tc.browser(t, iss.srv.Certificate())
			resp, _ := oidcSignIn(t, tc, b)
			want := http.StatusOK
			if tt.want == "" {
				want = http.StatusUnauthorized
			}
			if resp.StatusCode != want {
				t.Fatalf("callback = %d, want %d", resp.StatusCode, want)
			}
			if p := tc.person(t, b); p != tt.want {
				t.Fatalf("signed in as %q, want %q", p, tt.want)
			}
		})
	}
}
