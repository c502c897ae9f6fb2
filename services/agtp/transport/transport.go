// Package transport runs the front door's AGTP listeners: TLS 1.3 over TCP
// and QUIC on the same port number, ALPN "agtp" (docs/decisions.md#D-tls-alpn).
// It turns connections into calls of a [Handler], one per parsed request,
// and owns everything a peer can abuse below the request pipeline:
// handshake, header, body, write and idle deadlines, the connection limit,
// the limit on requests in flight, pooled buffers, panic recovery, and a
// graceful drain.
//
// Wire parsing and writing is package agtp's; this package only decides
// when to read, when to answer and when to close.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/addrlimit"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/quic-go/quic-go"
)

// Handler serves one parsed request. It must always return a response;
// a nil response or a panic becomes 500 internal-error, and the
// connection survives.
//
// ctx ends when the client abandons the request stream (QUIC) or when a
// drain runs out of time. On TCP a client that disconnects is noticed only
// when the response is written: the next bytes on the connection may be a
// pipelined request, so the server does not read while a handler runs.
type Handler interface {
	ServeAGTP(ctx context.Context, conn *ConnInfo, req *agtp.Request) *agtp.Response
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, conn *ConnInfo, req *agtp.Request) *agtp.Response

// ServeAGTP calls f.
func (f HandlerFunc) ServeAGTP(ctx context.Context, conn *ConnInfo, req *agtp.Request) *agtp.Response {
	return f(ctx, conn, req)
}

// ErrorResponder may be implemented by a Handler to build the responses
// the transport answers on its own: wire errors from agtp.ReadRequest
// (400, 459, ...), 503 server-busy, 425 too-early and 500 after a panic.
// It lets the pipeline stamp them like any other response (Server-ID,
// Supported-Methods on a connection's first response, catalog_version on
// 459). req is nil when the request line or header section could not be
// parsed; otherwise it holds at least the request line and header fields.
//
// It runs on the connection's goroutine even when the server is
// overloaded, so it must be cheap and must not block (no network calls).
// Returning nil means "use the default", which is err.Response() with
// task_id echoed and, for 459, the method member.
type ErrorResponder interface {
	RespondError(ctx context.Context, conn *ConnInfo, req *agtp.Request, err *agtp.ProtocolError) *agtp.Response
}

// ConnInfo describes the connection a request came on. The transport owns
// it: it is valid during the call only, so copy what you keep.
type ConnInfo struct {
	// Transport is "tcp" or "quic".
	Transport string
	// RemoteAddr is the peer's address.
	RemoteAddr net.Addr
	// TLS is the connection's TLS state: negotiated ALPN, and in
	// PeerCertificates the client certificate if one was presented and
	// verified against Options.ClientCAs (the TLS client identity used for
	// lifecycle auth and session binding, core §10.4.5). On QUIC, for a
	// request served from 0-RTT data, the handshake has not completed and
	// the identity is not yet proven.
	TLS *tls.ConnectionState
	// ID is unique per connection in this process, for logs and session
	// binding.
	ID uint64
	// Requests is the number of responses sent on the connection before
	// this request's. 0 marks the connection's first response, which
	// carries Supported-Methods (docs/decisions.md#D-supported-methods). On
	// QUIC, streams are concurrent and the count is taken when the stream
	// is accepted.
	Requests uint64
	// EarlyData is set for a QUIC request read before the handshake
	// completed, i.e. from 0-RTT data that an attacker could replay. Only
	// QUERY and DISCOVER get this far (agtp.AllowedIn0RTT); others are
	// answered 425 by the transport.
	EarlyData bool
	// Peer is what Options.InspectPeer returned for the connection's
	// client certificate; nil without one, without InspectPeer, and for
	// 0-RTT requests, whose client has not completed the handshake.
	Peer any
}

// Transport names used in ConnInfo.Transport and in logs.
const (
	TransportTCP  = "tcp"
	TransportQUIC = "quic"
)

// Reasons of the responses the transport produces itself.
const (
	// ReasonServerBusy comes with 503 when MaxInFlight requests are
	// already being served and no slot freed up within BusyWait.
	ReasonServerBusy = "server-busy"
	// ReasonInternalError comes with 500 when the handler panicked, or
	// returned nil or a response that cannot be written.
	ReasonInternalError = "internal-error"
)

