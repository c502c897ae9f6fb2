// Package upstream runs external_service handler bindings (AGTP-API
// §12.3): the endpoint's validated input goes to an upstream over HTTPS,
// or over gRPC, and the upstream's answer comes back as the endpoint's
// output or as one of the draft's upstream_* errors.
//
// One Executor serves every external_service endpoint of a front door. It
// keeps one HTTP transport (connection reuse, TLS 1.2+ with the system
// roots plus an optional CA file), one gRPC connection per upstream
// authority, and one circuit breaker per upstream. Retries happen only for
// endpoints whose semantic block says is_idempotent, only after a
// connection error or a 502, 503 or 504, a bounded number of times with
// jittered backoff. Each attempt is a client span, and the W3C trace
// context goes upstream.
//
// The same Executor forwards carried MCP messages to an MCP server bound
// as an external service (mcp.go).
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/services/outbound"
)

// The upstream failure names every external_service endpoint declares
// (AGTP-API §12.3). They are named errors: the front door answers them
// with 422 when the upstream refused the call for what it asked, and with
// 502 or 504, as bindings.Transient failures that are never stored under
// the Idempotency-Key, when the upstream could not be reached, did not
// answer in time, refused this server's credentials or failed itself.
const (
	ErrTimeout        = "upstream_timeout"
	ErrConnection     = "upstream_connection_error"
	ErrMalformed      = "upstream_malformed_response"
	ErrAuthentication = "upstream_authentication_failed"
	ErrUpstream       = "upstream_error"
)

// Options configure an Executor. Zero values take the defaults named.
type Options struct {
	// LookupEnv resolves ${VAR} placeholders in handler.url and
	// handler.headers. The command layer passes os.LookupEnv; nil
	// resolves nothing, so a binding with a placeholder fails.
	LookupEnv func(string) (string, bool)
	// CAFile is a PEM bundle of extra roots trusted for upstreams, in
	// addition to the system roots.
	CAFile string
	// DefaultTimeout applies when an endpoint has no timeout_seconds.
	// Default 30 s (AGTP-API §12.3).
	DefaultTimeout time.Duration
	// MaxResponseBytes bounds an upstream answer. Default 4 MiB.
	MaxResponseBytes int64
	// MaxAttempts bounds the attempts of an idempotent endpoint's call,
	// the first included. Default 3; 1 turns retries off.
	MaxAttempts int
	// RetryBackoff is the wait before the first retry; it doubles per
	// retry, with jitter, up to RetryBackoffMax. Defaults 100 ms, 2 s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Breaker configures the per-upstream circuit breaker.
	Breaker BreakerOptions
	// MaxConnsPerHost bounds connections to one upstream (default 64);
	// MaxIdleConnsPerHost the idle ones kept for reuse (default 16).
	MaxConnsPerHost     int
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes idle upstream connections. Default 90 s.
	IdleConnTimeout time.Duration
	// DialContext, when set, makes the TCP connections of HTTP upstreams
	// in place of a plain net.Dialer: an executor that calls URLs its
	// callers name passes one that refuses internal addresses
	// (services/outbound).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TracerProvider makes the client spans; default the global one.
	TracerProvider trace.TracerProvider
	// Propagator injects the trace context; default the global one.
	Propagator propagation.TextMapPropagator
	// UserAgent is sent upstream. Default "agtp-frontdoor".
	UserAgent string
	// Log receives upstream failures; default slog.Default().
	Log *slog.Logger
	// Now is the breaker's clock; default time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 30 * time.Second
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 4 << 20
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 100 * time.Millisecond
	}
	if o.RetryBackoffMax <= 0 {
		o.RetryBackoffMax = 2 * time.Second
	}
	o.Breaker.defaults()
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = 64
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = 16
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
	}
	if o.UserAgent == "" {
		o.UserAgent = "agtp-frontdoor"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.MaxAttempts > 10 {
		errs = append(errs, errors.New("upstream: at most 10 attempts"))
	}
	if o.MaxResponseBytes > 1<<30 {
		errs = append(errs, errors.New("upstream: max response size above 1 GiB"))
	}
	if o.RetryBackoffMax > 0 && o.RetryBackoff > o.RetryBackoffMax {
		errs = append(errs, errors.New("upstream: retry backoff above its maximum"))
	}
	return errors.Join(errs...)
}

