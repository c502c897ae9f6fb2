package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/keyfile"
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
	// LoginKeyFile holds the secret (at least 32 bytes, surrounding
	// white space ignored) that the login cookie of a started sign-in is
	// sealed with. Every replica behind one console URL needs the same
	// one, so that a sign-in started on one completes on any. Empty: a
	// random secret of this process, and a sign-in completes only on the
	// replica that started it, and not across a restart of it.
	LoginKeyFile string
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

// minLoginKey is the least secret the login cookie is sealed with.
const minLoginKey = 32

// loginKey is the secret of cfg.LoginKeyFile, or a random one of this
// process; shared reports which.
func (c OIDCConfig) loginKey() (secret []byte, shared bool, err error) {
	if c.LoginKeyFile == "" {
		secret = make([]byte, minLoginKey)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails (Go 1.24+)
		return secret, false, nil
	}
	b, err := keyfile.Read(c.LoginKeyFile)
	if err != nil {
		return nil, false, fmt.Errorf("oidc login key (AGTP_CONSOLE_OIDC_LOGIN_KEY_FILE): %w", err)
	}
	if b = []byte(strings.TrimSpace(string(b))); len(b) < minLoginKey {
		return nil, false, fmt.Errorf("oidc login key %s: %d bytes, want at least %d random ones (openssl rand -base64 32)", c.LoginKeyFile, len(b), minLoginKey)
	}
	return b, true, nil
}

// pendingTTL bounds how long a started sign-in may take at the provider.
const pendingTTL = 10 * time.Minute

// loginSkew is how far in the future a sign-in may say it started: the
// replica that started it may run a little ahead of this one.
const loginSkew = time.Minute

// loginCookie carries a started sign-in, sealed, in the browser that
// started it: the console keeps nothing per started sign-in.
// SameSite=Lax, because the provider's redirect back is a cross-site
// navigation that a Strict cookie would not come with.
const loginCookie = "__Host-agtp-console-login"

// loginSealInfo names what the sealing keys derived from the login key
// are for, and loginVersion the cookie's format.
const (
	loginSealInfo = "agtp console oidc login cookie"
	loginVersion  = 1
	loginSaltLen  = 32
)

// loginState is a started sign-in: what the callback must match (state),
// what the ID token must carry (nonce), what redeems the code (the PKCE
// verifier), and when it started.
type loginState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Started  int64  `json:"t"` // Unix seconds
}

// oidcLogin runs the authorization code flow with PKCE, state and nonce.
type oidcLogin struct {
	cfg OIDCConfig
	// secret is the login key the login cookie is sealed with.
	secret []byte

	mu       sync.Mutex
	provider *oidc.Provider
}

func newOIDCLogin(cfg OIDCConfig, secret []byte) *oidcLogin {
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	return &oidcLogin{cfg: cfg, secret: secret}
}

// aead is AES-256-GCM under the key and nonce derived (HKDF-SHA256) from
// the login key and a cookie's own random salt: each cookie is sealed
// under a key of its own, so no number of sign-ins started wears out the
// login key (GCM's random 96-bit nonces would after about 2^32).
func (o *oidcLogin) aead(salt []byte) (cipher.AEAD, []byte, error) {
	km, err := hkdf.Key(sha256.New, o.secret, salt, loginSealInfo, 32+12)
	if err != nil {
		return nil, nil, err
	}
	block, err := aes.NewCipher(km[:32])
	if err != nil {
		return nil, nil, err
	}
	g, err := cipher.NewGCM(block)
	return g, km[32:], err
}

// seal is the login cookie's value for ls: base64url of the version
// byte, the salt and the AES-GCM sealed JSON of ls, with the version byte
// and the cookie's name as associated data.
func (o *oidcLogin) seal(ls loginState) (string, error) {
	plain, err := json.Marshal(ls)
	if err != nil {
		return "", err
	}
	out := make([]byte, 1+loginSaltLen, 1+loginSaltLen+len(plain)+16)
	out[0] = loginVersion
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails (Go 1.24+)
	g, nonce, err := o.aead(out[1:])
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(g.Seal(out, nonce, plain, loginAD(out[0]))), nil
}

// open returns the started sign-in a login cookie carries, if the
// console sealed it and it has not expired.
func (o *oidcLogin) open(v string, now time.Time) (loginState, bool) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) < 1+loginSaltLen+16 || b[0] != loginVersion {
		return loginState{}, false
	}
	g, nonce, err := o.aead(b[1 : 1+loginSaltLen])
	if err != nil {
		return loginState{}, false
	}
	plain, err := g.Open(nil, nonce, b[1+loginSaltLen:], loginAD(b[0]))
	if err != nil {
		return loginState{}, false
	}
	var ls loginState
	if json.Unmarshal(plain, &ls) != nil || ls.State == "" || ls.Nonce == "" || ls.Verifier == "" {
		return loginState{}, false
	}
	started := time.Unix(ls.Started, 0)
	if now.Sub(started) > pendingTTL || started.After(now.Add(loginSkew)) {
		return loginState{}, false
	}
	return ls, true
}