// Defaults of Options.
const (
	DefaultAddr              = ":4480" // core §5.1, §11.1: TCP and UDP 4480
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultMaxConns          = 20000
	DefaultMaxInFlight       = 2048
	DefaultBusyWait          = 100 * time.Millisecond
	DefaultDrainTimeout      = 25 * time.Second
	DefaultCertCheckInterval = time.Second
	DefaultQUICRetryAbove    = 1000
	DefaultMaxConnsPerIP     = 1000
	DefaultMaxHandshakes     = 1024
	DefaultBodyBudget        = 64 << 20
)

// Options configure a Server. The zero value of every field but CertFile
// and KeyFile means its default.
type Options struct {
	// Addr is the TCP listen address; QUIC listens on UDP at the same
	// host and port number. With port 0, the UDP port follows the TCP
	// port the kernel picked. Default ":4480".
	Addr string
	// CertFile and KeyFile are the server certificate chain and key (PEM).
	// They are re-read when they change, without a restart; a rotation
	// that cannot be loaded (half-written, mismatched) keeps the old pair.
	CertFile, KeyFile string
	// CertCheckInterval bounds how often a handshake checks the files for
	// a change (two stat calls). Default 1 s.
	CertCheckInterval time.Duration
	// ClientCAs, or ClientCAFile (PEM bundle) when ClientCAs is nil, are
	// the roots a client certificate is verified against. Client
	// certificates are optional (tls.VerifyClientCertIfGiven); without a
	// pool none are requested.
	ClientCAs    *x509.CertPool
	ClientCAFile string
	// InspectPeer, when set, asks every client for a certificate without
	// verifying its chain (tls.RequestClientCert: the handshake still
	// proves possession of its key) and is called once per connection,
	// after the handshake, with the client's certificates; what it returns
	// is ConnInfo.Peer for every request on that connection. It replaces
	// ClientCAs: what a certificate proves is the caller's to decide.
	InspectPeer func(*tls.ConnectionState) any
	// DisableQUIC serves TCP/TLS only.
	DisableQUIC bool

	// Limits bounds one request (agtp.Limits; zero fields are the
	// docs/decisions.md#D-limits defaults: 8 KiB line, 64 KiB header
	// section, 100 fields, 1 MiB body).
	Limits agtp.Limits

	// HandshakeTimeout bounds the TLS (or QUIC) handshake. Default 10 s.
	HandshakeTimeout time.Duration
	// HeaderTimeout bounds the arrival of the request line and header
	// section, counted from the request's first byte. Default 10 s.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the arrival of the body, counted from the end of
	// the header section. Default 30 s.
	BodyTimeout time.Duration
	// WriteTimeout bounds writing one response (or one batch of pipelined
	// responses). Default 30 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight for this
	// long. Default agtp.DefaultIdleTimeout (60 s, core §5.4).
	IdleTimeout time.Duration

	// MaxConns bounds open connections, TCP and QUIC together. At the
	// limit the TCP accept loop pauses (new connections wait in the
	// kernel's backlog) and new QUIC connections are refused. Default
	// 20,000.
	MaxConns int
	// MaxConnsPerIP bounds open connections (TCP and QUIC together,
	// handshakes included) from one source: an IPv4 address or an IPv6
	// /64. A connection over the limit is refused before its handshake: a
	// TCP connection is reset as soon as it is accepted, a QUIC connection
	// attempt is answered CONNECTION_REFUSED (a QUIC attempt counts once
	// a Retry or its handshake proved its source address, so spoofed
	// Initials take no address's slots). It keeps one host from
	// taking the connection slots every other client needs. Behind a load
	// balancer that hides client addresses, or a large NAT, raise it.
	// Negative: no limit. Default 1000.
	MaxConnsPerIP int
	// MaxHandshakes bounds TLS and QUIC handshakes in progress, TCP and
	// QUIC together. At the limit a new connection sheds the oldest
	// handshake if it has run for a second (a real client is done in a
	// few round trips); otherwise the TCP accept loop waits for one to
	// finish or become sheddable, and a QUIC attempt is refused. It bounds
	// what connections that never finish their handshake can hold, well
	// below MaxConns. Default 1024.
	MaxHandshakes int
	// MaxInFlight bounds requests being served across all connections,
	// from the start of their body to their response. A request that finds
	// it full waits up to BusyWait for a slot, then is answered 503
	// server-busy. A body is read only once its request has a slot, so at
	// most MaxInFlight bodies are being received at once. Default 2048.
	MaxInFlight int
	// BodyBudget bounds the bytes of request bodies held across all
	// connections, from their first byte until the response is built. A
	// body's buffer grows as its bytes arrive (never at once to the
	// announced Content-Length) and each growth takes from the budget; a
	// request that cannot get budget within BusyWait is answered 503
	// body-budget-exhausted with Retry-After, and its connection closed
	// (its QUIC stream ended) because the rest of its body is unread. It
	// must hold at least one body of Limits.MaxBody; a per-endpoint limit
	// (Limits.BodyLimit) above it is lowered to it, since such a body could
	// never be held. Default 64 MiB, or Limits.MaxBody if larger.
	BodyBudget int64
	// BusyWait: see MaxInFlight and BodyBudget. Default 100 ms.
	BusyWait time.Duration
	// MaxStreamsPerConn bounds concurrent requests on one QUIC connection.
	// A TCP connection serves one request at a time (pipelined requests
	// queue in its buffers). Default agtp.DefaultMaxStreams (100).
	MaxStreamsPerConn int
	// QUICRetryAbove is the rate of new QUIC connection attempts per
	// second above which clients must prove their address with a Retry
	// round trip before the server keeps any state (handshake flood
	// defence, RFC 9000 §8.1.2). Negative: always. Default 1000.
	QUICRetryAbove int

	// DrainTimeout bounds the graceful drain Serve runs when its context
	// ends. Default 25 s.
	DrainTimeout time.Duration

	// Logger receives connection events at debug level and failures at
	// warn/error. Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	def(&o.CertCheckInterval, DefaultCertCheckInterval)
	def(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	def(&o.HeaderTimeout, DefaultHeaderTimeout)
	def(&o.BodyTimeout, DefaultBodyTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, agtp.DefaultIdleTimeout)
	def(&o.BusyWait, DefaultBusyWait)
	def(&o.DrainTimeout, DefaultDrainTimeout)
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxStreamsPerConn <= 0 {
		o.MaxStreamsPerConn = agtp.DefaultMaxStreams
	}
	if o.QUICRetryAbove == 0 {
		o.QUICRetryAbove = DefaultQUICRetryAbove
	}
	if o.MaxConnsPerIP == 0 {
		o.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	if o.BodyBudget <= 0 {
		o.BodyBudget = max(DefaultBodyBudget, o.Limits.MaxBody)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate reports configuration errors that defaults cannot fix.
func (o Options) Validate() error {
	var errs []error
	if o.CertFile == "" || o.KeyFile == "" {
		errs = append(errs, errors.New("transport: CertFile and KeyFile are required"))
	}
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			errs = append(errs, fmt.Errorf("transport: Addr %q: %w", o.Addr, err))
		}
	}
	if o.ClientCAs != nil && o.ClientCAFile != "" {
		errs = append(errs, errors.New("transport: set ClientCAs or ClientCAFile, not both"))
	}
	if o.InspectPeer != nil && (o.ClientCAs != nil || o.ClientCAFile != "") {
		errs = append(errs, errors.New("transport: InspectPeer decides what client certificates prove; do not set client CAs with it"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HandshakeTimeout", o.HandshakeTimeout}, {"HeaderTimeout", o.HeaderTimeout},
		{"BodyTimeout", o.BodyTimeout}, {"WriteTimeout", o.WriteTimeout}, {"IdleTimeout", o.IdleTimeout},
		{"BusyWait", o.BusyWait}, {"DrainTimeout", o.DrainTimeout}, {"CertCheckInterval", o.CertCheckInterval},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("transport: %s must not be negative", d.name))
		}
	}
	if o.MaxConns < 0 || o.MaxInFlight < 0 || o.MaxStreamsPerConn < 0 || o.MaxHandshakes < 0 || o.BodyBudget < 0 {
		errs = append(errs, errors.New("transport: MaxConns, MaxHandshakes, MaxInFlight, MaxStreamsPerConn and BodyBudget must not be negative"))
	}
	// A budget smaller than one body would refuse every body of the
	// maximum size, however idle the server.
	if maxBody := o.Limits.MaxBody; o.BodyBudget > 0 {
		if maxBody <= 0 {
			maxBody = agtp.DefaultMaxBody
		}
		if o.BodyBudget < maxBody {
			errs = append(errs, fmt.Errorf("transport: BodyBudget %d is smaller than one body of Limits.MaxBody (%d)", o.BodyBudget, maxBody))
		}
	}
	return errors.Join(errs...)
}

// Server serves AGTP over TLS/TCP and QUIC. Create it with New, bind with
// Listen, then Serve (or both with Run); stop with Shutdown or by ending
// Serve's context.
type Server struct {
	opts    Options
	h       Handler
	errResp ErrorResponder
	log     *slog.Logger
	certs   *certReloader
	tlsConf *tls.Config
	lim     agtp.Limits

	inflight  chan struct{}      // request slots (MaxInFlight)
	bodies    *bodyBudget        // bytes of bodies held (BodyBudget)
	connSlots chan struct{}      // connection slots (MaxConns)
	perAddr   *addrlimit.Counter // connections per source (MaxConnsPerIP)
	hs        *handshakes        // handshakes in progress (MaxHandshakes)
	// retryAbove is the backlog length from which QUIC needs a Retry.
	retryAbove int
	retry      *tokenBucket
	stats      counters
	nextID     atomic.Uint64

	// baseCtx parents every TCP connection's context; it is cancelled
	// when a drain runs out of time.
	baseCtx    context.Context
	cancelBase context.CancelFunc
	// stopCtx is cancelled when Shutdown starts; QUIC connections watch
	// it to stop accepting streams.
	stopCtx    context.Context
	cancelStop context.CancelFunc

	shutting atomic.Bool
	live     atomic.Int64 // serving goroutines that Shutdown waits for

	mu        sync.Mutex // guards the fields below
	tcpLn     net.Listener
	udpConn   net.PacketConn
	quicTr    *quic.Transport
	quicLn    *quic.EarlyListener
	serving   bool
	tcpConns  map[*tcpConn]struct{}
	quicConns map[*quicConn]struct{}
	shutOnce  sync.Once
	finOnce   sync.Once
}

// New checks opts, loads the certificate and returns a Server that hands
// requests to h. If h also implements [ErrorResponder], it shapes the
// transport's own error responses.
func New(opts Options, h Handler) (*Server, error) {
	if h == nil {
		return nil, errors.New("transport: nil Handler")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Server{
		opts:      opts,
		h:         h,
		log:       opts.Logger,
		inflight:  make(chan struct{}, opts.MaxInFlight),
		bodies:    newBodyBudget(opts.BodyBudget, opts.BusyWait),
		connSlots: make(chan struct{}, opts.MaxConns),
		perAddr:   addrlimit.NewCounter(opts.MaxConnsPerIP),
		hs:        newHandshakes(opts.MaxHandshakes),
		// Three quarters, but at least one place short of full.
		retryAbove: min(opts.MaxHandshakes*3/4, opts.MaxHandshakes-1),
		tcpConns:   make(map[*tcpConn]struct{}),
		quicConns:  make(map[*quicConn]struct{}),
	}
	s.errResp, _ = h.(ErrorResponder)
	s.lim = opts.Limits
	if s.lim.MaxBody <= 0 {
		s.lim.MaxBody = agtp.DefaultMaxBody
	}
	var err error
	if s.certs, err = newCertReloader(opts.CertFile, opts.KeyFile, opts.CertCheckInterval, s.log, &s.stats); err != nil {
		return nil, err
	}
	s.tlsConf = agtp.ServerTLSConfig()
	s.tlsConf.GetCertificate = s.certs.GetCertificate
	pool := opts.ClientCAs
	if pool == nil && opts.ClientCAFile != "" {
		var err error
		if pool, err = keyfile.CertPool(opts.ClientCAFile); err != nil {
			return nil, fmt.Errorf("transport: client CA: %w", err)
		}
	}
	switch {
	case opts.InspectPeer != nil:
		s.tlsConf.ClientAuth = tls.RequestClientCert
	case pool != nil:
		s.tlsConf.ClientAuth = tls.VerifyClientCertIfGiven
		s.tlsConf.ClientCAs = pool
	}
	if opts.QUICRetryAbove > 0 {
		s.retry = newTokenBucket(float64(opts.QUICRetryAbove), opts.QUICRetryAbove)
	}
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	s.stopCtx, s.cancelStop = context.WithCancel(context.Background())
	return s, nil
}

// Listen binds the TCP socket and, unless QUIC is disabled, the UDP
// socket on the same port number.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpLn != nil {
		return errors.New("transport: already listening")
	}
	if s.shutting.Load() {
		return ErrServerClosed
	}
	host, port, _ := net.SplitHostPort(s.opts.Addr)
	// With port 0 the TCP port is the kernel's choice and its UDP twin
	// may be taken; try a few times.
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", s.opts.Addr)
		if err != nil {
			return fmt.Errorf("transport: listen tcp: %w", err)
		}
		if s.opts.DisableQUIC {
			s.tcpLn = ln
			return nil
		}
		tcpPort := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(tcpPort)))
		if err == nil {
			s.tcpLn, s.udpConn = ln, pc
			return nil
		}
		ln.Close()
		if port != "0" || attempt == 10 {
			return fmt.Errorf("transport: listen udp: %w", err)
		}
	}
}

