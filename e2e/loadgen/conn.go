package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/quic-go/quic-go"
)

// Transports a run can use.
const (
	// TransportTCP sends on persistent TLS 1.3 connections; with more
	// workers than connections the requests are pipelined.
	TransportTCP = "tcp"
	// TransportTCPNew opens a new TLS connection for every request and
	// closes it after the response, so each request pays a full TCP and
	// TLS handshake (a resumed one when Target.Resume is set).
	TransportTCPNew = "tcp-new"
	// TransportQUIC sends each request on its own bidirectional stream of
	// persistent QUIC connections.
	TransportQUIC = "quic"
)

// Target is the front door under load.
type Target struct {
	// Addr is the AGTP address, for TCP and UDP.
	Addr string
	// ServerName is verified against the server certificate.
	ServerName string
	// Roots verify the server certificate.
	Roots *x509.CertPool
	// Resume lets new-connection runs resume TLS sessions (one cache per
	// worker); without it every connection is a full handshake.
	Resume bool
	// Source, when set, is the local IP address TCP connections are
	// opened from (any 127.0.0.0/8 address works on Linux loopback), so
	// that a server's per-address limits see distinct clients.
	Source string
	// Certificate, when set, is presented as the client certificate: an
	// agent's Agent Certificate, which proves its Agent-ID.
	Certificate *tls.Certificate
}

// dialer opens TCP connections from t.Source.
func (t Target) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: ioTimeout}
	if t.Source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(t.Source)}
	}
	return d
}

func (t Target) tlsConfig() *tls.Config {
	conf := agtp.ClientTLSConfig(t.ServerName, t.Roots)
	if t.Certificate != nil {
		conf.Certificates = []tls.Certificate{*t.Certificate}
	}
	return conf
}

// responseLimits bound what the generator reads: manifests are answers,
// so allow more than the servers' request limit.
var responseLimits = agtp.Limits{MaxBody: 16 << 20}

// ioTimeout bounds one request's network I/O, so a stuck server cannot
// hang a run.
const ioTimeout = 10 * time.Second

// sender sends one request and reads its response.
type sender interface {
	send(ctx context.Context, req *agtp.Request) (*agtp.Response, error)
	close()
}

// errKind names a transport failure for the error report.
type errKind string

const (
	errDial      errKind = "dial"
	errHandshake errKind = "tls-handshake"
	errWrite     errKind = "write"
	errRead      errKind = "read"
	errTimeout   errKind = "timeout"
	errClosed    errKind = "closed-by-server"
	errStream    errKind = "quic-stream"
	errProtocol  errKind = "malformed-response"
)

// transportError is a failure that produced no response.
type transportError struct {
	kind errKind
	err  error
}

func (e *transportError) Error() string { return string(e.kind) + ": " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func classify(kind errKind, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		kind = errTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		if kind == errRead || kind == errWrite {
			kind = errClosed
		}
	}
	var pe *agtp.ProtocolError
	if errors.As(err, &pe) {
		kind = errProtocol
	}
	return &transportError{kind, err}
}

func dialTLS(ctx context.Context, t Target, conf *tls.Config) (*tls.Conn, error) {
	raw, err := t.dialer().DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, classify(errDial, err)
	}
	tc := tls.Client(raw, conf)
	hctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, classify(errHandshake, err)
	}
	return tc, nil
}

// tcpConn is a persistent TLS connection that several goroutines may
// share: writes are serialised, and each sender reads its own response
// once the sender before it has read its own (AGTP answers in order). A
// lone sender never waits for another goroutine, so a connection with
// one request in flight costs no goroutine switches.
type tcpConn struct {
	tc *tls.Conn
	br *bufio.Reader

	mu     sync.Mutex
	bw     *bufio.Writer
	tail   chan struct{} // closed when the last queued sender has read
	broken error
}

func newTCPConn(tc *tls.Conn) *tcpConn {
	done := make(chan struct{})
	close(done)
	return &tcpConn{tc: tc, br: bufio.NewReaderSize(tc, 16<<10), bw: bufio.NewWriterSize(tc, 16<<10), tail: done}
}

