package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/rawsock"
)

// Connection states, for Shutdown to tell idle connections (closed at
// once) from busy ones (closed after their response).
const (
	stateNew    int32 = iota // TLS handshake
	stateIdle                // waiting for a request's first byte
	stateActive              // reading a request, serving it, writing the response
	stateClosed              // closed by Shutdown
)

// Lingering close: after an error response that ends the connection, the
// server stops writing and discards what the client still sends for a
// moment, because closing a socket with unread input makes the kernel send
// a reset that can destroy the response before the client reads it.
const (
	lingerTimeout  = 500 * time.Millisecond
	lingerMaxBytes = 256 << 10
)

// tcpConn is one TLS connection. Its goroutine owns every field but state
// (shared with Shutdown) and raw (which Shutdown may close).
type tcpConn struct {
	s    *Server
	raw  net.Conn
	tc   *tls.Conn
	info ConnInfo
	// ctx is the context of the connection's requests, a child of the
	// server's baseCtx: each request's own context (a handler's deadline,
	// an internal call) registers with it, not with one context shared by
	// every connection, whose lock and table of children they would all
	// contend for.
	ctx   context.Context
	lim   agtp.Limits
	state atomic.Int32

	// br and bw are pooled and held only while a request is in progress
	// (or pipelined requests are buffered), so an idle connection costs
	// its TLS state and a parked goroutine, not 8 KiB of buffers.
	br *bufio.Reader
	bw *bufio.Writer
	// first is the byte that ended the idle wait; it is read without a
	// buffer and handed to br by Read.
	first    [1]byte
	hasFirst bool
	inBody   bool // ReadRequest has passed the header section
	// writeArmed is set once the current response's write deadline is:
	// see Write.
	writeArmed bool

	addrKey netip.Addr // the source's per-address count, if limited
	pending *pending   // the handshake backlog entry
	wasShed atomic.Bool
}

func (s *Server) acceptTCP(ln net.Listener) error {
	defer s.live.Add(-1)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait instead of
			// spinning, and keep serving the connections we have.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("agtp accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.stopCtx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		key, ok := s.perAddr.Acquire(nc.RemoteAddr())
		if !ok {
			s.stats.perAddrRefused.Add(1)
			s.log.Debug("agtp connection refused: per-address limit", "remote", nc.RemoteAddr().String(), "max_conns_per_ip", s.opts.MaxConnsPerIP)
			resetClose(nc)
			continue
		}
		// Backpressure at MaxConns: the accept loop waits here, holding
		// the one connection it accepted (its handshake not started),
		// until a connection ends. Further connections queue in the
		// kernel's accept queue, and beyond it clients' SYNs are retried,
		// instead of each costing an accept, a handshake and a close.
		select {
		case s.connSlots <- struct{}{}:
		default:
			s.stats.connLimitWaits.Add(1)
			s.log.Debug("agtp connection limit reached; accept paused", "max_conns", s.opts.MaxConns)
			select {
			case s.connSlots <- struct{}{}:
			case <-s.stopCtx.Done():
				s.perAddr.Release(key)
				nc.Close()
				return nil
			}
		}
		c := s.newTCPConn(nc, key)
		if !s.admitHandshake(c) {
			<-s.connSlots
			s.perAddr.Release(key)
			nc.Close()
			return nil
		}
		s.startTCP(c)
	}
}

