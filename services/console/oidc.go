package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/agtpsuite/agtp/services/access"
)

// OIDCConfig is the organisation's OpenID Connect provider, through which
// operators sign in.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (its discovery document is at
	// Issuer + "/.well-known/openid-configuration"). Empty turns OpenID
	// Connect sign-in off.
	Issuer       string
	ClientID     string
	ClientSecret string
	// RedirectURL is the console's callback, <console URL>/login/callback,
	// as registered with the provider.
	RedirectURL string
	// AllowedGroups are the groups whose members may sign in; a person in
	// none of them is refused.
	AllowedGroups []string
	// GroupsClaim is the ID token claim listing the person's groups.
	GroupsClaim string
	// HTTPClient reaches the provider; nil uses http.DefaultClient.
	HTTPClient *http.Client
}

// Enabled reports whether OpenID Connect sign-in is configured.
func (c OIDCConfig) Enabled() bool { return c.Issuer != "" }

// Validate reports what is missing when sign-in is configured.
func (c OIDCConfig) Validate() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	if c.ClientID == "" {
		errs = append(errs, errors.New("oidc: client ID is required"))
	}
	if c.RedirectURL == "" {
		errs = append(errs, errors.New("oidc: redirect URL is required"))
	}
	if len(c.AllowedGroups) == 0 {
		errs = append(errs, errors.New("oidc: name the groups allowed to sign in"))
	}
	return errors.Join(errs...)
}

// pendingTTL bounds how long a started sign-in may take at the provider.
const pendingTTL = 10 * time.Minute

// loginCookie binds a started sign-in to the browser that started it.
// SameSite=Lax, because the provider's redirect back is a cross-site
// navigation that a Strict cookie would not come with.
const loginCookie = "__Host-agtp-console-login"

// oidcLogin runs the authorization code flow with PKCE, state and nonce.
type oidcLogin struct {
	cfg OIDCConfig

	mu       sync.Mutex
	provider *oidc.Provider
	pending  map[string]pendingLogin
}

type pendingLogin struct {
	binding, nonce, verifier string
	expires                  time.Time
}

func newOIDCLogin(cfg OIDCConfig) *oidcLogin {
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	return &oidcLogin{cfg: cfg, pending: map[string]pendingLogin{}}
}

func (o *oidcLogin) client() *http.Client {
	if o.cfg.HTTPClient != nil {
		return o.cfg.HTTPClient
	}
	return http.DefaultClient
}

// discover reads the provider's discovery document once it answers; a
// provider down at start-up does not stop the console.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, *oauth2.Config, error) {
	o.mu.Lock()
	p := o.provider
	o.mu.Unlock()
	if p == nil {
		// The key set fetches later with the context given here, so it
		// carries the client and not the request's deadline.
		np, err := oidc.NewProvider(oidc.ClientContext(context.WithoutCancel(ctx), o.client()), o.cfg.Issuer)
		if err != nil {
			return nil, nil, fmt.Errorf("oidc discovery: %w", err)
		}
		o.mu.Lock()
		if o.provider == nil {
			o.provider = np
		}
		p = o.provider
		o.mu.Unlock()
	}
	return p, &oauth2.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "email", "profile", "groups"},
	}, nil
}

// begin starts a sign-in: the browser gets the binding cookie and is sent
// to the provider.
func (o *oidcLogin) begin(w http.ResponseWriter, r *http.Request) error {
	_, oc, err := o.discover(r.Context())
	if err != nil {
		return err
	}
	state, p := randomToken(), pendingLogin{binding: randomToken(), nonce: randomToken(), verifier: oauth2.GenerateVerifier(), expires: time.Now().Add(pendingTTL)}
	o.mu.Lock()
	for k, v := range o.pending {
		if time.Now().After(v.expires) {
			delete(o.pending, k)
		}
	}
	if len(o.pending) >= maxLinks {
		o.mu.Unlock()
		return errors.New("too many sign-ins in progress; retry shortly")
	}
	o.pending[state] = p
	o.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: p.binding, Path: "/", MaxAge: int(pendingTTL.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, oc.AuthCodeURL(state, oidc.Nonce(p.nonce), oauth2.S256ChallengeOption(p.verifier)), http.StatusFound)
	return nil
}

// errNotAllowed is a verified person outside the allowed groups.
var errNotAllowed = errors.New("you are not in a group allowed to use the console")

// finish completes a sign-in from the provider's redirect and returns the
// person: the code is exchanged, the ID token verified (signature,
// issuer, audience, expiry, nonce) and the groups checked.
func (o *oidcLogin) finish(w http.ResponseWriter, r *http.Request) (string, error) {
	state := r.URL.Query().Get("state")
	o.mu.Lock()
	p, ok := o.pending[state]
	delete(o.pending, state)
	o.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	c, err := r.Cookie(loginCookie)
	if !ok || time.Now().After(p.expires) || err != nil || !csrfMatches(session{csrf: p.binding}, c.Value) {
		return "", errors.New("this sign-in was not started here or has expired; start again")
	}
	if e := r.URL.Query().Get("error"); e != "" {
		return "", fmt.Errorf("the provider refused the sign-in: %.200s", e)
	}
	prov, oc, err := o.discover(r.Context())
	if err != nil {
		return "", err
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, o.client())
	tok, err := oc.Exchange(ctx, r.URL.Query().Get("code"), oauth2.VerifierOption(p.verifier))
	if err != nil {
		return "", fmt.Errorf("code exchange: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", errors.New("the provider returned no ID token")
	}
	idt, err := prov.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(oidc.ClientContext(ctx, o.client()), raw)
	if err != nil {
		return "", fmt.Errorf("ID token: %w", err)
	}
	if !csrfMatches(session{csrf: p.nonce}, idt.Nonce) {
		return "", errors.New("ID token: nonce does not match this sign-in")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return "", fmt.Errorf("ID token claims: %w", err)
	}
	if !o.allowed(claims[o.cfg.GroupsClaim]) {
		return "", errNotAllowed
	}
	person := idt.Subject
	if email, _ := claims["email"].(string); email != "" {
		person = email
	}
	if !access.ValidPerson(person) {
		return "", errors.New("the ID token names no usable person (email or subject)")
	}
	return person, nil
}

func (o *oidcLogin) allowed(groups any) bool {
	list, _ := groups.([]any)
	for _, g := range list {
		if s, ok := g.(string); ok && slices.Contains(o.cfg.AllowedGroups, s) {
			return true
		}
	}
	return false
}
