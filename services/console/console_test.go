package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/testkit"
)

// testConsole is a console serving HTTPS on loopback with the test PKI's
// console certificate. Its services are not running: the tests here are
// about who may reach the pages, which is decided before any call.
type testConsole struct {
	*Console
	roots *x509.CertPool
}

func startConsole(t *testing.T, mutate func(*Config)) *testConsole {
	t.Helper()
	pki := testkit.PKI(t)
	cfg := Default()
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert(devpki.Console), pki.Key(devpki.Console)
	for _, p := range peerNames {
		cfg.Peers[p] = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := New(ctx, cfg, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console: %v", err)
		}
	})
	roots := x509.NewCertPool()
	b, err := os.ReadFile(pki.CA())
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(b)
	return &testConsole{Console: c, roots: roots}
}

// browser is an HTTP client with a cookie jar that trusts the console
// and does not follow redirects, so each answer is seen as it is.
func (tc *testConsole) browser(t *testing.T, extra ...*x509.Certificate) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := tc.roots.Clone()
	for _, c := range extra {
		roots.AddCert(c)
	}
	return &http.Client{
		Jar:           jar,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// signIn redeems a one-time link in b and returns the session's CSRF
// token.
func (tc *testConsole) signIn(t *testing.T, b *http.Client, person string) string {
	t.Helper()
	link, err := tc.SignInLink(person)
	if err != nil {
		t.Fatal(err)
	}
	resp := get(t, b, link)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("one-time link: %d", resp.StatusCode)
	}
	return tc.csrfOf(t, b)
}

// csrfOf is the CSRF token of b's session.
func (tc *testConsole) csrfOf(t *testing.T, b *http.Client) string {
	t.Helper()
	u, _ := url.Parse(tc.URL())
	for _, ck := range b.Jar.Cookies(u) {
		if ck.Name == cookieName {
			if se, ok := tc.sessions.get(context.Background(), ck.Value); ok {
				return se.csrf
			}
		}
	}
	t.Fatal("no live session in the browser")
	return ""
}

func get(t *testing.T, b *http.Client, u string) *http.Response {
	t.Helper()
	resp, _ := getBody(t, b, u)
	return resp
}

// getBody is get, returning the body too.
func getBody(t *testing.T, b *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := b.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// post sends a form change with the given headers.
func post(t *testing.T, b *http.Client, u string, form url.Values, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestPagesNeedASession(t *testing.T) {
	tc := startConsole(t, nil)
	for _, path := range []string{"/", "/agents", "/agents/x", "/audit", "/endpoints", "/access", "/health"} {
		t.Run(path, func(t *testing.T) {
			b := tc.browser(t)
			resp := get(t, b, tc.URL()+path)
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
				t.Fatalf("GET %s without a session = %d %s, want 303 to /login", path, resp.StatusCode, resp.Header.Get("Location"))
			}
			// A made-up session cookie is no session either.
			u, _ := url.Parse(tc.URL())
			b.Jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: randomToken(), Secure: true, Path: "/"}})
			if resp := get(t, b, tc.URL()+path); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("GET %s with a forged session = %d, want 303", path, resp.StatusCode)
			}
		})
	}
}

func TestOneTimeLinkWorksOnce(t *testing.T) {
	tc := startConsole(t, nil)
	link, err := tc.SignInLink("alice@example.test")
	if err != nil {
		t.Fatal(err)
	}
	first := tc.browser(t)
	resp := get(t, first, link)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first use of the link = %d, want 200", resp.StatusCode)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Domain != "" {
		t.Fatalf("session cookie = %+v, want HttpOnly, Secure, SameSite=Strict, Path=/ and no Domain", ck)
	}
	if resp := get(t, first, tc.URL()+"/login"); resp.StatusCode != http.StatusOK {
		t.Fatalf("login page = %d", resp.StatusCode)
	}
	second := tc.browser(t)
	if resp := get(t, second, link); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("second use of the link = %d with cookies %v, want 401 and no session", resp.StatusCode, resp.Cookies())
	}
	if resp := get(t, second, tc.URL()+"/login/once?token="+randomToken()); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("made-up link = %d, want 401", resp.StatusCode)
	}
	if _, err := tc.SignInLink("two\nlines"); err == nil {
		t.Fatal("a link for a name with a line break was made")
	}
}