// admitHandshake puts c in the handshake backlog, shedding the oldest
// handshake if it is old enough, or waiting until one finishes or ages.
// It reports false when the server stops meanwhile.
func (s *Server) admitHandshake(c *tcpConn) bool {
	waited := false
	for {
		p, shed, ok := s.hs.admit(time.Now(), c.shed)
		if ok {
			if shed {
				s.stats.handshakesShed.Add(1)
			}
			c.pending = p
			return true
		}
		if !waited {
			waited = true
			s.stats.handshakeLimit.Add(1)
			s.log.Debug("agtp handshake limit reached; accept paused", "max_handshakes", s.opts.MaxHandshakes)
		}
		// With nothing sheddable yet, a handshake that ends frees a place
		// (hs.free); the wait bounds how late one that became sheddable
		// meanwhile is noticed.
		wait := handshakeShedAge
		if next := s.hs.nextShed(); !next.IsZero() {
			wait = min(max(time.Until(next), 10*time.Millisecond), handshakeShedAge)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.hs.free:
		case <-t.C:
		case <-s.stopCtx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
}

func (s *Server) newTCPConn(nc net.Conn, key netip.Addr) *tcpConn {
	c := &tcpConn{s: s, raw: nc, tc: tls.Server(rawsock.Wrap(nc), s.tlsConf), addrKey: key}
	c.info = ConnInfo{Transport: TransportTCP, RemoteAddr: nc.RemoteAddr(), ID: s.nextID.Add(1)}
	c.lim = s.lim
	c.lim.BodyLimit = c.bodyLimit
	return c
}

// startTCP registers c, which holds a connection slot, its source's count
// and a handshake slot, and serves it.
func (s *Server) startTCP(c *tcpConn) {
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		s.hs.done(c.pending)
		c.raw.Close()
		<-s.connSlots
		s.perAddr.Release(c.addrKey)
		return
	}
	s.tcpConns[c] = struct{}{}
	s.live.Add(1)
	s.mu.Unlock()
	s.stats.tcpAccepted.Add(1)
	s.stats.tcpOpen.Add(1)
	go c.serve()
}

// shed ends a handshake to make room in the backlog (MaxHandshakes).
func (c *tcpConn) shed() {
	if c.state.CompareAndSwap(stateNew, stateClosed) {
		c.wasShed.Store(true)
		resetClose(c.raw)
	}
}

// closeIdleTCP closes connections that are between requests or still in
// the handshake; busy ones notice the shutdown after their response.
func (s *Server) closeIdleTCP() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.tcpConns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) || c.state.CompareAndSwap(stateNew, stateClosed) {
			c.raw.Close()
		}
	}
}