// Executor runs external_service bindings. It is safe for concurrent use.
type Executor struct {
	opts      Options
	tlsConfig *tls.Config
	transport *http.Transport
	client    *http.Client
	tracer    trace.Tracer

	mu       sync.Mutex
	breakers map[string]*breaker
	conns    map[string]*grpc.ClientConn
	sessions map[string]*mcpSession
}

// New builds an Executor; a CA file that does not load fails here.
func New(opts Options) (*Executor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	roots, err := outbound.RootCAs(opts.CAFile)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if opts.DialContext != nil {
		dial = opts.DialContext
	}
	tr := &http.Transport{
		// No proxy: the environment is the command layer's business, and
		// upstreams are named by the operator.
		Proxy:                  nil,
		DialContext:            dial,
		TLSClientConfig:        tlsConfig.Clone(),
		TLSHandshakeTimeout:    10 * time.Second,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    opts.MaxIdleConnsPerHost,
		MaxConnsPerHost:        opts.MaxConnsPerHost,
		IdleConnTimeout:        opts.IdleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	e := &Executor{
		opts:      opts,
		tlsConfig: tlsConfig,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			// Redirects are not followed: the operator named the upstream,
			// and a redirect elsewhere is an answer, not a new target.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		tracer:   opts.TracerProvider.Tracer("github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"),
		breakers: map[string]*breaker{},
		conns:    map[string]*grpc.ClientConn{},
		sessions: map[string]*mcpSession{},
	}
	return e, nil
}

// Close releases idle connections and the gRPC connections.
func (e *Executor) Close() error {
	e.transport.CloseIdleConnections()
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for k, c := range e.conns {
		errs = append(errs, c.Close())
		delete(e.conns, k)
	}
	return errors.Join(errs...)
}

// CircuitState reports the breaker state of the upstream a URL names
// (closed, open or half-open).
func (e *Executor) CircuitState(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return CircuitClosed
	}
	e.mu.Lock()
	b := e.breakers[authorityKey(u)]
	e.mu.Unlock()
	if b == nil {
		return CircuitClosed
	}
	return b.current()
}

func (e *Executor) breaker(key string) *breaker {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.breakers[key]
	if b == nil {
		if len(e.breakers) >= maxBreakers {
			e.dropClosedBreakers()
		}
		b = newBreaker(e.opts.Breaker, e.opts.Now)
		e.breakers[key] = b
	}
	return b
}

// maxBreakers bounds the breakers kept before the closed ones are
// dropped. Upstreams are named by the operator, but a webhook recipient
// an agent names (under a wildcard allowlist) is one too, and each new
// host would otherwise leave a breaker for ever.
const maxBreakers = 1024

// dropClosedBreakers forgets every breaker whose circuit is closed: a
// new one behaves the same, save for failures counted short of the
// threshold. Open and half-open circuits stay, so an upstream that is
// failing stays shed. A call in flight keeps its own breaker.
func (e *Executor) dropClosedBreakers() {
	for k, b := range e.breakers {
		if b.current() == CircuitClosed {
			delete(e.breakers, k)
		}
	}
}

// Check compiles a binding: the front door calls it when a snapshot
// arrives, so a missing variable or a bad URL is logged before a caller
// meets it.
func (e *Executor) Check(def *endpoint.Definition) error {
	_, err := e.compile(def)
	return err
}

// binding is a compiled external_service handler.
type binding struct {
	// rawURL has ${VAR}s resolved; {param}s remain.
	rawURL     string
	u          *url.URL
	method     string
	header     http.Header
	grpc       bool
	grpcMethod string
	target     string // host:port
	key        string // breaker key
	inTr       map[string]string
	outTr      map[string]string
	errorMap   map[int]string
	timeout    time.Duration
	idempotent bool
	endpoint   string // "METHOD /path", for logs
	// idemHeader carries the request's Idempotency-Key upstream.
	idemHeader string
}

var (
	paramRe = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	// identityHeaders are never sent upstream (AGTP-API §12.3), whatever
	// the binding says; the catalog refuses them too.
	identityHeaders = map[string]bool{"agent-id": true, "agtp-agent-id": true, "agtp-principal-id": true, "principal-id": true}
)

// ErrBinding marks a binding that cannot run (bad URL, unresolved
// placeholder): the operator's error, answered as a server failure.
var ErrBinding = errors.New("external_service binding unusable")

// errInvalidInput names an input the binding cannot send (a URL parameter
// whose value would leave its path segment): the caller's error, 422, as
// handler.Typed names an input it cannot decode.
const errInvalidInput = "invalid_input"

