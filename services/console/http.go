package console

import (
	"context"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/services/access"
)

// maxForm bounds the body of a change: a reason and a few fields.
const maxForm = 16 << 10

// csrfHeader carries the session's CSRF token on htmx requests; plain
// forms carry it as the csrf field.
const csrfHeader = "X-CSRF-Token"

// handler serves a signed-in person.
type handler func(w http.ResponseWriter, r *http.Request, se session) error

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	files := http.FileServerFS(static)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("GET /login/oidc", c.loginOIDC)
	mux.HandleFunc("GET /login/callback", c.loginCallback)
	mux.HandleFunc("GET /login/once", c.loginOnce)
	mux.Handle("POST /logout", c.change(c.logout))
	mux.Handle("GET /{$}", c.view(c.escalationsPage))
	mux.Handle("POST /escalations/{id}/resolve", c.change(c.resolveEscalation))
	mux.Handle("GET /agents", c.view(c.agentsPage))
	mux.Handle("GET /agents/{id}", c.view(c.agentPage))
	mux.Handle("POST /agents/{id}/lifecycle", c.change(c.transition))
	mux.Handle("GET /audit", c.view(c.auditPage))
	mux.Handle("GET /endpoints", c.view(c.endpointsPage))
	mux.Handle("GET /access", c.view(c.accessPage))
	mux.Handle("POST /access/keys/{id}/revoke", c.change(c.revokeKey))
	mux.Handle("POST /access/contracts/{id}/revoke", c.change(c.revokeContract))
	mux.Handle("GET /health", c.view(c.healthPage))
	return c.secured(mux)
}

// secured sets the headers every answer carries: a strict content
// security policy (scripts and styles from the console only; the JWKS
// the browser verifies with may be fetched), no framing, no referrer to
// other sites (a one-time link must not leak; "no-referrer" would also
// make browsers send "Origin: null" on the console's own forms), and no
// caching of pages.
func (c *Console) secured(next http.Handler) http.Handler {
	connect := "'self'"
	if u, err := url.Parse(c.cfg.JWKSURL); err == nil && u.Scheme == "https" && u.Host != "" {
		connect += " https://" + u.Host
	}
	csp := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src " + connect +
		"; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Strict-Transport-Security", "max-age=31536000")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// session returns the request's live session.
func (c *Console) session(r *http.Request) (session, bool) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return session{}, false
	}
	return c.sessions.get(r.Context(), ck.Value)
}

// view serves a page to a signed-in person; anyone else is sent to sign
// in.
func (c *Console) view(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		se, ok := c.session(r)
		if !ok {
			if r.Header.Get("HX-Request") != "" {
				w.Header().Set("HX-Redirect", "/login")
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		c.serve(w, r, se, h)
	})
}

// change serves a change: it needs a session, a request from the
// console's own pages (Origin and Sec-Fetch-Site), and the session's CSRF
// token, compared in constant time.
func (c *Console) change(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		se, ok := c.session(r)
		if !ok {
			c.refuse(w, r, http.StatusUnauthorized, "sign in first")
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			c.refuse(w, r, http.StatusForbidden, "a change must come from the console's own pages (Sec-Fetch-Site "+site+")")
			return
		}
		if origin := r.Header.Get("Origin"); origin != c.URL() {
			c.refuse(w, r, http.StatusForbidden, "a change must come from the console's own origin")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		token := r.Header.Get(csrfHeader)
		if token == "" {
			token = r.PostForm.Get("csrf")
		}
		if !csrfMatches(se, token) {
			c.log.WarnContext(r.Context(), "change refused: CSRF token", "person", se.person, "path", r.URL.Path)
			c.refuse(w, r, http.StatusForbidden, "the form's security token does not belong to your sign-in; reload the page")
			return
		}
		c.serve(w, r, se, h)
	})
}

func (c *Console) serve(w http.ResponseWriter, r *http.Request, se session, h handler) {
	if err := h(w, r, se); err != nil {
		code, msg := httpError(err)
		if code >= 500 {
			c.log.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "person", se.person, "error", err)
		}
		c.refuse(w, r, code, msg)
	}
}

// refuse answers an error: a fragment for htmx, the error page
// otherwise.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if r.Header.Get("HX-Request") != "" {
		// The layout lets htmx swap error answers too; the retarget puts
		// the message in the page's flash area instead of the row.
		w.Header().Set("HX-Retarget", "#flash")
		w.Header().Set("HX-Reswap", "innerHTML")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(code)
		_ = c.pages.fragment(w, "flash", map[string]any{"Error": msg})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = c.pages.render(w, "error", pageData{Title: http.StatusText(code), Data: map[string]any{"Code": code, "Message": msg}})
}

// userError is a problem with what the person entered.
type userError struct {
	code int
	msg  string
}

func (e *userError) Error() string { return e.msg }

func badRequest(msg string) error { return &userError{code: http.StatusBadRequest, msg: msg} }

