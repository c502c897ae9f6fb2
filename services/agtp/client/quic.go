package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/quic-go/quic-go"
)

// finWait bounds how long a client waits for the FIN that follows the
// last response on a stream before it stops reading the stream anyway.
const finWait = time.Second

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// quicPool keeps one QUIC connection per address, all on one UDP socket.
type quicPool struct {
	c *Client

	mu     sync.Mutex
	udp    net.PacketConn
	tr     *quic.Transport
	conns  map[string]*quicConn
	closed bool
}

// quicConn is a connection, or a dial in progress (ready not yet closed).
type quicConn struct {
	addr     string
	host     string
	ready    chan struct{}
	conn     *quic.Conn // set before ready is closed; replaced after a 0-RTT rejection
	err      error
	requests atomic.Uint64
	mu       sync.Mutex // guards conn after ready
}

func newQUICPool(c *Client) *quicPool {
	return &quicPool{c: c, conns: map[string]*quicConn{}}
}

func (p *quicPool) transport() (*quic.Transport, error) {
	if p.tr != nil {
		return p.tr, nil
	}
	// Dual-stack on the systems that allow it, so both IPv4 and IPv6
	// servers are reachable from one socket.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		return nil, fmt.Errorf("agtp client: open UDP socket: %w", err)
	}
	p.udp = udp
	p.tr = &quic.Transport{Conn: udp}
	return p.tr, nil
}

func (p *quicPool) close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*quicConn{}
	tr, udp := p.tr, p.udp
	p.mu.Unlock()
	for _, e := range conns {
		select {
		case <-e.ready:
			if e.conn != nil {
				e.current().CloseWithError(agtpquic.CodeNoError, "client closed")
			}
		default:
		}
	}
	if tr != nil {
		tr.Close()
		return udp.Close()
	}
	return nil
}

func (e *quicConn) current() *quic.Conn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conn
}

// forget drops e from the pool if it is still addr's entry.
func (p *quicPool) forget(addr string, e *quicConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[addr] == e {
		delete(p.conns, addr)
	}
}

// forgetWhenEnded drops e from the pool once its connection ends (idle
// timeout, the server's close): kept, an ended connection's entry would
// stay until its address is asked for again, and with callers naming a
// new host each time, for ever. A connection that a 0-RTT rejection
// replaced is followed to its successor.
func (p *quicPool) forgetWhenEnded(addr string, e *quicConn) {
	for {
		conn := e.current()
		<-conn.Context().Done()
		if e.current() == conn {
			p.forget(addr, e)
			return
		}
	}
}

// get returns the connection to addr, dialling it when there is none or
// the one there has ended, and whether it carried requests before.
func (p *quicPool) get(ctx context.Context, addr string) (*quicConn, bool, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, false, ErrClosed
		}
		e := p.conns[addr]
		if e != nil {
			select {
			case <-e.ready:
				if e.err != nil || e.current().Context().Err() != nil {
					delete(p.conns, addr)
					e = nil
				}
			default:
			}
		}
		if e == nil {
			hostport, host, err := splitAddr(addr)
			if err != nil {
				p.mu.Unlock()
				return nil, false, err
			}
			tr, err := p.transport()
			if err != nil {
				p.mu.Unlock()
				return nil, false, err
			}
			e = &quicConn{addr: hostport, host: host, ready: make(chan struct{})}
			p.conns[addr] = e
			p.mu.Unlock()
			e.conn, e.err = p.dial(ctx, tr, e)
			close(e.ready)
			if e.err != nil {
				// Kept, a failed dial's entry would stay until its
				// address is asked for again: with callers naming a new
				// host each time, for ever.
				p.forget(addr, e)
				return nil, false, e.err
			}
			go p.forgetWhenEnded(addr, e)
			e.requests.Add(1)
			return e, false, nil
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("agtp client: waiting for a QUIC connection to %s: %w", addr, ctx.Err())
		}
		if e.err != nil {
			if errors.Is(e.err, context.Canceled) {
				continue // the caller that dialled gave up; dial again
			}
			return nil, false, e.err
		}
		if e.current().Context().Err() != nil {
			continue
		}
		return e, e.requests.Add(1) > 1, nil
	}
}

