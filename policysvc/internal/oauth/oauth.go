// Package oauth validates external credentials (core §8.6, Pattern 2): an
// `Authorization: Bearer` JWT checked against a JWKS from a file or an
// HTTPS URL, with issuer, audience, clock skew and an algorithm allow-list.
// The configured claim (default "sub") becomes the acting principal.
//
// The token is a credential: it is never logged, never put in an error and
// never returned; only the lifted claim leaves this package.
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/outbound"
)

// Options configures the validator ([policies.oauth] in core §8.6). OAuth
// is opt-in: with neither JWKSFile nor JWKSURL set it is off, and requests
// are handled as if this package did not exist.
type Options struct {
	// RequiredOnMethods lists the AGTP methods that must carry a
	// credential (401 oauth-required without one).
	RequiredOnMethods []string `json:"required_on_methods,omitempty"`
	// MethodScopes lists OAuth scopes (the token's "scope" or "scp" claim)
	// a method needs: an operator-defined scope dimension, refused with
	// 455 (core §5.6).
	MethodScopes map[string][]string `json:"method_scopes,omitempty"`
	// JWKSFile or JWKSURL (https only) names the key set; exactly one.
	JWKSFile string `json:"jwks_file,omitempty"`
	JWKSURL  string `json:"jwks_url,omitempty"`
	// Issuer must equal the "iss" claim; required.
	Issuer string `json:"issuer"`
	// Audiences: the "aud" claim must name at least one; required.
	Audiences []string `json:"audiences"`
	// ClockSkew is the leeway for exp, nbf and iat. Default 60s.
	ClockSkew time.Duration `json:"clock_skew,omitempty"`
	// Algorithms is the allow-list of JWS algorithms. Default RS256,
	// ES256, EdDSA. "none" and the HMAC algorithms are never allowed:
	// a JWKS holds public keys.
	Algorithms []string `json:"algorithms,omitempty"`
	// PrincipalClaim is lifted into acting_principal_id. Default "sub".
	PrincipalClaim string `json:"principal_claim,omitempty"`
	// AgentClaim names the claim that carries the caller's Agent-ID when
	// a token is the caller's proof (docs/identity.md); a token without it
	// is read for "sub". Default "agtp_agent_id".
	AgentClaim string `json:"agent_claim,omitempty"`
	// RefreshInterval is how often the key set is reloaded. Default 5m.
	RefreshInterval time.Duration `json:"refresh_interval,omitempty"`
	// MinRefetchInterval bounds reloads triggered by tokens signed with an
	// unknown key, so that forged kids cannot make us hammer the IdP.
	// Default 30s.
	MinRefetchInterval time.Duration `json:"min_refetch_interval,omitempty"`
	// FetchTimeout bounds one JWKS fetch. Default 5s.
	FetchTimeout time.Duration `json:"fetch_timeout,omitempty"`
	// MaxTokenBytes bounds the Authorization value. Default 8 KiB.
	MaxTokenBytes int `json:"max_token_bytes,omitempty"`
	// HTTPClient fetches JWKSURL; default a client with FetchTimeout, the
	// system roots and no proxy (the environment's proxy settings are not
	// read). Either way a redirect is followed only to an https URL.
	HTTPClient *http.Client `json:"-"`
}

// Enabled reports whether a key set is configured.
func (o Options) Enabled() bool { return o.JWKSFile != "" || o.JWKSURL != "" }

// allowedAlgorithms are the algorithms the allow-list may name.
var allowedAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// Bounds on what a JWKS source may send us.
const (
	maxJWKSBytes = 1 << 20
	maxJWKSKeys  = 100
	maxClaimLen  = 1024
)

// WithDefaults fills in the defaults.
func (o Options) WithDefaults() Options {
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Minute
	}
	if len(o.Algorithms) == 0 {
		o.Algorithms = []string{string(jose.RS256), string(jose.ES256), string(jose.EdDSA)}
	}
	if o.PrincipalClaim == "" {
		o.PrincipalClaim = "sub"
	}
	if o.AgentClaim == "" {
		o.AgentClaim = "agtp_agent_id"
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 5 * time.Minute
	}
	if o.MinRefetchInterval == 0 {
		o.MinRefetchInterval = 30 * time.Second
	}
	if o.FetchTimeout == 0 {
		o.FetchTimeout = 5 * time.Second
	}
	if o.MaxTokenBytes == 0 {
		o.MaxTokenBytes = 8 << 10
	}
	return o
}