func (e *Executor) compile(def *endpoint.Definition) (*binding, error) {
	h := def.Handler
	if h.Type != endpoint.HandlerExternalService {
		return nil, fmt.Errorf("%w: %s %s is bound to %s", ErrBinding, def.Method, def.Path, h.Type)
	}
	b := &binding{
		method:     h.Method,
		header:     http.Header{},
		inTr:       h.InputTransform,
		outTr:      h.OutputTransform,
		errorMap:   map[int]string{},
		timeout:    e.opts.DefaultTimeout,
		idempotent: def.Semantic.IsIdempotent != nil && *def.Semantic.IsIdempotent,
		endpoint:   def.Method + " " + def.Path,
		idemHeader: http.CanonicalHeaderKey(h.UpstreamIdempotencyHeader()),
	}
	fail := func(format string, a ...any) (*binding, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrBinding, b.endpoint, fmt.Sprintf(format, a...))
	}
	raw, err := bindings.Expand(h.URL, e.opts.LookupEnv)
	if err != nil {
		return fail("handler.url: %v", err)
	}
	u, err := url.Parse(paramRe.ReplaceAllString(raw, "p"))
	switch {
	case err != nil:
		return fail("handler.url: %v", err)
	case u.Scheme != "https":
		return fail("handler.url: the upstream must be https:// (AGTP-API §12.3)")
	case u.Host == "" || strings.ContainsAny(u.Host, "{}"):
		return fail("handler.url: no host")
	case u.User != nil:
		return fail("handler.url: credentials belong in headers")
	case endpoint.URLParamOutsidePath(raw) != "":
		return fail("handler.url: %s is outside the path; an input value fills path segments only", endpoint.URLParamOutsidePath(raw))
	}
	b.rawURL, b.u = raw, u
	b.key = authorityKey(u)
	b.target = u.Host
	if u.Port() == "" {
		b.target = net.JoinHostPort(u.Hostname(), "443")
	}
	if identityHeaders[strings.ToLower(b.idemHeader)] {
		return fail("handler.idempotency_header: identity headers are never forwarded (AGTP-API §12.3)")
	}
	for name, v := range h.Headers {
		if identityHeaders[strings.ToLower(name)] {
			return fail("handler.headers.%s: identity headers are never forwarded (AGTP-API §12.3)", name)
		}
		val, err := bindings.Expand(v, e.opts.LookupEnv)
		if err != nil {
			return fail("handler.headers.%s: %v", name, err)
		}
		b.header.Set(name, val)
	}
	if ct := strings.ToLower(b.header.Get("Content-Type")); ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+proto") {
		b.grpc = true
		b.header.Del("Content-Type")
		segs := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(segs) != 2 || segs[0] == "" || segs[1] == "" || strings.Contains(raw, "{") {
			return fail("handler.url: a gRPC upstream's path is /package.Service/Method")
		}
		b.grpcMethod = "/" + segs[0] + "/" + segs[1]
	}
	for code, name := range h.ErrorMap {
		n, err := strconv.Atoi(code)
		if err != nil {
			return fail("handler.error_map: %q is not a status", code)
		}
		b.errorMap[n] = name
	}
	if h.TimeoutSeconds != nil && *h.TimeoutSeconds > 0 {
		b.timeout = time.Duration(*h.TimeoutSeconds * float64(time.Second))
	}
	return b, nil
}

func authorityKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return "https://" + net.JoinHostPort(u.Hostname(), port)
}

// Call runs an external_service endpoint: call.Input (the validated input
// object) goes upstream with input_transform applied, with
// call.IdempotencyKey in the binding's idempotency header when the request
// has one, and the answer comes back as the result (output_transform
// inverted) or an upstream_* error.
func (e *Executor) Call(ctx context.Context, def *endpoint.Definition, call *handler.Call) (*handler.Result, error) {
	b, err := e.compile(def)
	if err != nil {
		return nil, err
	}
	in, err := decodeObject(call.Input)
	if err != nil {
		return nil, fmt.Errorf("external_service input: %w", err)
	}
	in = rename(in, b.inTr, false)
	hdr := callHeader{idemKey: call.IdempotencyKey}
	if len(call.CoreParams) > 0 {
		hdr.core = base64.RawURLEncoding.EncodeToString(call.CoreParams)
	}
	var a attempt
	if b.grpc {
		a, err = e.callGRPC(ctx, b, in, hdr)
	} else {
		a, err = e.callHTTP(ctx, b, in, hdr)
	}
	if err != nil {
		return nil, err
	}
	return e.result(ctx, b, a)
}