func (p *quicPool) dial(ctx context.Context, tr *quic.Transport, e *quicConn) (*quic.Conn, error) {
	opts := &p.c.opts
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	ua, err := resolveUDP(dctx, e.addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("agtp client: resolve %s: %w", e.addr, err)
	}
	qc := agtpquic.Config()
	qc.HandshakeIdleTimeout = opts.HandshakeTimeout
	qc.MaxIdleTimeout = opts.IdleConnTimeout
	hctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
	defer cancel()
	var conn *quic.Conn
	if opts.Disable0RTT {
		conn, err = tr.Dial(hctx, ua, p.c.tlsFor(e.host), qc)
	} else {
		conn, err = tr.DialEarly(hctx, ua, p.c.tlsFor(e.host), qc)
	}
	if err != nil {
		return nil, fmt.Errorf("agtp client: QUIC handshake with %s: %w", e.addr, err)
	}
	return conn, nil
}

func resolveUDP(ctx context.Context, hostport string) (*net.UDPAddr, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	pn, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(pn))), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no address for %s", host)
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ips[0].Unmap(), uint16(pn))), nil
}

// rejected0RTT moves e to the connection quic-go continues with after the
// server refused 0-RTT; nothing sent in 0-RTT data was processed.
func (e *quicConn) rejected0RTT(ctx context.Context, conn *quic.Conn) error {
	next, err := conn.NextConnection(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.conn == conn {
		e.conn = next
	}
	e.mu.Unlock()
	return nil
}

// quicExchange is one request on its own stream.
type quicExchange struct {
	str      *quic.Stream
	br       *bufio.Reader
	lim      agtp.Limits
	stop     func() bool
	deadline time.Time
	finished bool
}

// tapStream puts the trace taps on a stream.
type tapStream struct {
	str        *quic.Stream
	sent, recv func([]byte)
}

func (t *tapStream) Read(b []byte) (int, error) {
	n, err := t.str.Read(b)
	if n > 0 && t.recv != nil {
		t.recv(b[:n])
	}
	return n, err
}

func (t *tapStream) Write(b []byte) (int, error) {
	n, err := t.str.Write(b)
	if n > 0 && t.sent != nil {
		t.sent(b[:n])
	}
	return n, err
}

// start sends req on a new stream and reads the first response. It sends
// the request again, on the same connection, when the server refused the
// 0-RTT data it went out in (both cases leave the request unprocessed),
// and dials again when the pooled connection turns out to have ended
// before the stream opened.
func (p *quicPool) start(ctx context.Context, req *agtp.Request, addr string, tr *Trace) (exchange, *agtp.Response, error) {
	early := agtp.AllowedIn0RTT(req.Method) && !p.c.opts.Disable0RTT
	deadline, _ := ctx.Deadline()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, reused, err := p.get(ctx, addr)
		if err != nil {
			return nil, nil, err
		}
		conn := e.current()
		if !early {
			select {
			case <-conn.HandshakeComplete():
			case <-conn.Context().Done():
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("agtp client: QUIC handshake with %s: %w", addr, ctx.Err())
			}
		}
		str, err := conn.OpenStreamSync(ctx)
		if err != nil {
			if errors.Is(err, quic.Err0RTTRejected) {
				if lastErr = e.rejected0RTT(ctx, conn); lastErr != nil {
					return nil, nil, fmt.Errorf("agtp client: QUIC connection to %s: %w", addr, lastErr)
				}
				continue
			}
			if cerr := contextError(ctx, deadline, err); cerr != nil {
				return nil, nil, cerr
			}
			if conn.Context().Err() != nil {
				lastErr = err
				continue // ended while idle; nothing was sent
			}
			return nil, nil, fmt.Errorf("agtp client: open QUIC stream to %s: %w", addr, err)
		}
		sentEarly := !agtpquic.HandshakeComplete(conn)
		if tr != nil {
			st := conn.ConnectionState()
			tr.gotConn(ConnInfo{Transport: TransportQUIC, Addr: e.addr, LocalAddr: conn.LocalAddr(),
				RemoteAddr: conn.RemoteAddr(), Reused: reused, TLS: st.TLS, EarlyData: sentEarly})
		}
		x, resp, err := p.exchange(ctx, str, req, tr, deadline)
		switch {
		case err == nil && resp.Status == agtp.StatusTooEarly && sentEarly:
			// The server wants this after the handshake: wait for it and
			// send again. A request refused with 425 was not served.
			x.finish(resp)
			early = false
			continue
		case err == nil:
			return x, resp, nil
		case errors.Is(err, quic.Err0RTTRejected):
			if lastErr = e.rejected0RTT(ctx, conn); lastErr != nil {
				return nil, nil, fmt.Errorf("agtp client: QUIC connection to %s: %w", addr, lastErr)
			}
			continue
		}
		if cerr := contextError(ctx, deadline, err); cerr != nil {
			return nil, nil, cerr
		}
		var nr *noResponseError
		if errors.As(err, &nr) {
			// Only a connection that ended is the stale-connection
			// case the retry rule is for; a reset stream is an answer.
			nr.reused = reused && conn.Context().Err() != nil
		}
		return nil, nil, err
	}
	return nil, nil, fmt.Errorf("agtp client: QUIC request to %s: gave up after 3 attempts: %w", addr, lastErr)
}

