package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/quic-go/quic-go"
)

var (
	errConnLimit      = errors.New("transport: connection limit reached")
	errAddrLimit      = errors.New("transport: per-address connection limit reached")
	errHandshakeLimit = errors.New("transport: handshake limit reached")
)

// quicConfig is agtpquic.Config with the server's limits.
func (s *Server) quicConfig() *quic.Config {
	c := agtpquic.Config()
	c.HandshakeIdleTimeout = s.opts.HandshakeTimeout
	c.MaxIdleTimeout = s.opts.IdleTimeout
	// Keep-alives keep QUIC's own idle timer (which counts packets, not
	// requests) from closing a connection while a slow handler runs; a
	// peer that vanished still times out because its acks stop. Idle
	// connections are closed by serve's request-level idle timeout.
	c.KeepAlivePeriod = s.opts.IdleTimeout / 2
	c.MaxIncomingStreams = int64(s.opts.MaxStreamsPerConn)
	return c
}

// verifySourceAddress is quic.Transport.VerifySourceAddress: above the
// configured rate of new connection attempts, clients must echo a Retry
// token first, so a spoofed-source flood costs the server one stateless
// packet per attempt instead of a handshake.
//
// It also requires a Retry while the handshake backlog is three quarters
// full: a client that never reads the server's answer (a half-open flood)
// cannot echo the token, so it stops adding handshakes there, and the
// last quarter stays for clients that can (RFC 9000 §8.1.2). And it
// requires one from a source that holds as many connections as
// MaxConnsPerIP allows, so that the refusal goes to the address that
// proved it is the source (quicConnContext).
func (s *Server) verifySourceAddress(addr net.Addr) bool {
	if s.hs.len() < s.retryAbove && !s.perAddr.Full(addr) && s.retry != nil && s.retry.allow() {
		return false
	}
	s.stats.quicRetry.Add(1)
	return true
}

// quicConnContext is quic.Transport.ConnContext, called for a connection
// attempt that passed the Retry check. It takes a connection slot (shared
// with TCP) and a place in the handshake backlog, or refuses the attempt
// (CONNECTION_REFUSED). An attempt whose source a Retry verified is also
// counted against that source here; any other is counted once its
// handshake has proved the address (startQUIC): the source address of a
// first Initial is whatever its sender wrote, and counted at once, a
// third party's spoofed Initials would take the slots of the address
// they name, on TCP too, for a handshake timeout. Until then the backlog
// bounds what unproven attempts hold. Everything is given back when
// quic-go ends the connection's context; the backlog place earlier, when
// the handshake completes.
//
// It runs on quic-go's packet loop, so it must not wait: where the TCP
// accept loop pauses, QUIC refuses.
func (s *Server) quicConnContext(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	if s.shutting.Load() {
		return nil, ErrServerClosed
	}
	adm := &quicAdmission{}
	if ci.AddrVerified && !adm.countSource(s, ci.RemoteAddr) {
		s.stats.perAddrRefused.Add(1)
		return nil, errAddrLimit
	}
	select {
	case s.connSlots <- struct{}{}:
	default:
		adm.end(s)
		s.stats.quicRefused.Add(1)
		return nil, errConnLimit
	}
	p, shed, ok := s.hs.admit(time.Now(), nil)
	if !ok {
		<-s.connSlots
		adm.end(s)
		s.stats.handshakeLimit.Add(1)
		return nil, errHandshakeLimit
	}
	if shed {
		s.stats.handshakesShed.Add(1)
	}
	adm.pending = p
	context.AfterFunc(ctx, func() {
		s.hs.done(p)
		<-s.connSlots
		adm.end(s)
	})
	return context.WithValue(ctx, admissionKey{}, adm), nil
}

// quicAdmission is what a QUIC connection holds from quicConnContext
// until it ends: its place in the handshake backlog and, once its source
// address is proved, its count against that source.
type quicAdmission struct {
	pending *pending
	mu      sync.Mutex
	addrKey netip.Addr
	counted bool
	ended   bool
}

// countSource counts the connection against its source address, once;
// false when the source already holds MaxConnsPerIP. A connection that
// has ended is not counted.
func (a *quicAdmission) countSource(s *Server, addr net.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counted || a.ended {
		return true
	}
	key, ok := s.perAddr.Acquire(addr)
	if !ok {
		return false
	}
	a.addrKey, a.counted = key, true
	return true
}

// end gives back the source's count.
func (a *quicAdmission) end(s *Server) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	if a.counted {
		s.perAddr.Release(a.addrKey)
		a.counted = false
	}
}

// admissionKey carries a QUIC connection's quicAdmission from
// quicConnContext to startQUIC.
type admissionKey struct{}

func (s *Server) acceptQUIC(ln *quic.EarlyListener) error {
	defer s.live.Add(-1)
	for {
		// Early connections: a 0-RTT request is read before the
		// handshake completes; serveStream applies the 0-RTT rule.
		qc, err := ln.Accept(context.Background())
		if err != nil {
			if s.shutting.Load() || errors.Is(err, quic.ErrServerClosed) {
				return nil
			}
			return err
		}
		s.startQUIC(qc)
	}
}