func TestChangesNeedSessionOriginAndCSRF(t *testing.T) {
	tc := startConsole(t, nil)
	origin := tc.URL()
	other := tc.browser(t)
	otherToken := tc.signIn(t, other, "bob@example.test")
	// A token of a session that has ended (signed out) and was replaced.
	ended := tc.browser(t)
	endedToken := tc.signIn(t, ended, "alice@example.test")
	if resp := post(t, ended, origin+"/logout", url.Values{"csrf": {endedToken}}, map[string]string{"Origin": origin}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out = %d", resp.StatusCode)
	}
	tc.signIn(t, ended, "alice@example.test")

	tests := []struct {
		name    string
		session bool
		csrf    func(own string) string
		origin  string
		site    string
		header  bool
		want    int
	}{
		{name: "valid, in the form", session: true, csrf: same, origin: origin, site: "same-origin", want: http.StatusSeeOther},
		{name: "valid, in the header (htmx)", session: true, csrf: same, origin: origin, header: true, want: http.StatusSeeOther},
		{name: "no session", session: false, csrf: func(string) string { return otherToken }, origin: origin, want: http.StatusUnauthorized},
		{name: "no token", session: true, csrf: func(string) string { return "" }, origin: origin, want: http.StatusForbidden},
		{name: "forged token", session: true, csrf: func(string) string { return randomToken() }, origin: origin, want: http.StatusForbidden},
		{name: "another session's token", session: true, csrf: func(string) string { return otherToken }, origin: origin, want: http.StatusForbidden},
		{name: "an ended session's token replayed", session: true, csrf: func(string) string { return endedToken }, origin: origin, want: http.StatusForbidden},
		{name: "token with one character changed", session: true, csrf: func(own string) string { return own[:len(own)-1] + flip(own[len(own)-1]) }, origin: origin, want: http.StatusForbidden},
		{name: "another origin", session: true, csrf: same, origin: "https://evil.example", want: http.StatusForbidden},
		{name: "no origin", session: true, csrf: same, origin: "", want: http.StatusForbidden},
		{name: "cross-site fetch", session: true, csrf: same, origin: origin, site: "cross-site", want: http.StatusForbidden},
		{name: "same-site but another origin", session: true, csrf: same, origin: origin, site: "same-site", want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tc.browser(t)
			own := ""
			if tt.session {
				own = tc.signIn(t, b, "carol@example.test")
			}
			token := tt.csrf(own)
			form, headers := url.Values{}, map[string]string{"Origin": tt.origin, "Sec-Fetch-Site": tt.site}
			if tt.header {
				headers[csrfHeader] = token
			} else {
				form.Set("csrf", token)
			}
			resp := post(t, b, origin+"/logout", form, headers)
			if resp.StatusCode != tt.want {
				t.Fatalf("POST /logout = %d, want %d", resp.StatusCode, tt.want)
			}
			// Only an accepted change ends the session.
			page := get(t, b, origin+"/health")
			stillIn := page.StatusCode == http.StatusOK
			if tt.session && stillIn == (tt.want == http.StatusSeeOther) {
				t.Fatalf("after the change (%d) the session is live: %v", resp.StatusCode, stillIn)
			}
		})
	}
}

func same(own string) string { return own }

func flip(b byte) string {
	if b == 'A' {
		return "B"
	}
	return "A"
}

func TestSessionTimeouts(t *testing.T) {
	t.Run("in memory", func(t *testing.T) { testSessionTimeouts(t, "") })
	t.Run("in redis", func(t *testing.T) { testSessionTimeouts(t, testkit.StartRedis(t).URL()) })
}

func testSessionTimeouts(t *testing.T, redisURL string) {
	tc := startConsole(t, func(c *Config) { c.IdleTimeout, c.SessionTimeout, c.RedisURL = 10*time.Minute, time.Hour, redisURL })
	clock := time.Now()
	tc.sessions.mu.Lock()
	tc.sessions.now = func() time.Time { return clock }
	tc.sessions.mu.Unlock()
	advance := func(d time.Duration) {
		tc.sessions.mu.Lock()
		clock = clock.Add(d)
		tc.sessions.mu.Unlock()
	}
	live := func(b *http.Client) bool { return get(t, b, tc.URL()+"/health").StatusCode == http.StatusOK }

	idle := tc.browser(t)
	tc.signIn(t, idle, "alice@example.test")
	advance(9 * time.Minute)
	if !live(idle) {
		t.Fatal("a session used within the idle timeout ended")
	}
	advance(11 * time.Minute)
	if live(idle) {
		t.Fatal("a session idle longer than the idle timeout is live")
	}

	busy := tc.browser(t)
	tc.signIn(t, busy, "alice@example.test")
	for range 6 {
		advance(9 * time.Minute)
		if !live(busy) {
			t.Fatal("a session in use ended before the absolute timeout")
		}
	}
	advance(9 * time.Minute)
	if live(busy) {
		t.Fatal("a session in use for longer than the absolute timeout is live")
	}
}

func TestSecurityHeaders(t *testing.T) {
	tc := startConsole(t, func(c *Config) { c.JWKSURL = "https://127.0.0.1:4443/.well-known/jwks.json" })
	resp := get(t, tc.browser(t), tc.URL()+"/login")
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "connect-src 'self' https://127.0.0.1:4443", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("Referrer-Policy") != "same-origin" || resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers = %v", resp.Header)
	}
}