// exchange writes req on str, closes the write side and reads the first
// response.
func (p *quicPool) exchange(ctx context.Context, str *quic.Stream, req *agtp.Request, tr *Trace, deadline time.Time) (*quicExchange, *agtp.Response, error) {
	x := &quicExchange{str: str, lim: p.c.lim, deadline: deadline}
	if !deadline.IsZero() {
		str.SetDeadline(deadline)
	}
	if ctx.Done() != nil {
		x.stop = context.AfterFunc(ctx, func() {
			str.CancelRead(agtpquic.StreamAbandoned)
			str.CancelWrite(agtpquic.StreamAbandoned)
		})
	}
	var rw io.ReadWriter = str
	if tr != nil && (tr.Sent != nil || tr.Received != nil) {
		rw = &tapStream{str: str, sent: tr.Sent, recv: tr.Received}
	}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(rw)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writerPool.Put(bw)
	if err != nil {
		x.finish(nil)
		if isRequestInvalid(err) {
			return nil, nil, fmt.Errorf("agtp client: %w", err)
		}
		return nil, nil, &noResponseError{err: err}
	}
	// FIN after the request: the request is complete, the response (or
	// series) comes back on the same stream
	// (docs/decisions.md#D-quic-streams).
	str.Close()

	x.br = readerPool.Get().(*bufio.Reader)
	x.br.Reset(rw)
	if _, err := x.br.Peek(1); err != nil {
		x.finish(nil)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, &noResponseError{err: err}
	}
	resp, err := agtp.ReadResponse(x.br, x.lim)
	if err != nil {
		x.finish(nil)
		return nil, nil, fmt.Errorf("agtp client: read response: %w", err)
	}
	return x, resp, nil
}

func (x *quicExchange) next() (*agtp.Response, error) {
	resp, err := agtp.ReadResponse(x.br, x.lim)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("agtp client: read streamed response: %w", err)
	}
	return resp, nil
}

// finish ends the stream: after the last response it reads up to the FIN
// (briefly: the server sends it with the response), otherwise it resets
// both directions.
func (x *quicExchange) finish(last *agtp.Response) {
	if x.finished {
		return
	}
	x.finished = true
	if x.stop != nil && !x.stop() {
		last = nil // cancelled: the stream is already reset
	}
	if last == nil {
		x.str.CancelRead(agtpquic.StreamAbandoned)
		x.str.CancelWrite(agtpquic.StreamAbandoned)
	} else if x.br.Buffered() > 0 {
		x.str.CancelRead(agtpquic.StreamNoError) // bytes after the last response
	} else {
		wait := time.Now().Add(finWait)
		if !x.deadline.IsZero() && x.deadline.Before(wait) {
			wait = x.deadline
		}
		x.str.SetReadDeadline(wait)
		if _, err := x.br.Peek(1); err != io.EOF {
			x.str.CancelRead(agtpquic.StreamNoError)
		}
	}
	if x.br != nil {
		x.br.Reset(nil)
		readerPool.Put(x.br)
		x.br = nil
	}
}