func loginAD(version byte) []byte { return append([]byte{version}, loginCookie...) }

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

// begin starts a sign-in: the browser gets the login cookie, which holds
// the sign-in sealed, and is sent to the provider. The console keeps
// nothing, so no number of sign-ins started can crowd out another, and
// the callback may reach any replica that holds the same login key.
func (o *oidcLogin) begin(w http.ResponseWriter, r *http.Request) error {
	_, oc, err := o.discover(r.Context())
	if err != nil {
		return err
	}
	ls := loginState{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(), Started: time.Now().Unix()}
	v, err := o.seal(ls)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: v, Path: "/", MaxAge: int(pendingTTL.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, oc.AuthCodeURL(ls.State, oidc.Nonce(ls.Nonce), oauth2.S256ChallengeOption(ls.Verifier)), http.StatusFound)
	return nil
}

// errNotAllowed is a verified person outside the allowed groups.
var errNotAllowed = errors.New("you are not in a group allowed to use the console")

// errNotStarted is a callback without a sign-in this browser started
// (no, a tampered or an expired login cookie, or another state).
var errNotStarted = errors.New("this sign-in was not started here or has expired; start again")

// signedIn is who a completed sign-in is for: the person, and the ID
// token's subject, which the console logs with the person.
type signedIn struct {
	person, subject string
}

// finish completes a sign-in from the provider's redirect and returns the
// person: the login cookie is opened and its state matched, the code
// exchanged, the ID token verified (signature, issuer, audience, expiry,
// nonce) and the groups checked.
func (o *oidcLogin) finish(w http.ResponseWriter, r *http.Request) (signedIn, error) {
	q := r.URL.Query()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	c, err := r.Cookie(loginCookie)
	if err != nil {
		return signedIn{}, errNotStarted
	}
	ls, ok := o.open(c.Value, time.Now())
	if !ok || !tokenMatches(ls.State, q.Get("state")) {
		return signedIn{}, errNotStarted
	}
	if e := q.Get("error"); e != "" {
		return signedIn{}, fmt.Errorf("the provider refused the sign-in: %.200s", e)
	}
	prov, oc, err := o.discover(r.Context())
	if err != nil {
		return signedIn{}, err
	}
	ctx := context.WithValue(r.Context(), oauth2.HTTPClient, o.client())
	tok, err := oc.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(ls.Verifier))
	if err != nil {
		return signedIn{}, fmt.Errorf("code exchange: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return signedIn{}, errors.New("the provider returned no ID token")
	}
	idt, err := prov.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(oidc.ClientContext(ctx, o.client()), raw)
	if err != nil {
		return signedIn{}, fmt.Errorf("ID token: %w", err)
	}
	if !tokenMatches(ls.Nonce, idt.Nonce) {
		return signedIn{}, errors.New("ID token: nonce does not match this sign-in")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return signedIn{}, fmt.Errorf("ID token claims: %w", err)
	}
	if !o.allowed(claims[o.cfg.GroupsClaim]) {
		return signedIn{}, errNotAllowed
	}
	person, err := personOf(idt.Subject, claims)
	if err != nil {
		return signedIn{}, err
	}
	return signedIn{person: person, subject: idt.Subject}, nil
}

// personOf is who an ID token signs in: its email when the provider
// says it verified it (email_verified is JSON true, nothing else), else
// its subject. Anyone may type any address into a provider's profile; an
// unverified one would let a member act as the colleague it names.
func personOf(subject string, claims map[string]any) (string, error) {
	person := subject
	if verified, _ := claims["email_verified"].(bool); verified {
		if email, _ := claims["email"].(string); email != "" {
			person = email
		}
	}
	if !oidcPerson(person) {
		return "", errors.New("the ID token names no usable person: its verified email, else its subject, must be one line without spaces")
	}
	return person, nil
}

// oidcPerson reports whether a provider's name for a person may be the
// person: access.ValidPerson (printable, one line, bounded) and no space
// at all, so that no name reads as another or as two.
func oidcPerson(p string) bool {
	return utf8.ValidString(p) && access.ValidPerson(p) && !strings.ContainsRune(p, ' ')
}

// tokenMatches compares a presented token with the expected one in
// constant time.
func tokenMatches(want, presented string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(presented)) == 1
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