// Validate checks the options (after WithDefaults).
func (o Options) Validate() error {
	if !o.Enabled() {
		if len(o.RequiredOnMethods) > 0 || len(o.MethodScopes) > 0 {
			return errors.New("oauth: required_on_methods and method_scopes need jwks_file or jwks_url")
		}
		return nil
	}
	if o.JWKSFile != "" && o.JWKSURL != "" {
		return errors.New("oauth: set jwks_file or jwks_url, not both")
	}
	if o.JWKSURL != "" {
		u, err := url.Parse(o.JWKSURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return errors.New("oauth: jwks_url must be an https URL")
		}
	}
	if o.Issuer == "" {
		return errors.New("oauth: issuer is required")
	}
	if len(o.Audiences) == 0 {
		return errors.New("oauth: at least one audience is required")
	}
	for _, a := range o.Algorithms {
		if !slices.Contains(allowedAlgorithms, jose.SignatureAlgorithm(a)) {
			return fmt.Errorf("oauth: algorithm %q is not allowed (asymmetric JWS algorithms only)", a)
		}
	}
	switch {
	case o.ClockSkew < 0 || o.ClockSkew > 10*time.Minute:
		return errors.New("oauth: clock_skew must be between 0 and 10m")
	case o.RefreshInterval < time.Second:
		return errors.New("oauth: refresh_interval must be at least 1s")
	case o.MinRefetchInterval < 0:
		return errors.New("oauth: min_refetch_interval must not be negative")
	case o.FetchTimeout <= 0:
		return errors.New("oauth: fetch_timeout must be positive")
	case o.MaxTokenBytes < 256 || o.MaxTokenBytes > 64<<10:
		return errors.New("oauth: max_token_bytes must be between 256 and 65536")
	}
	return nil
}

// Error is a refused credential. Reason is oauth-invalid; Explanation says
// why without quoting the token.
type Error struct {
	Reason      string
	Explanation string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Explanation }

func invalid(why string) *Error { return &Error{Reason: "oauth-invalid", Explanation: why} }

// Principal is what a validated credential yields.
type Principal struct {
	// ID is the lifted claim: the acting_principal_id.
	ID string
	// Scopes are the token's OAuth scopes ("scope" or "scp").
	Scopes []string
	// AgentID is the Agent-ID the token names: the AgentClaim, else "sub".
	AgentID string
	// CertThumbprint is the cnf claim's x5t#S256 (RFC 8705) of a
	// certificate-bound token, empty for a bearer token.
	CertThumbprint string
	// Issuer is the token's "iss".
	Issuer string
}

// Verifier validates bearer tokens against a cached key set.
type Verifier struct {
	opts Options
	algs []jose.SignatureAlgorithm
	log  *slog.Logger
	http *http.Client

	keys atomic.Pointer[jose.JSONWebKeySet]
	// mu serialises reloads; lastLoad is when one was last tried.
	mu       sync.Mutex
	lastLoad time.Time
}

// New returns a Verifier. A JWKS file is read now, so that a bad file fails
// at start-up; a JWKS URL is fetched on first use and by Run.
func New(opts Options, log *slog.Logger) (*Verifier, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !opts.Enabled() {
		return nil, errors.New("oauth: no key set configured")
	}
	v := &Verifier{opts: opts, log: log, http: opts.HTTPClient}
	for _, a := range opts.Algorithms {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	if v.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // the IdP is reached directly; libraries do not read the environment
		v.http = &http.Client{Timeout: opts.FetchTimeout, Transport: tr}
	}
	v.http = outbound.HTTPSRedirectsOnly(v.http)
	if opts.JWKSFile != "" {
		if err := v.reload(context.Background()); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// RequiredOn reports whether method must carry a credential.
func (v *Verifier) RequiredOn(method string) bool {
	return slices.Contains(v.opts.RequiredOnMethods, method)
}

// MissingScope returns an OAuth scope method needs that p lacks.
func (v *Verifier) MissingScope(method string, p Principal) (string, bool) {
	for _, s := range v.opts.MethodScopes[method] {
		if !slices.Contains(p.Scopes, s) {
			return s, true
		}
	}
	return "", false
}

// Run reloads the key set every RefreshInterval until ctx is done. A failed
// reload keeps the previous keys, so an IdP outage does not lock callers out
// before their keys rotate.
func (v *Verifier) Run(ctx context.Context) error {
	t := time.NewTicker(v.opts.RefreshInterval)
	defer t.Stop()
	if v.keys.Load() == nil {
		v.tryReload(ctx, 0)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			v.tryReload(ctx, 0)
		}
	}
}

// Verify validates the Authorization header value and returns the principal.
// Errors are *Error.
func (v *Verifier) Verify(ctx context.Context, authorization string) (Principal, error) {
	if len(authorization) > v.opts.MaxTokenBytes {
		return Principal{}, invalid("the credential is too long")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, invalid("only Bearer credentials are accepted")
	}
	token = strings.TrimLeft(token, " ")
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		// go-jose refuses algorithms outside the list, "none" included.
		return Principal{}, invalid("the credential is not a JWS-signed JWT with an allowed algorithm")
	}
	if len(tok.Headers) != 1 {
		return Principal{}, invalid("the credential must carry exactly one signature")
	}
	hdr := tok.Headers[0]

	var claims jwt.Claims
	var extra map[string]any
	if !verifyWithKeys(tok, v.candidates(hdr), &claims, &extra) {
		// Perhaps the IdP rotated keys: reload (bounded) and try once more.
		if !v.tryReload(ctx, v.opts.MinRefetchInterval) ||
			!verifyWithKeys(tok, v.candidates(hdr), &claims, &extra) {
			return Principal{}, invalid("the credential's signature does not verify with the issuer's keys")
		}
	}
	if claims.Expiry == nil {
		return Principal{}, invalid("the credential has no expiry")
	}
	err = claims.ValidateWithLeeway(jwt.Expected{Issuer: v.opts.Issuer, AnyAudience: v.opts.Audiences, Time: time.Now()}, v.opts.ClockSkew)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return Principal{}, invalid("the credential has expired")
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Principal{}, invalid("the credential is not valid yet")
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Principal{}, invalid("the credential was issued by another issuer")
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Principal{}, invalid("the credential is for another audience")
	case err != nil:
		return Principal{}, invalid("the credential's claims are invalid")
	}
	id, _ := extra[v.opts.PrincipalClaim].(string)
	if id == "" || len(id) > maxClaimLen {
		return Principal{}, invalid("the credential has no usable " + v.opts.PrincipalClaim + " claim")
	}
	p := Principal{ID: id, Scopes: scopesOf(extra), Issuer: claims.Issuer, AgentID: v.agentOf(extra)}
	if cnf, ok := extra["cnf"].(map[string]any); ok {
		thumb, _ := cnf["x5t#S256"].(string)
		if thumb == "" || len(thumb) > maxClaimLen {
			return Principal{}, invalid("the credential's cnf claim carries no usable x5t#S256")
		}
		p.CertThumbprint = thumb
	}
	return p, nil
}