// CoreParametersHeader carries the request's core per-method parameters
// (handler.Call.CoreParams; docs/decisions.md#D-core-parameters) to an
// external_service upstream, as the base64url (unpadded) encoding of their
// JSON object, in an HTTP header or gRPC metadata; absent when the request
// sent none. The endpoint's input is the body as before.
const CoreParametersHeader = "X-AGTP-Core-Parameters"

// callHeader is what a call adds to the binding's own headers: the
// Idempotency-Key under the binding's idempotency_header, and the core
// parameters (encoded) under CoreParametersHeader.
type callHeader struct {
	idemKey, core string
}

// failure kinds of an attempt that got no usable answer.
type failKind int

const (
	failNone failKind = iota
	failConnection
	failTimeout
	failTooLarge
	failMalformed
	failCircuitOpen
)

// attempt is the outcome of one try.
type attempt struct {
	status int // the upstream's HTTP status (gRPC codes mapped); 0 without an answer
	header http.Header
	body   []byte
	fail   failKind
	// permanent marks a connection failure a retry cannot fix (a
	// certificate the roots do not trust).
	permanent  bool
	retryAfter time.Duration // for failCircuitOpen
	err        error
}

func (a *attempt) retryable() bool {
	switch {
	case a.fail == failConnection:
		return !a.permanent
	case a.fail != failNone:
		return false
	}
	return a.status == http.StatusBadGateway || a.status == http.StatusServiceUnavailable || a.status == http.StatusGatewayTimeout
}

func (a *attempt) verdict() verdict {
	switch {
	case a.fail == failConnection || a.fail == failTimeout:
		return failed
	case a.status >= 500 && a.status != http.StatusNotImplemented:
		return failed
	}
	return succeeded
}

// run makes the attempts of one call: the breaker's admission, the
// per-attempt timeout (bounded by ctx's deadline), a client span per
// attempt, and retries for idempotent endpoints. err is non-nil only
// when ctx was cancelled (the caller went away).
func (e *Executor) run(ctx context.Context, b *binding, spanName string, do func(ctx context.Context) attempt) (attempt, error) {
	br := e.breaker(b.key)
	maxAttempts := 1
	if b.idempotent {
		maxAttempts = e.opts.MaxAttempts
	}
	var last attempt
	for i := 0; i < maxAttempts; i++ {
		if i > 0 && !e.sleep(ctx, i) {
			break
		}
		gen, ok, wait := br.allow()
		if !ok {
			if i > 0 {
				break
			}
			return attempt{fail: failCircuitOpen, retryAfter: wait}, nil
		}
		actx, span := e.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("server.address", b.u.Hostname()),
			attribute.String("agtp.upstream.endpoint", b.endpoint),
			attribute.Int("agtp.upstream.attempt", i+1),
		))
		actx, cancel := context.WithTimeout(actx, b.timeout)
		a := do(actx)
		cancel()
		if a.status != 0 {
			span.SetAttributes(attribute.Int("agtp.upstream.status", a.status))
		}
		if a.err != nil {
			span.RecordError(a.err)
		}
		if a.fail != failNone || a.status >= 500 {
			span.SetStatus(codes.Error, "upstream failure")
		}
		span.End()
		if ctx.Err() == context.Canceled {
			br.done(gen, neutral)
			return a, ctx.Err()
		}
		br.done(gen, a.verdict())
		last = a
		if !a.retryable() {
			break
		}
	}
	return last, nil
}