func TestRefusalOfAnHTMXChangeGoesToTheFlash(t *testing.T) {
	tc := startConsole(t, nil)
	b := tc.browser(t)
	tc.signIn(t, b, "alice@example.test")
	req, err := http.NewRequest(http.MethodPost, tc.URL()+"/logout", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("HX-Request", "true")
	req.Header.Set("Origin", tc.URL())
	req.Header.Set(csrfHeader, randomToken())
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("HX-Retarget") != "#flash" || !strings.Contains(string(body), `class="error"`) {
		t.Fatalf("htmx change with a forged token = %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

// TestAlreadyResolvedEscalationShowsWhoResolvedIt: policysvc's refusal
// of a second resolution (Aborted already-confirmed) reaches the person
// as 409 with its message, which names who resolved the escalation.
func TestAlreadyResolvedEscalationShowsWhoResolvedIt(t *testing.T) {
	const msg = "escalation esc-1 was already resolved: accepted by admin:alice@example.test via operator/console"
	if code, got := httpError(grpcerr.Conflict("already-confirmed", msg)); code != http.StatusConflict || got != msg {
		t.Fatalf("refusal shown as %d %q, want 409 %q", code, got, msg)
	}
}

func TestListPage(t *testing.T) {
	all := []int{1, 2, 3, 4, 5}
	tests := []struct {
		token    string
		want     []int
		wantNext string
		wantErr  bool
	}{
		{token: "", want: []int{1, 2}, wantNext: "2"},
		{token: "2", want: []int{3, 4}, wantNext: "4"},
		{token: "4", want: []int{5}},
		{token: "5", want: []int{}},
		{token: "6", wantErr: true},
		{token: "-1", wantErr: true},
		{token: "x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run("token "+tt.token, func(t *testing.T) {
			p, err := listPage(all, tt.token, 2)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err != nil {
				if code, _ := httpError(err); code != http.StatusBadRequest {
					t.Fatalf("a bad token answers %d, want 400", code)
				}
				return
			}
			if len(p.Items) != len(tt.want) || p.Next != tt.wantNext {
				t.Fatalf("page %v next %q, want %v next %q", p.Items, p.Next, tt.want, tt.wantNext)
			}
			for i := range tt.want {
				if p.Items[i] != tt.want[i] {
					t.Fatalf("page %v, want %v", p.Items, tt.want)
				}
			}
		})
	}
}

// TestSessionsInRedisServeEveryReplica pins sessions kept in Redis: a
// sign-in on one console is a sign-in on another against the same Redis
// (a second replica, or the first one restarted); a one-time link works
// once across them; a sign-out on one ends the session on both; Redis
// holds the session under the SHA-256 of its ID, expiring at the absolute
// timeout, and never the ID itself.
func TestSessionsInRedisServeEveryReplica(t *testing.T) {
	rds := testkit.StartRedis(t)
	withRedis := func(c *Config) { c.RedisURL = rds.URL() }
	one, two := startConsole(t, withRedis), startConsole(t, withRedis)
	b := one.browser(t)
	csrf := one.signIn(t, b, "alice@example.test")
	if resp := get(t, b, two.URL()+"/health"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the other replica answers a signed-in page with %d", resp.StatusCode)
	}
	if got := two.csrfOf(t, b); got != csrf {
		t.Fatal("the other replica has another CSRF token for the session")
	}

	rdb := rds.Client(t)
	keys, err := rdb.Keys(context.Background(), "*console*").Result()
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(one.URL())
	var id string
	for _, ck := range b.Jar.Cookies(u) {
		if ck.Name == cookieName {
			id = ck.Value
		}
	}
	if len(keys) != 1 || strings.Contains(keys[0], id) || !strings.HasSuffix(keys[0], hashOf(id)) {
		t.Fatalf("redis keys %v for session %s, want one named by its hash", keys, id)
	}
	if ttl := rdb.TTL(context.Background(), keys[0]).Val(); ttl <= 0 || ttl > Default().SessionTimeout {
		t.Fatalf("the session expires in %v, want within the absolute timeout", ttl)
	}

	link, err := one.SignInLink("bob@example.test")
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimPrefix(link, one.URL())
	if resp := get(t, two.browser(t), two.URL()+token); resp.StatusCode != http.StatusOK {
		t.Fatalf("a link made on one replica and used on the other = %d", resp.StatusCode)
	}
	if resp := get(t, one.browser(t), link); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the same link again, on the first replica = %d, want 401", resp.StatusCode)
	}

	if resp := post(t, b, two.URL()+"/logout", url.Values{"csrf": {csrf}}, map[string]string{"Origin": two.URL()}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out on the other replica = %d", resp.StatusCode)
	}
	b.Jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: id, Secure: true, Path: "/"}})
	if resp := get(t, b, one.URL()+"/health"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out on the other replica the first answers %d, want 303 to sign in", resp.StatusCode)
	}
}