// agentOf is the Agent-ID a token names: the configured agent claim, else
// "sub" (empty when neither is a string within bounds).
func (v *Verifier) agentOf(claims map[string]any) string {
	for _, name := range []string{v.opts.AgentClaim, "sub"} {
		if s, ok := claims[name].(string); ok && s != "" && len(s) <= maxClaimLen {
			return s
		}
	}
	return ""
}

// candidates are the keys that may have signed a token with hdr: the key
// named by kid, or without a kid every signing key; a key that names an
// algorithm must name the token's (no RSA-PKCS1 / PSS confusion).
func (v *Verifier) candidates(hdr jose.Header) []jose.JSONWebKey {
	set := v.keys.Load()
	if set == nil {
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if hdr.KeyID != "" && k.KeyID != hdr.KeyID {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != hdr.Algorithm {
			continue
		}
		out = append(out, k)
	}
	return out
}

func verifyWithKeys(tok *jwt.JSONWebToken, keys []jose.JSONWebKey, dest ...any) bool {
	for _, k := range keys {
		if err := tok.Claims(k.Key, dest...); err == nil {
			return true
		}
	}
	return false
}

func scopesOf(claims map[string]any) []string {
	switch s := claims["scope"].(type) {
	case string:
		return strings.Fields(s)
	}
	if arr, ok := claims["scp"].([]any); ok {
		out := make([]string, 0, len(arr))
		for _, a := range arr {
			if s, ok := a.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	if s, ok := claims["scp"].(string); ok {
		return strings.Fields(s)
	}
	return nil
}

// tryReload reloads the key set unless one was tried within minGap, and
// reports whether it loaded new keys. Concurrent callers wait for one load.
func (v *Verifier) tryReload(ctx context.Context, minGap time.Duration) bool {
	batchrpc.Blocking(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	if minGap > 0 && time.Since(v.lastLoad) < minGap {
		return false
	}
	if err := v.reloadLocked(ctx); err != nil {
		v.log.WarnContext(ctx, "jwks reload failed; keeping the previous keys", "err", err)
		return false
	}
	return true
}

func (v *Verifier) reload(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reloadLocked(ctx)
}

func (v *Verifier) reloadLocked(ctx context.Context) error {
	v.lastLoad = time.Now()
	var data []byte
	var err error
	if v.opts.JWKSFile != "" {
		data, err = readFileLimited(v.opts.JWKSFile)
	} else {
		data, err = v.fetch(ctx)
	}
	if err != nil {
		return err
	}
	set, err := parseJWKS(data)
	if err != nil {
		return err
	}
	v.keys.Store(set)
	return nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("oauth: read jwks: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("oauth: read jwks: %w", err)
	}
	return data, nil
}

func (v *Verifier) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.opts.JWKSURL, nil)
	if err != nil {
		return nil, fmt.Errorf("oauth: fetch jwks: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := v.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("oauth: fetch jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("oauth: fetch jwks: status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("oauth: fetch jwks: %w", err)
	}
	return data, nil
}

// parseJWKS keeps the usable signing keys of a key set, public parts only.
func parseJWKS(data []byte) (*jose.JSONWebKeySet, error) {
	if len(data) > maxJWKSBytes {
		return nil, errors.New("oauth: jwks is larger than 1 MiB")
	}
	var raw jose.JSONWebKeySet
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("oauth: parse jwks: %w", err)
	}
	if len(raw.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("oauth: jwks has more than %d keys", maxJWKSKeys)
	}
	set := &jose.JSONWebKeySet{}
	for _, k := range raw.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		// Public drops private parts and empties symmetric keys, which
		// Valid then refuses: an HMAC secret must never verify a token.
		k = k.Public()
		if !k.Valid() {
			continue
		}
		set.Keys = append(set.Keys, k)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("oauth: jwks holds no usable signing key")
	}
	return set, nil
}
