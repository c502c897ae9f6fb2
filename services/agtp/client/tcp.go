package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// aLongTimeAgo is a deadline in the past: setting it makes blocked reads
// and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// tcpPool is the connections to one address.
//
// A connection carries requests one at a time, or up to MaxPipeline at a
// time when pipelining: writes take turns under wmu, and each request
// waits for the one before it to finish reading before it reads its own
// response (tail). No goroutine watches an idle connection; instead, a
// connection taken from the idle list is checked with one non-blocking
// read of its socket (connCheck), which catches the common case of a
// server that closed it while idle, and the retry rule (see
// ErrNoResponse) covers a close that races with the request.
type tcpPool struct {
	c    *Client
	addr string
	tls  *tls.Config

	// refs counts the requests that took the pool from the Client's map
	// and have not given it back (Client.unref). Guarded by c.mu, which
	// is taken before mu.
	refs int

	mu      sync.Mutex
	conns   []*tcpConn // every open connection
	idle    []*tcpConn // connections with nothing in flight, most recently used last
	dialing int
	waiters []chan struct{}
	sweep   *time.Timer
	closed  bool
}

type tcpConn struct {
	p     *tcpPool
	nc    net.Conn
	tc    *tls.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	info  ConnInfo
	check connChecker

	wmu  sync.Mutex
	tail chan struct{} // closed when the last request written has been read; pipelining only

	// Guarded by p.mu.
	inflight  int
	requests  uint64
	idleSince time.Time

	// broken: take no more requests, close once nothing is in flight.
	broken atomic.Bool
	closed atomic.Bool

	// Owned by whoever holds the write (wtap) or read (rtap) turn.
	wtap, rtap func([]byte)
}

func newTCPPool(c *Client, addr string, cfg *tls.Config) *tcpPool {
	return &tcpPool{c: c, addr: addr, tls: cfg}
}

// Read and Write put the trace taps between bufio and TLS.
func (c *tcpConn) Read(b []byte) (int, error) {
	n, err := c.tc.Read(b)
	if n > 0 && c.rtap != nil {
		c.rtap(b[:n])
	}
	return n, err
}

func (c *tcpConn) Write(b []byte) (int, error) {
	n, err := c.tc.Write(b)
	if n > 0 && c.wtap != nil {
		c.wtap(b[:n])
	}
	return n, err
}

// kill closes the connection now, failing whatever is in flight on it.
// No close_notify: the stream may be mid-message, and a TLS close would
// wait on a blocked writer.
func (c *tcpConn) kill() {
	c.broken.Store(true)
	if c.closed.CompareAndSwap(false, true) {
		c.nc.Close()
	}
}

// closeIdle ends an idle connection politely (close_notify, then FIN).
func (c *tcpConn) closeIdle() {
	if c.closed.CompareAndSwap(false, true) {
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.tc.Close()
	}
}

func (p *tcpPool) dial(ctx context.Context) (*tcpConn, error) {
	opts := &p.c.opts
	var nc net.Conn
	var err error
	if opts.DialContext != nil {
		dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
		nc, err = opts.DialContext(dctx, "tcp", p.addr)
		cancel()
	} else {
		d := net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
		nc, err = d.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("agtp client: connect to %s: %w", p.addr, err)
	}
	tc := tls.Client(nc, p.tls)
	hctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("agtp client: TLS handshake with %s: %w", p.addr, err)
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != agtp.ALPN {
		nc.Close()
		return nil, fmt.Errorf("agtp client: %s negotiated ALPN %q, not %q", p.addr, st.NegotiatedProtocol, agtp.ALPN)
	}
	c := &tcpConn{p: p, nc: nc, tc: tc,
		info: ConnInfo{Transport: TransportTCP, Addr: p.addr, LocalAddr: nc.LocalAddr(), RemoteAddr: nc.RemoteAddr(), TLS: st}}
	c.br = bufio.NewReaderSize(c, 4096)
	c.bw = bufio.NewWriterSize(c, 4096)
	c.check.init(nc)
	return c, nil
}