// httpError maps an error to the status and message the person sees. A
// service's refusal keeps its own message (it names the rule).
func httpError(err error) (int, string) {
	var ue *userError
	if errors.As(err, &ue) {
		return ue.code, ue.msg
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, "a service did not answer in time; retry"
	}
	st, ok := status.FromError(err)
	if !ok {
		return http.StatusInternalServerError, "the console failed; the log has the details"
	}
	code := map[codes.Code]int{
		codes.InvalidArgument: http.StatusBadRequest, codes.NotFound: http.StatusNotFound,
		codes.PermissionDenied: http.StatusForbidden, codes.Unauthenticated: http.StatusForbidden,
		codes.FailedPrecondition: http.StatusConflict, codes.AlreadyExists: http.StatusConflict, codes.Aborted: http.StatusConflict,
		codes.Unavailable: http.StatusServiceUnavailable, codes.DeadlineExceeded: http.StatusGatewayTimeout,
		codes.ResourceExhausted: http.StatusTooManyRequests,
	}[st.Code()]
	if code == 0 {
		return http.StatusBadGateway, "a service failed: " + st.Message()
	}
	return code, st.Message()
}

// rpc is the context of a call the console makes for a person: bounded,
// and naming the person.
func (c *Console) rpc(r *http.Request, se session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), c.rpcLimit)
	return access.ForPerson(ctx, se.person), cancel
}

// done answers a completed change: htmx gets the fragment, a plain form
// is sent back to the page it came from.
func (c *Console) done(w http.ResponseWriter, r *http.Request, back, fragment string, data any) error {
	if r.Header.Get("HX-Request") != "" && fragment != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		return c.pages.fragment(w, fragment, data)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
	return nil
}

// loginPage offers the sign-in.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = c.pages.render(w, "login", pageData{Title: "Sign in", Data: map[string]any{"OIDC": c.oidc != nil, "Error": r.URL.Query().Get("error")}})
}

func (c *Console) loginOIDC(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.refuse(w, r, http.StatusNotFound, "OpenID Connect sign-in is not configured")
		return
	}
	if err := c.oidc.begin(w, r); err != nil {
		c.log.WarnContext(r.Context(), "oidc sign-in not started", "error", err)
		c.refuse(w, r, http.StatusServiceUnavailable, "the sign-in provider is unavailable; retry shortly")
	}
}

func (c *Console) loginCallback(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.refuse(w, r, http.StatusNotFound, "OpenID Connect sign-in is not configured")
		return
	}
	who, err := c.oidc.finish(w, r)
	if err != nil {
		c.log.WarnContext(r.Context(), "oidc sign-in refused", "error", err)
		code := http.StatusUnauthorized
		if errors.Is(err, errNotAllowed) {
			code = http.StatusForbidden
		}
		c.refuse(w, r, code, "sign-in refused: "+err.Error())
		return
	}
	c.signIn(w, r, who.person, "oidc", "subject", who.subject)
}

// loginOnce redeems a one-time sign-in link.
func (c *Console) loginOnce(w http.ResponseWriter, r *http.Request) {
	person, ok := c.sessions.redeem(r.Context(), r.URL.Query().Get("token"))
	if !ok {
		c.refuse(w, r, http.StatusUnauthorized, "this sign-in link was used already or has expired")
		return
	}
	c.signIn(w, r, person, "one-time link")
}

// signIn starts the session. The answer is a page that moves on to the
// console rather than a redirect: a navigation that began at another site
// (the provider) would not send the SameSite=Strict cookie on a redirect.
// The log line names the person and how they signed in, and logAttrs
// (the ID token's subject of an OpenID Connect sign-in).
func (c *Console) signIn(w http.ResponseWriter, r *http.Request, person, how string, logAttrs ...any) {
	if old, ok := c.session(r); ok {
		c.sessions.end(r.Context(), old.id)
	}
	se, err := c.sessions.start(r.Context(), person)
	if err != nil {
		c.log.ErrorContext(r.Context(), "sign-in not started", "person", person, "error", err)
		c.refuse(w, r, http.StatusServiceUnavailable, "the console cannot keep a sign-in just now; retry shortly")
		return
	}
	setCookie(w, se, c.cfg.SessionTimeout)
	c.log.InfoContext(r.Context(), "person signed in", append([]any{"person", person, "via", how}, logAttrs...)...)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = c.pages.render(w, "signedin", pageData{Title: "Signed in", Person: person})
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, se session) error {
	c.sessions.end(r.Context(), se.id)
	clearCookie(w)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// pageData is what every page template gets.
type pageData struct {
	Title  string
	Nav    string
	Person string
	CSRF   string
	Data   any
}

// pages holds the parsed templates: each page is the layout with its own
// content.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"login", "signedin", "error", "escalations", "agents", "agent", "audit", "endpoints", "access", "health"}

func parsePages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/fragments.html", "templates/"+n+".html")
		if err != nil {
			return nil, err
		}
		p.byName[n] = t
	}
	return p, nil
}

func (p *pages) render(w http.ResponseWriter, name string, d pageData) error {
	return p.byName[name].ExecuteTemplate(w, "layout", d)
}

func (p *pages) fragment(w http.ResponseWriter, name string, data any) error {
	return p.byName["escalations"].ExecuteTemplate(w, name, data)
}

// page renders a full page for se.
func (c *Console) page(w http.ResponseWriter, name, nav, title string, se session, data any) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	return c.pages.render(w, name, pageData{Title: title, Nav: nav, Person: se.person, CSRF: se.csrf, Data: data})
}
