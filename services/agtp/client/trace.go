package client

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Transport names used in ConnInfo.
const (
	TransportTCP  = "tcp"
	TransportQUIC = "quic"
)

// ConnInfo describes the connection a request went out on.
type ConnInfo struct {
	// Transport is TransportTCP or TransportQUIC.
	Transport string
	// Addr is the host:port dialled.
	Addr       string
	LocalAddr  net.Addr
	RemoteAddr net.Addr
	// Reused reports whether the connection carried earlier requests.
	Reused bool
	// TLS is the connection's TLS state. On QUIC, for a request sent in
	// 0-RTT data, the handshake is not complete yet and the state is
	// partial.
	TLS tls.ConnectionState
	// EarlyData reports a QUIC request sent before the handshake
	// completed, in 0-RTT data (QUERY and DISCOVER only).
	EarlyData bool
}

// Trace receives events of one request, for debugging tools such as
// `agtp -v`. Attach it with WithTrace. Every callback is optional, runs
// synchronously on the goroutine doing the work, and must not retain the
// byte slices it is given.
type Trace struct {
	// GotConn is called once the request has a connection.
	GotConn func(ConnInfo)
	// Sent receives the request bytes as written to the connection,
	// below AGTP and above TLS: the raw wire.
	Sent func(p []byte)
	// Received receives the bytes read from the connection while this
	// request's response is read, as they arrive. Reads are buffered, so
	// with pipelining it may include the start of the next response.
	Received func(p []byte)
	// Retry is called before a request is sent again on another
	// connection, with the error that ended the previous attempt.
	Retry func(err error)
	// RetryAfter is called before a request answered with status (429 or
	// 503) is sent again after wait (Options.Retry).
	RetryAfter func(status int, wait time.Duration)
}

type traceKey struct{}

// WithTrace returns a context carrying tr; requests made with it report
// to tr.
func WithTrace(ctx context.Context, tr *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, tr)
}

func traceFrom(ctx context.Context) *Trace {
	tr, _ := ctx.Value(traceKey{}).(*Trace)
	return tr
}

func (tr *Trace) gotConn(info ConnInfo) {
	if tr != nil && tr.GotConn != nil {
		tr.GotConn(info)
	}
}

func (tr *Trace) retry(err error) {
	if tr != nil && tr.Retry != nil {
		tr.Retry(err)
	}
}

func (tr *Trace) retryAfter(status int, wait time.Duration) {
	if tr != nil && tr.RetryAfter != nil {
		tr.RetryAfter(status, wait)
	}
}

func (tr *Trace) sent() func([]byte) {
	if tr == nil {
		return nil
	}
	return tr.Sent
}

func (tr *Trace) received() func([]byte) {
	if tr == nil {
		return nil
	}
	return tr.Received
}

// withTraceContext returns req carrying the W3C trace context of the
// span in ctx (traceparent, tracestate), so a caller that is itself
// traced continues its trace into the server, which takes it up the way
// it does on HTTP. A request that already names a traceparent, or a
// context without a sampled-or-not valid span, is left alone.
func withTraceContext(ctx context.Context, req *agtp.Request) *agtp.Request {
	if !trace.SpanContextFromContext(ctx).IsValid() || req.Header.Has(agtp.HeaderTraceparent) {
		return req
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	cp := *req
	cp.Header = append(make(agtp.Header, 0, len(req.Header)+2), req.Header...)
	if v := carrier.Get("traceparent"); v != "" {
		cp.Header.Set(agtp.HeaderTraceparent, v)
	}
	if v := carrier.Get("tracestate"); v != "" {
		cp.Header.Set(agtp.HeaderTracestate, v)
	}
	return &cp
}