// TCPAddr is the bound TCP address, nil before Listen.
func (s *Server) TCPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpLn == nil {
		return nil
	}
	return s.tcpLn.Addr()
}

// QUICAddr is the bound UDP address, nil before Listen or without QUIC.
func (s *Server) QUICAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.udpConn == nil {
		return nil
	}
	return s.udpConn.LocalAddr()
}

// ErrServerClosed is returned by Listen and Serve after Shutdown.
var ErrServerClosed = errors.New("transport: server closed")

// Run is Listen followed by Serve.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve accepts connections on the sockets bound by Listen until ctx ends
// or Shutdown is called, then drains (Shutdown with DrainTimeout). It
// returns nil after a clean drain, the drain's error if it ran out of
// time, or the error that stopped a listener.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.tcpLn == nil {
		s.mu.Unlock()
		return errors.New("transport: Serve before Listen")
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("transport: already serving")
	}
	s.serving = true
	errc := make(chan error, 2)
	s.live.Add(1)
	go func() { errc <- s.acceptTCP(s.tcpLn) }()
	if s.udpConn != nil {
		tr := &quic.Transport{
			Conn:                s.udpConn,
			VerifySourceAddress: s.verifySourceAddress,
			ConnContext:         s.quicConnContext,
		}
		ln, err := tr.ListenEarly(s.tlsConf, s.quicConfig())
		if err != nil {
			s.mu.Unlock()
			s.Shutdown(context.Background())
			return fmt.Errorf("transport: listen quic: %w", err)
		}
		s.quicTr, s.quicLn = tr, ln
		s.live.Add(1)
		go func() { errc <- s.acceptQUIC(ln) }()
	}
	s.mu.Unlock()
	s.log.Info("agtp listening", "tcp", s.tcpLn.Addr().String(), "quic", !s.opts.DisableQUIC)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc: // nil when Shutdown was called elsewhere
	}
	dctx, cancel := context.WithTimeout(context.Background(), s.opts.DrainTimeout)
	defer cancel()
	return errors.Join(serveErr, s.Shutdown(dctx))
}