// get returns a connection with a request slot taken on it, and whether
// it carried requests before.
func (p *tcpPool) get(ctx context.Context) (*tcpConn, bool, error) {
	opts := &p.c.opts
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, ErrClosed
		}
		if c := p.popIdleLocked(); c != nil {
			c.inflight, c.requests = 1, c.requests+1
			p.mu.Unlock()
			if c.br.Buffered() > 0 || c.check.alive() != nil {
				// The server closed it, or sent bytes no request asked
				// for: either way it is unusable.
				c.kill()
				p.release(c)
				continue
			}
			return c, true, nil
		}
		if len(p.conns)+p.dialing < opts.MaxConnsPerHost {
			p.dialing++
			p.mu.Unlock()
			c, err := p.dial(ctx)
			p.mu.Lock()
			p.dialing--
			if err == nil && p.closed {
				c.kill()
				err = ErrClosed
			}
			if err != nil {
				p.wakeLocked() // the slot is free again
				p.mu.Unlock()
				return nil, false, err
			}
			c.inflight, c.requests = 1, 1
			p.conns = append(p.conns, c)
			if opts.MaxPipeline > 1 {
				// Requests waiting for a connection can pipeline on
				// this one.
				for len(p.waiters) > 0 {
					p.wakeLocked()
				}
			}
			p.mu.Unlock()
			return c, false, nil
		}
		if opts.MaxPipeline > 1 {
			var best *tcpConn
			for _, c := range p.conns {
				if !c.broken.Load() && c.inflight < opts.MaxPipeline && (best == nil || c.inflight < best.inflight) {
					best = c
				}
			}
			if best != nil {
				best.inflight++
				best.requests++
				p.mu.Unlock()
				return best, true, nil
			}
		}
		ch := make(chan struct{}, 1)
		p.waiters = append(p.waiters, ch)
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			p.mu.Lock()
			if i := slices.Index(p.waiters, ch); i >= 0 {
				p.waiters = slices.Delete(p.waiters, i, i+1)
			} else {
				p.wakeLocked() // we were woken: pass it on
			}
			p.mu.Unlock()
			return nil, false, fmt.Errorf("agtp client: waiting for a connection to %s: %w", p.addr, ctx.Err())
		}
	}
}

// popIdleLocked takes the most recently used idle connection that has
// not been idle too long, closing the expired ones it meets.
func (p *tcpPool) popIdleLocked() *tcpConn {
	for n := len(p.idle); n > 0; n = len(p.idle) {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if time.Since(c.idleSince) < p.c.opts.IdleConnTimeout && !c.broken.Load() {
			return c
		}
		p.removeLocked(c)
		go c.closeIdle()
	}
	return nil
}

// release gives back a request slot taken by get.
func (p *tcpPool) release(c *tcpConn) {
	p.mu.Lock()
	c.inflight--
	var closeNow bool
	switch {
	case c.broken.Load() || p.closed:
		if c.inflight == 0 {
			p.removeLocked(c)
			closeNow = true
		}
	case c.inflight == 0:
		c.idleSince = time.Now()
		p.idle = append(p.idle, c)
		if p.sweep == nil {
			p.sweep = time.AfterFunc(p.c.opts.IdleConnTimeout, p.sweepIdle)
		}
	}
	p.wakeLocked()
	empty := len(p.conns) == 0
	p.mu.Unlock()
	if closeNow {
		c.kill()
	}
	if empty {
		p.c.dropIfUnused(p)
	}
}

func (p *tcpPool) removeLocked(c *tcpConn) {
	if i := slices.Index(p.conns, c); i >= 0 {
		p.conns = slices.Delete(p.conns, i, i+1)
	}
	if i := slices.Index(p.idle, c); i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
	}
}

func (p *tcpPool) wakeLocked() {
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		ch <- struct{}{}
	}
}

// sweepIdle closes connections idle for IdleConnTimeout, so that an
// agent that stops sending does not hold sockets until the server's
// idle timeout.
func (p *tcpPool) sweepIdle() {
	timeout := p.c.opts.IdleConnTimeout
	var expired []*tcpConn
	p.mu.Lock()
	p.sweep = nil
	next := time.Duration(-1)
	for _, c := range slices.Clone(p.idle) {
		if age := time.Since(c.idleSince); age >= timeout {
			p.removeLocked(c)
			expired = append(expired, c)
		} else if left := timeout - age; next < 0 || left < next {
			next = left
		}
	}
	if next >= 0 && !p.closed {
		p.sweep = time.AfterFunc(next, p.sweepIdle)
	}
	empty := len(p.conns) == 0
	p.mu.Unlock()
	for _, c := range expired {
		c.closeIdle()
	}
	if empty {
		p.c.dropIfUnused(p)
	}
}

func (p *tcpPool) close() {
	p.mu.Lock()
	p.closed = true
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	idle := p.idle
	p.idle = nil
	busy := slices.Clone(p.conns)
	for _, c := range idle {
		p.removeLocked(c)
	}
	for len(p.waiters) > 0 {
		p.wakeLocked()
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.closeIdle()
	}
	for _, c := range busy {
		c.kill()
	}
}

// tcpExchange is one request on a TCP connection.
type tcpExchange struct {
	c         *tcpConn
	lim       agtp.Limits
	mine      chan struct{} // closed when done reading; pipelining only
	stop      func() bool   // stops the cancellation hook
	pipelined bool
	finished  bool
}