// sleep waits before retry n (1-based), with full jitter over the upper
// half of the doubled backoff; false when the deadline leaves no time.
func (e *Executor) sleep(ctx context.Context, n int) bool {
	d := e.opts.RetryBackoff << (n - 1)
	if d > e.opts.RetryBackoffMax || d <= 0 {
		d = e.opts.RetryBackoffMax
	}
	d = d/2 + rand.N(d/2+1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// result maps the last attempt to the endpoint's output or a named error
// (AGTP-API §12.3 failure mapping). What the upstream refused for the call
// itself is a 422; what says nothing about the call (no answer, an open
// circuit, this server's credentials refused, an upstream failure or rate
// limit) is a Transient 502 or 504; a 2xx that cannot be read is a 502 that
// is not transient: the upstream acted, and what it did is not known.
func (e *Executor) result(ctx context.Context, b *binding, a attempt) (*handler.Result, error) {
	log := func(msg string) {
		e.opts.Log.WarnContext(ctx, msg, "endpoint", b.endpoint, "upstream", b.key, "status", a.status, "error", a.err)
	}
	switch a.fail {
	case failCircuitOpen:
		return nil, bindings.Transient(&handler.Error{Name: ErrConnection, Status: http.StatusBadGateway,
			Message: "the upstream service is failing; calls are paused for a while",
			Details: nest(map[string]any{"circuit": CircuitOpen, "retry_after_seconds": int(a.retryAfter.Seconds() + 0.999)})})
	case failTimeout:
		log("upstream timed out")
		return nil, bindings.Transient(&handler.Error{Name: ErrTimeout, Status: http.StatusGatewayTimeout, Message: "the upstream service did not answer in time"})
	case failConnection:
		log("upstream unreachable")
		return nil, bindings.Transient(&handler.Error{Name: ErrConnection, Status: http.StatusBadGateway, Message: "the upstream service could not be reached"})
	case failTooLarge:
		log("upstream answer too large")
		return nil, &handler.Error{Name: ErrMalformed, Status: http.StatusBadGateway, Message: fmt.Sprintf("the upstream answer exceeds %d bytes", e.opts.MaxResponseBytes)}
	case failMalformed:
		log("upstream answer unreadable")
		return nil, &handler.Error{Name: ErrMalformed, Status: http.StatusBadGateway, Message: "the upstream answer could not be read"}
	}
	if a.status >= 200 && a.status <= 299 {
		out, err := decodeOutput(a.body)
		if err != nil {
			e.opts.Log.WarnContext(ctx, "upstream answer is not JSON", "endpoint", b.endpoint, "upstream", b.key, "error", err)
			return nil, &handler.Error{Name: ErrMalformed, Status: http.StatusBadGateway, Message: "the upstream answer is not JSON"}
		}
		if obj, ok := out.(map[string]any); ok {
			out = rename(obj, b.outTr, true)
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("external_service output: %w", err)
		}
		return &handler.Result{Output: raw}, nil
	}
	details := nest(map[string]any{"upstream_status": a.status})
	transient := transientStatus(a.status)
	if name, ok := b.errorMap[a.status]; ok {
		he := &handler.Error{Name: name, Message: "the upstream service answered " + strconv.Itoa(a.status), Details: details}
		if transient != 0 {
			he.Status = transient
			return nil, bindings.Transient(he)
		}
		return nil, he
	}
	log("upstream refused")
	switch {
	case b.grpc && a.status == http.StatusServiceUnavailable:
		return nil, bindings.Transient(&handler.Error{Name: ErrConnection, Status: http.StatusBadGateway, Message: "the upstream service is unavailable", Details: details})
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return nil, bindings.Transient(&handler.Error{Name: ErrAuthentication, Status: http.StatusBadGateway,
			Message: "the upstream service refused this server's credentials", Details: details})
	}
	he := &handler.Error{Name: ErrUpstream, Message: "the upstream service answered " + strconv.Itoa(a.status), Details: details}
	if transient != 0 {
		he.Status = transient
		return nil, bindings.Transient(he)
	}
	return nil, he
}

// transientStatus is the front door's status for an upstream status that
// says nothing settled about the call: 504 for the upstream's own timeouts
// (408, 504), 502 for its failures and rate limits (429, other 5xx), 0 for
// an answer about the call itself.
func transientStatus(upstream int) int {
	switch {
	case upstream == http.StatusRequestTimeout, upstream == http.StatusGatewayTimeout:
		return http.StatusGatewayTimeout
	case upstream == http.StatusTooManyRequests, upstream >= 500:
		return http.StatusBadGateway
	}
	return 0
}

// nest puts an error's details under "details", the body of named errors
// (docs/decisions.md#D-named-error-body): {"error": name, "details": {...}}.
func nest(d map[string]any) map[string]any { return map[string]any{"details": d} }

// connFailure classifies a transport error of an attempt.
func connFailure(ctx context.Context, err error) attempt {
	if ctx.Err() == context.DeadlineExceeded || isTimeout(err) {
		return attempt{fail: failTimeout, err: err}
	}
	a := attempt{fail: failConnection, err: err}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) {
		a.permanent = true
	}
	return a
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