// Shutdown drains the server: it stops accepting connections and streams,
// closes idle connections, lets requests in flight finish and their
// responses be written, closes each connection after its last response,
// and returns once everything is closed. When ctx ends first, whatever is
// left is closed at once, handler contexts are cancelled, and ctx's error
// is returned. Shutdown may be called more than once, and concurrently.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		s.mu.Lock()
		s.shutting.Store(true)
		s.cancelStop()
		if s.tcpLn != nil {
			s.tcpLn.Close()
		}
		if s.quicLn != nil {
			s.quicLn.Close()
		}
		s.mu.Unlock()
		s.log.Info("agtp draining", "tcp_conns", s.stats.tcpOpen.Load(), "quic_conns", s.stats.quicOpen.Load())
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.closeIdleTCP()
		if s.live.Load() == 0 {
			s.finish()
			return nil
		}
		select {
		case <-ctx.Done():
			s.forceClose()
			s.finish()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// finish releases what outlives the connections.
func (s *Server) finish() {
	s.finOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cancelBase()
		if s.quicTr != nil {
			s.quicTr.Close()
		}
		if s.udpConn != nil {
			s.udpConn.Close()
		}
		if s.tcpLn != nil {
			s.tcpLn.Close()
		}
	})
}

// forceClose ends every connection now; their goroutines then exit.
func (s *Server) forceClose() {
	s.mu.Lock()
	tcp := make([]*tcpConn, 0, len(s.tcpConns))
	for c := range s.tcpConns {
		tcp = append(tcp, c)
	}
	qc := make([]*quicConn, 0, len(s.quicConns))
	for c := range s.quicConns {
		qc = append(qc, c)
	}
	s.mu.Unlock()
	s.cancelBase()
	for _, c := range tcp {
		c.raw.Close()
	}
	var wg sync.WaitGroup
	for _, c := range qc {
		wg.Go(func() { c.qc.CloseWithError(agtpquic.CodeShutdown, "server shutdown") })
	}
	wg.Wait()
}