func (c *tcpConn) serve() {
	s := c.s
	reason := "closed"
	defer func() {
		c.tc.Close() // close_notify when possible, bounded by crypto/tls's 5 s write deadline
		if c.br != nil {
			putReader(c.br)
			c.br = nil
		}
		if c.bw != nil {
			putWriter(c.bw)
			c.bw = nil
		}
		s.mu.Lock()
		delete(s.tcpConns, c)
		s.mu.Unlock()
		s.stats.tcpOpen.Add(-1)
		<-s.connSlots
		s.perAddr.Release(c.addrKey)
		s.log.Debug("agtp conn closed", "transport", TransportTCP, "conn", c.info.ID,
			"remote", c.info.RemoteAddr.String(), "requests", c.info.Requests, "reason", reason)
		s.live.Add(-1) // last: Shutdown returns when it reaches zero
	}()
	s.log.Debug("agtp conn open", "transport", TransportTCP, "conn", c.info.ID, "remote", c.info.RemoteAddr.String())

	c.raw.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	err := c.tc.Handshake()
	s.hs.done(c.pending)
	if err != nil {
		switch {
		case c.wasShed.Load():
			reason = "handshake shed"
		case c.state.Load() != stateClosed:
			s.stats.handshakeFailed.Add(1)
			reason = "handshake: " + err.Error()
		default:
			reason = "shutdown"
		}
		return
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	defer cancel()
	c.ctx = ctx
	st := c.tc.ConnectionState()
	c.info.TLS = &st
	c.info.Peer = s.inspectPeer(&st)
	if !c.state.CompareAndSwap(stateNew, stateIdle) {
		reason = "shutdown"
		if c.wasShed.Load() {
			reason = "handshake shed"
		}
		return
	}

	for {
		if c.br == nil && !c.awaitRequest(&reason) {
			return
		}
		c.raw.SetReadDeadline(time.Now().Add(s.opts.HeaderTimeout))
		c.inBody = false
		req, resp, closeAfter, err := c.request()
		if err != nil {
			reason = c.readFailure(err)
			return
		}
		s.stats.tcpRequests.Add(1)
		if c.bw == nil {
			c.bw = getWriter(c)
		}
		c.writeArmed = false
		if err := s.writeResponse(c.ctx, c.bw, resp, &c.info, req); err != nil {
			reason = "write: " + err.Error()
			return
		}
		c.info.Requests++
		if closeAfter {
			reason = "protocol error"
			c.lingerClose()
			return
		}
		if s.shutting.Load() {
			reason = "shutdown"
			c.lingerClose()
			return
		}
		if c.br.Buffered() == 0 {
			putReader(c.br)
			c.br = nil
		}
		// Otherwise a pipelined request is already buffered: this
		// response stays in bw until its handler is about to run
		// (flushBeforeHandler) or Read must wait for the network.
	}
}

// request reads the next request from br and answers it; err is a read
// failure that leaves nothing to answer. A body is read only once its
// request holds an in-flight slot, into a buffer that grows within the
// body budget as bytes arrive: connections that announce bodies and send
// nothing hold no body memory, and at most MaxInFlight of them wait on
// their bodies at once.
func (c *tcpConn) request() (req *agtp.Request, resp *agtp.Response, closeAfter bool, err error) {
	s := c.s
	ctx := c.ctx
	head, err := agtp.ReadRequestHead(c.br, c.lim)
	if err != nil {
		return c.protocolError(head.Request, err)
	}
	if head.ContentLength == 0 {
		// Nothing to hold: the slot is taken around the handler only, and
		// a request refused after its head (459) needs none.
		if req, err = head.ReadBody(c.br, nil); err != nil {
			return c.protocolError(req, err)
		}
		if err := c.flushBeforeHandler(); err != nil {
			return nil, nil, false, err
		}
		return req, s.serve(ctx, &c.info, req), false, nil
	}
	req = head.Request
	if !s.acquire(ctx) {
		resp = s.busy(ctx, &c.info, req)
		// The body is read past without being kept, so the connection
		// stays framed for the client's next request as after any 503.
		if err := head.DiscardBody(c.br); err != nil {
			return nil, nil, false, err
		}
		return req, resp, false, nil
	}
	defer s.release()
	g := s.bodies.grant(ctx)
	defer g.release()
	if req, err = head.ReadBody(c.br, g.grow); err != nil {
		if errors.Is(err, errBodyBudget) {
			// The rest of the body is unread: answer, then close.
			return head.Request, s.budgetExhausted(ctx, &c.info, head.Request), true, nil
		}
		return c.protocolError(req, err)
	}
	if err := c.flushBeforeHandler(); err != nil {
		return nil, nil, false, err
	}
	return req, s.handle(ctx, &c.info, req), false, nil
}

// flushBeforeHandler sends the responses to earlier pipelined requests
// still in bw before the next request's handler runs: that handler may
// take as long as the request timeout, or wait for something its client
// does only once it has the earlier answers. Responses written back to
// back without a handler between them (refusals of the wire stage) still
// share a write.
func (c *tcpConn) flushBeforeHandler() error {
	if c.bw == nil || c.bw.Buffered() == 0 {
		return nil
	}
	return c.flush()
}

// protocolError answers a wire error from agtp; any other error is a
// read failure, returned as it is.
func (c *tcpConn) protocolError(req *agtp.Request, err error) (*agtp.Request, *agtp.Response, bool, error) {
	var perr *agtp.ProtocolError
	if !errors.As(err, &perr) {
		return nil, nil, false, err
	}
	c.s.stats.protocolErrors.Add(1)
	return req, c.s.errorResponse(c.ctx, &c.info, req, perr), perr.CloseConnection, nil
}

// awaitRequest flushes and releases the write buffer, then waits up to
// IdleTimeout for the next request's first byte without holding a read
// buffer.
func (c *tcpConn) awaitRequest(reason *string) bool {
	s := c.s
	if c.bw != nil {
		if err := c.flush(); err != nil {
			*reason = "write: " + err.Error()
			return false
		}
		putWriter(c.bw)
		c.bw = nil
	}
	c.state.CompareAndSwap(stateActive, stateIdle)
	// Shutdown sets shutting before it looks for idle connections, so
	// either it sees this one idle, or this check sees it shutting.
	if s.shutting.Load() {
		*reason = "shutdown"
		return false
	}
	c.raw.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
	for {
		n, err := c.tc.Read(c.first[:])
		if n == 1 {
			break
		}
		if err != nil {
			var ne net.Error
			switch {
			case c.state.Load() == stateClosed:
				*reason = "shutdown"
			case errors.As(err, &ne) && ne.Timeout():
				s.stats.idleTimes.Add(1)
				*reason = "idle timeout"
			case errors.Is(err, io.EOF):
				*reason = "client closed"
			default:
				*reason = "read: " + err.Error()
			}
			return false
		}
	}
	if !c.state.CompareAndSwap(stateIdle, stateActive) {
		*reason = "shutdown"
		return false
	}
	c.hasFirst = true
	c.br = getReader(c)
	return true
}

// Read feeds br: first the byte awaitRequest read, then the TLS stream.
// Responses still buffered are flushed before anything that may block, so
// a client that waits for a response before sending more never waits on
// the server's batching.
func (c *tcpConn) Read(p []byte) (int, error) {
	if c.hasFirst {
		c.hasFirst = false
		p[0] = c.first[0]
		return 1, nil
	}
	if c.bw != nil && c.bw.Buffered() > 0 {
		if err := c.flush(); err != nil {
			return 0, err
		}
	}
	return c.tc.Read(p)
}

func (c *tcpConn) flush() error {
	return c.bw.Flush()
}

// Write is where bw sends to the network. The first write of each
// response sets the write deadline: a response goes out either with a
// flush or, when it is larger than what bw has left, while it is being
// written, and either way it gets WriteTimeout from its first byte, never
// a deadline left over from the handshake or an earlier response.
func (c *tcpConn) Write(p []byte) (int, error) {
	if !c.writeArmed {
		c.raw.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
		c.writeArmed = true
	}
	return c.tc.Write(p)
}

// bodyLimit is Limits.BodyLimit: agtp.ReadRequestHead calls it when the header
// section of a request with a body is complete, which is where the header
// deadline gives way to the body deadline (a request without one reads
// nothing more).
func (c *tcpConn) bodyLimit(method, path string) int64 {
	c.inBody = true
	c.raw.SetReadDeadline(time.Now().Add(c.s.opts.BodyTimeout))
	return c.s.bodyLimit(method, path)
}

func (c *tcpConn) readFailure(err error) string {
	var ne net.Error
	switch {
	case c.state.Load() == stateClosed:
		return "shutdown"
	case errors.As(err, &ne) && ne.Timeout():
		if c.inBody {
			c.s.stats.bodyTimeouts.Add(1)
			return "body timeout"
		}
		c.s.stats.headerTimeouts.Add(1)
		return "header timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "client closed mid-request"
	}
	// TLS record errors (garbage after the handshake) end up here too:
	// there is no framing left to answer in.
	return "read: " + err.Error()
}

// lingerClose ends a connection after its last response; see lingerTimeout.
func (c *tcpConn) lingerClose() {
	if c.bw != nil && c.bw.Buffered() > 0 {
		if c.flush() != nil {
			return
		}
	}
	c.raw.SetWriteDeadline(time.Now().Add(time.Second))
	c.tc.CloseWrite() // close_notify
	if cw, ok := c.raw.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() // FIN
	}
	c.raw.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c.raw, lingerMaxBytes)
}