func (c *tcpConn) send(_ context.Context, req *agtp.Request) (*agtp.Response, error) {
	c.mu.Lock()
	if c.broken != nil {
		err := c.broken
		c.mu.Unlock()
		return nil, err
	}
	prev, mine := c.tail, make(chan struct{})
	c.tail = mine
	_ = c.tc.SetWriteDeadline(time.Now().Add(ioTimeout))
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		c.broken = classify(errWrite, err)
		err = c.broken
	}
	c.mu.Unlock()

	<-prev
	defer close(mine)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	err = c.broken
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Only the reader at the head of the queue touches br and the read
	// deadline.
	_ = c.tc.SetReadDeadline(time.Now().Add(ioTimeout))
	resp, err := agtp.ReadResponse(c.br, responseLimits)
	if err != nil {
		c.mu.Lock()
		c.broken = classify(errRead, err)
		err = c.broken
		c.mu.Unlock()
		return nil, err
	}
	return resp, nil
}

func (c *tcpConn) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken != nil
}

func (c *tcpConn) close() { _ = c.tc.Close() }

// tcpSlot is a shared persistent connection that is dialled again when it
// breaks (the server closes after a wire-level 400, or on idle timeout).
type tcpSlot struct {
	t    Target
	conf *tls.Config
	mu   sync.Mutex
	conn *tcpConn
}

func (s *tcpSlot) get(ctx context.Context) (*tcpConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.failed() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.close()
		s.conn = nil
	}
	tc, err := dialTLS(ctx, s.t, s.conf)
	if err != nil {
		return nil, err
	}
	s.conn = newTCPConn(tc)
	return s.conn, nil
}

func (s *tcpSlot) send(ctx context.Context, req *agtp.Request) (*agtp.Response, error) {
	c, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.send(ctx, req)
}

func (s *tcpSlot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.close()
		s.conn = nil
	}
}

// newConnSender opens a connection per request.
type newConnSender struct {
	t    Target
	conf *tls.Config
}

func newNewConnSender(t Target) *newConnSender {
	conf := t.tlsConfig()
	if t.Resume {
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	return &newConnSender{t: t, conf: conf}
}

func (s *newConnSender) send(ctx context.Context, req *agtp.Request) (*agtp.Response, error) {
	tc, err := dialTLS(ctx, s.t, s.conf)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	c := newTCPConn(tc)
	return c.send(ctx, req)
}

func (s *newConnSender) close() {}

// quicSender sends one stream per request on a shared QUIC connection.
type quicSender struct {
	conn *quic.Conn
}

func dialQUIC(ctx context.Context, t Target) (*quic.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	conn, err := quic.DialAddr(dctx, t.Addr, t.tlsConfig(), agtpquic.Config())
	if err != nil {
		return nil, classify(errHandshake, err)
	}
	return conn, nil
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

func (s *quicSender) send(ctx context.Context, req *agtp.Request) (*agtp.Response, error) {
	sctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	st, err := s.conn.OpenStreamSync(sctx)
	if err != nil {
		return nil, classify(errStream, err)
	}
	_ = st.SetDeadline(time.Now().Add(ioTimeout))
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(st)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	if err != nil {
		st.CancelRead(0)
		return nil, classify(errWrite, err)
	}
	// Our side is done: FIN. Its error is ignored: the request is written,
	// and a server that has already answered (when this goroutine was
	// descheduled between Write and Close) stops our send side with
	// STOP_SENDING, which makes Close fail although the response is there.
	_ = st.Close()
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(st)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	resp, err := agtp.ReadResponse(br, responseLimits)
	if err != nil {
		st.CancelRead(0)
		return nil, classify(errRead, err)
	}
	// The server's FIN follows the response; reading it releases the
	// stream at once instead of when the connection closes.
	// More bytes would be a streamed series, which the mix never asks
	// for: stop reading.
	if _, err := br.Peek(1); err == nil {
		st.CancelRead(0)
	}
	return resp, nil
}

func (s *quicSender) close() { _ = s.conn.CloseWithError(0, "") }