// start writes req on a pooled connection and reads its first response.
func (p *tcpPool) start(ctx context.Context, req *agtp.Request, tr *Trace) (exchange, *agtp.Response, error) {
	c, reused, err := p.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	if tr != nil {
		info := c.info
		info.Reused = reused
		tr.gotConn(info)
	}
	x := &tcpExchange{c: c, lim: p.c.lim, pipelined: p.c.opts.MaxPipeline > 1}
	deadline, _ := ctx.Deadline()

	// Write, in turn with other writers on the connection.
	c.wmu.Lock()
	if c.broken.Load() {
		c.wmu.Unlock()
		p.release(c)
		return nil, nil, &noResponseError{err: net.ErrClosed, reused: true, unsent: true}
	}
	var prev chan struct{}
	if x.pipelined {
		prev = c.tail
		x.mine = make(chan struct{})
		c.tail = x.mine
		c.nc.SetWriteDeadline(deadline)
		if ctx.Done() != nil {
			x.stop = context.AfterFunc(ctx, func() { c.nc.SetWriteDeadline(aLongTimeAgo) })
		}
	} else {
		c.nc.SetDeadline(deadline)
		if ctx.Done() != nil {
			x.stop = context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
		}
	}
	c.wtap = tr.sent()
	err = req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	} else if isRequestInvalid(err) {
		// Nothing was written: the connection is as good as before.
		c.wtap = nil
		if x.pipelined {
			c.tail = prev
		}
		c.wmu.Unlock()
		x.disarm()
		p.release(c)
		return nil, nil, fmt.Errorf("agtp client: %w", err)
	}
	c.wtap = nil
	c.wmu.Unlock()
	writeCancelled := x.pipelined && !x.disarm()
	if err != nil {
		x.disarm()
		c.kill()
		x.finished = true
		x.done()
		if cerr := contextError(ctx, deadline, err); cerr != nil {
			return nil, nil, cerr
		}
		return nil, nil, &noResponseError{err: err, reused: reused}
	}

	// Read, after the responses to the requests written before this one.
	if x.pipelined {
		cancelled := writeCancelled
		if prev != nil && !cancelled {
			select {
			case <-prev:
			case <-ctx.Done():
				cancelled = true
			}
		}
		if cancelled || ctx.Err() != nil {
			// The response will come after the ones in flight; nobody
			// will read it, so the connection ends when they are done.
			c.broken.Store(true)
			x.finished = true
			go func() {
				if prev != nil {
					<-prev
				}
				c.kill()
				x.done()
			}()
			return nil, nil, fmt.Errorf("agtp client: %w", context.Cause(ctx))
		}
		if c.closed.Load() {
			// A request before this one failed and took the
			// connection with it.
			x.finish(nil)
			return nil, nil, &noResponseError{err: net.ErrClosed, reused: true}
		}
	}
	if x.pipelined {
		c.nc.SetReadDeadline(deadline)
		if ctx.Done() != nil {
			x.stop = context.AfterFunc(ctx, func() { c.nc.SetReadDeadline(aLongTimeAgo) })
		}
	}
	c.rtap = tr.received()
	if _, err := c.br.Peek(1); err != nil {
		x.finish(nil)
		if cerr := contextError(ctx, deadline, err); cerr != nil {
			return nil, nil, cerr
		}
		return nil, nil, &noResponseError{err: err, reused: reused}
	}
	resp, err := agtp.ReadResponse(c.br, x.lim)
	if err != nil {
		x.finish(nil)
		if cerr := contextError(ctx, deadline, err); cerr != nil {
			return nil, nil, cerr
		}
		return nil, nil, fmt.Errorf("agtp client: read response from %s: %w", p.addr, err)
	}
	return x, resp, nil
}

// disarm reports false when the cancellation hook already ran (the
// connection's deadline is then in the past).
func (x *tcpExchange) disarm() bool {
	if x.stop == nil {
		return true
	}
	ok := x.stop()
	x.stop = nil
	return ok
}

func (x *tcpExchange) next() (*agtp.Response, error) {
	resp, err := agtp.ReadResponse(x.c.br, x.lim)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("agtp client: read streamed response from %s: %w", x.c.p.addr, err)
	}
	return resp, nil
}

func (x *tcpExchange) finish(last *agtp.Response) {
	if x.finished {
		return
	}
	x.finished = true
	c := x.c
	c.rtap = nil
	if !x.disarm() || last == nil {
		c.kill()
	} else if !x.pipelined && c.br.Buffered() > 0 {
		c.kill() // bytes after the response that no request asked for
	} else if last.Status == agtp.StatusBadRequest {
		// A wire-level 400 is followed by the server closing the
		// connection (agtp.ProtocolError.CloseConnection); do not offer
		// it to the next request.
		c.broken.Store(true)
	}
	x.done()
}

// done passes the read turn on and gives the slot back.
func (x *tcpExchange) done() {
	if x.mine != nil {
		close(x.mine)
	}
	x.c.p.release(x.c)
}