// writeResponse writes resp to bw without flushing. A response the
// handler got wrong (agtp.Response.Write refuses it before writing a
// byte) is replaced by 500, so a bad handler cannot break the framing;
// the 500 is shaped by the ErrorResponder like the transport's other
// answers, and falls back to the bare error body if that is refused too.
// A handler that must sign what it answers checks its response first
// (agtp.Response.Check), so that it never gets here.
func (s *Server) writeResponse(ctx context.Context, bw *bufio.Writer, resp *agtp.Response, info *ConnInfo, req *agtp.Request) error {
	err := resp.Write(bw)
	if err == nil || !invalidMessage(err) {
		return err
	}
	s.stats.invalidResponses.Add(1)
	attrs := []any{"conn", info.ID, "status", resp.Status, "err", err}
	if req != nil {
		attrs = append(attrs, "method", req.Method, "path", req.Path)
	}
	s.log.Error("agtp handler returned an invalid response", attrs...)
	perr := &agtp.ProtocolError{Status: agtp.StatusServerError, Reason: ReasonInternalError, Explanation: "internal error"}
	if err := s.errorResponse(ctx, info, req, perr).Write(bw); err == nil || !invalidMessage(err) {
		return err
	}
	return defaultErrorResponse(req, perr).Write(bw)
}

func invalidMessage(err error) bool {
	return errors.Is(err, agtp.ErrInvalidStatus) || errors.Is(err, agtp.ErrInvalidHeader) ||
		errors.Is(err, agtp.ErrMissingContentType) || errors.Is(err, agtp.ErrBodyNotAllowed)
}