// quicConn is one QUIC connection: a goroutine accepting streams and one
// goroutine per request stream.
type quicConn struct {
	s         *Server
	qc        *quic.Conn
	id        uint64
	tls       atomic.Pointer[handshakeState] // set once the handshake is complete
	requests  atomic.Uint64                  // streams accepted
	active    atomic.Int64                   // streams being served
	lastWrite atomic.Int64                   // unix nanoseconds of the last response
	wasShed   atomic.Bool                    // closed to make room in the handshake backlog
	streams   sync.WaitGroup
}

func (s *Server) startQUIC(qc *quic.Conn) {
	c := &quicConn{s: s, qc: qc, id: s.nextID.Add(1)}
	if adm, _ := qc.Context().Value(admissionKey{}).(*quicAdmission); adm != nil {
		// Early connections are handed over as soon as the ClientHello is
		// processed; from here the handshake can be shed, and it leaves
		// the backlog when it completes. A completed handshake proves
		// the source address, which is then counted.
		p := adm.pending
		s.hs.setShed(p, func() {
			if !agtpquic.HandshakeComplete(qc) {
				c.wasShed.Store(true)
				qc.CloseWithError(agtpquic.CodeNoError, "handshake shed")
			}
		})
		go func() {
			select {
			case <-qc.HandshakeComplete():
				if !adm.countSource(s, qc.RemoteAddr()) {
					s.stats.perAddrRefused.Add(1)
					qc.CloseWithError(agtpquic.CodeConnectionLimit, "per-address connection limit")
				}
			case <-qc.Context().Done():
			}
			s.hs.done(p)
		}()
	}
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		qc.CloseWithError(agtpquic.CodeNoError, "server shutting down")
		return
	}
	s.quicConns[c] = struct{}{}
	s.live.Add(1)
	s.mu.Unlock()
	s.stats.quicAccepted.Add(1)
	s.stats.quicOpen.Add(1)
	go c.serve()
}

func (c *quicConn) serve() {
	s := c.s
	code, reason := agtpquic.CodeNoError, "closed"
	defer func() {
		c.streams.Wait()
		c.qc.CloseWithError(code, reason)
		if !agtpquic.HandshakeComplete(c.qc) && !c.wasShed.Load() {
			s.stats.handshakeFailed.Add(1)
		}
		s.mu.Lock()
		delete(s.quicConns, c)
		s.mu.Unlock()
		s.stats.quicOpen.Add(-1)
		s.log.Debug("agtp conn closed", "transport", TransportQUIC, "conn", c.id,
			"remote", c.qc.RemoteAddr().String(), "requests", c.requests.Load(), "reason", reason)
		s.live.Add(-1)
	}()
	s.log.Debug("agtp conn open", "transport", TransportQUIC, "conn", c.id, "remote", c.qc.RemoteAddr().String())
	for {
		// The request-level idle timeout: QUIC's own idle timer is kept
		// alive by keep-alives, so an agent that holds a connection
		// without using it is closed here.
		actx, cancel := context.WithTimeout(s.stopCtx, s.opts.IdleTimeout)
		str, err := c.qc.AcceptStream(actx)
		cancel()
		if err != nil {
			switch {
			case c.qc.Context().Err() != nil:
				reason = "closed: " + context.Cause(c.qc.Context()).Error()
			case s.stopCtx.Err() != nil:
				c.drain()
				reason = "server shutting down"
			case c.active.Load() > 0:
				continue
			default:
				s.stats.idleTimes.Add(1)
				reason = "idle timeout"
			}
			return
		}
		c.active.Add(1)
		c.streams.Add(1)
		n := c.requests.Add(1) - 1
		go c.serveStream(str, n)
	}
}

// drain waits for the streams in flight, then lingers so their last
// responses can be acknowledged before CONNECTION_CLOSE makes the client
// drop whatever it has not read yet. quic-go does not expose stream
// acknowledgement, so the linger is a few round trips.
func (c *quicConn) drain() {
	c.streams.Wait()
	last := c.lastWrite.Load()
	if last == 0 {
		return
	}
	linger := min(3*c.qc.ConnectionStats().SmoothedRTT+100*time.Millisecond, 2*time.Second)
	if wait := time.Until(time.Unix(0, last).Add(linger)); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.qc.Context().Done():
		}
	}
}

// handshakeState is what a completed handshake established, shared by
// the connection's streams.
type handshakeState struct {
	tls  tls.ConnectionState
	peer any
}