// ReloadCertificate re-reads the certificate files now, e.g. on SIGHUP.
// On error the current certificate stays in use.
func (s *Server) ReloadCertificate() error { return s.certs.reload(true) }

// acquire takes a request slot, waiting at most BusyWait.
func (s *Server) acquire(ctx context.Context) bool {
	select {
	case s.inflight <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.opts.BusyWait)
	defer t.Stop()
	select {
	case s.inflight <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (s *Server) release() { <-s.inflight }

// serve runs the handler for one request under the in-flight limit.
func (s *Server) serve(ctx context.Context, info *ConnInfo, req *agtp.Request) *agtp.Response {
	if !s.acquire(ctx) {
		return s.busy(ctx, info, req)
	}
	defer s.release()
	return s.handle(ctx, info, req)
}

// busy is the answer to a request that found no in-flight slot.
func (s *Server) busy(ctx context.Context, info *ConnInfo, req *agtp.Request) *agtp.Response {
	s.stats.busy.Add(1)
	return s.errorResponse(ctx, info, req, &agtp.ProtocolError{
		Status: agtp.StatusUnavailable, Reason: ReasonServerBusy,
		Explanation: "too many requests in flight; retry later",
	})
}

// handle runs the handler for a request that holds an in-flight slot and
// turns panics and nil responses into 500.
func (s *Server) handle(ctx context.Context, info *ConnInfo, req *agtp.Request) (resp *agtp.Response) {
	defer func() {
		if p := recover(); p != nil {
			s.stats.panics.Add(1)
			s.log.Error("agtp handler panic", "conn", info.ID, "method", req.Method, "path", req.Path,
				"panic", p, "stack", stack())
			resp = s.internalError(ctx, info, req)
		}
	}()
	resp = s.h.ServeAGTP(ctx, info, req)
	if resp == nil {
		s.stats.invalidResponses.Add(1)
		s.log.Error("agtp handler returned no response", "conn", info.ID, "method", req.Method, "path", req.Path)
		resp = s.internalError(ctx, info, req)
	}
	return resp
}

func (s *Server) internalError(ctx context.Context, info *ConnInfo, req *agtp.Request) *agtp.Response {
	return s.errorResponse(ctx, info, req, &agtp.ProtocolError{
		Status: agtp.StatusServerError, Reason: ReasonInternalError, Explanation: "internal error",
	})
}

// errorResponse builds the answer to an error the transport detected.
func (s *Server) errorResponse(ctx context.Context, info *ConnInfo, req *agtp.Request, perr *agtp.ProtocolError) (resp *agtp.Response) {
	if s.errResp != nil {
		resp = s.respondError(ctx, info, req, perr)
		if resp != nil {
			return resp
		}
	}
	return defaultErrorResponse(req, perr)
}

func (s *Server) respondError(ctx context.Context, info *ConnInfo, req *agtp.Request, perr *agtp.ProtocolError) (resp *agtp.Response) {
	defer func() {
		if p := recover(); p != nil {
			s.stats.panics.Add(1)
			s.log.Error("agtp error responder panic", "conn", info.ID, "panic", p, "stack", stack())
			resp = nil
		}
	}()
	return s.errResp.RespondError(ctx, info, req, perr)
}

// defaultErrorResponse is perr's error body with the members
// docs/decisions.md#D-error-body asks for that the transport knows: task_id,
// and the method of a 459.
func defaultErrorResponse(req *agtp.Request, perr *agtp.ProtocolError) *agtp.Response {
	if req == nil {
		return perr.Response()
	}
	body := agtp.ErrorBody{Status: perr.Status, Reason: perr.Reason, Explanation: perr.Explanation,
		TaskID: req.Header.Get(agtp.HeaderTaskID)}
	if perr.Status == agtp.StatusMethodViolation {
		body.Extra = map[string]any{"method": req.Method}
	}
	resp, err := body.Response()
	if err != nil {
		return perr.Response()
	}
	return resp
}

// bodyLimit wraps the configured body limit so the header deadline can be
// swapped for the body deadline: agtp.ReadRequestHead calls
// Limits.BodyLimit exactly when the header section has been read.
func (s *Server) bodyLimit(method, path string) int64 {
	if s.lim.BodyLimit != nil {
		// A body larger than the whole budget could never be held: it is
		// refused as too large rather than as a 503 worth retrying.
		return min(s.lim.BodyLimit(method, path), s.opts.BodyBudget)
	}
	return s.lim.MaxBody
}