// tlsState returns the connection's TLS state and what its client
// certificate proves. Before the handshake has completed (0-RTT) the state
// is recomputed per request and not cached, and proves no peer.
func (c *quicConn) tlsState(early bool) (*tls.ConnectionState, any) {
	if p := c.tls.Load(); p != nil {
		return &p.tls, p.peer
	}
	st := c.qc.ConnectionState().TLS
	if early {
		return &st, nil
	}
	hs := &handshakeState{tls: st}
	hs.peer = c.s.inspectPeer(&hs.tls)
	if !c.tls.CompareAndSwap(nil, hs) {
		hs = c.tls.Load()
	}
	return &hs.tls, hs.peer
}

// refuseEarly is the 0-RTT rule (docs/decisions.md#D-zero-rtt): a request
// read before the handshake completed may be a replay, so only the
// read-only QUERY and DISCOVER are served from it; others get 425.
// Deciding when the request has been read is sound: a replayed flight
// never completes the handshake.
func refuseEarly(early bool, method string) bool {
	return early && !agtp.AllowedIn0RTT(method)
}

// serveStream reads one request from its stream, answers it, and closes
// the stream's write side (FIN).
func (c *quicConn) serveStream(str *quic.Stream, n uint64) {
	s := c.s
	defer func() {
		c.active.Add(-1)
		c.streams.Done()
	}()
	// The stream exists because its first bytes arrived, so the header
	// deadline starts now.
	str.SetReadDeadline(time.Now().Add(s.opts.HeaderTimeout))
	br := getReader(str)
	lim := s.lim
	inBody := false
	lim.BodyLimit = func(method, path string) int64 {
		inBody = true
		str.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		return s.bodyLimit(method, path)
	}
	ctx := str.Context()
	// As on TCP, a body is read only once its request holds an in-flight
	// slot, within the body budget (see tcpConn.request).
	head, err := agtp.ReadRequestHead(br, lim)
	req := head.Request
	held, refused := false, ""
	var g *bodyGrant
	if err == nil {
		switch {
		case head.ContentLength == 0:
			req, err = head.ReadBody(br, nil)
		case !s.acquire(ctx):
			refused = ReasonServerBusy
		default:
			held = true
			g = s.bodies.grant(ctx)
			req, err = head.ReadBody(br, g.grow)
			if errors.Is(err, errBodyBudget) {
				req, err, refused = head.Request, nil, ReasonBodyBudgetExhausted
			}
		}
	}
	// An unread body is refused with STOP_SENDING after the response.
	extra := refused != "" || br.Buffered() > 0
	putReader(br)
	// The slot and the body's budget are given back once the response is
	// built, as on TCP, and on every early return.
	done := func() {
		if g != nil {
			g.release()
		}
		if held {
			held = false
			s.release()
		}
	}
	defer done()

	early := !agtpquic.HandshakeComplete(c.qc)
	info := &ConnInfo{Transport: TransportQUIC, RemoteAddr: c.qc.RemoteAddr(), ID: c.id,
		Requests: n, EarlyData: early}
	info.TLS, info.Peer = c.tlsState(early)
	var resp *agtp.Response
	var perr *agtp.ProtocolError
	switch {
	case refused == ReasonServerBusy:
		resp = s.busy(ctx, info, req)
	case refused == ReasonBodyBudgetExhausted:
		resp = s.budgetExhausted(ctx, info, req)
	case err == nil && refuseEarly(early, req.Method):
		s.stats.tooEarly.Add(1)
		resp = s.errorResponse(ctx, info, req, agtp.TooEarly(req.Method))
	case err == nil && held:
		resp = s.handle(ctx, info, req)
	case err == nil:
		resp = s.serve(ctx, info, req)
	case errors.As(err, &perr):
		s.stats.protocolErrors.Add(1)
		resp = s.errorResponse(ctx, info, req, perr)
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if inBody {
				s.stats.bodyTimeouts.Add(1)
			} else {
				s.stats.headerTimeouts.Add(1)
			}
		}
		str.CancelRead(agtpquic.StreamAbandoned)
		str.CancelWrite(agtpquic.StreamAbandoned)
		return
	}
	done()
	s.stats.quicRequests.Add(1)

	str.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	bw := getWriter(str)
	err = s.writeResponse(ctx, bw, resp, info, req)
	if err == nil {
		err = bw.Flush()
	}
	putWriter(bw)
	if err != nil {
		str.CancelRead(agtpquic.StreamAbandoned)
		str.CancelWrite(agtpquic.StreamAbandoned)
		return
	}
	str.Close()
	c.lastWrite.Store(time.Now().UnixNano())
	c.finishRead(str, extra)
}

// finishRead completes the stream's receive side so that its credit goes
// back to the client: cleanly if the client's FIN is already here, with
// STOP_SENDING otherwise (more data after the request, or no FIN yet).
func (c *quicConn) finishRead(str *quic.Stream, extra bool) {
	if !extra {
		str.SetReadDeadline(time.Now()) // poll: do not wait for a FIN
		var b [1]byte
		if n, err := str.Read(b[:]); n == 0 && err == io.EOF {
			return
		}
	}
	str.CancelRead(agtpquic.StreamNoError)
}
