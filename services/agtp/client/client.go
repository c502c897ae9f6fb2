package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Client sends AGTP requests over pooled TLS/TCP connections, or over
// QUIC. It is safe for concurrent use; make one and share it, because
// its value is in the connections it keeps.
type Client struct {
	opts     Options
	tls      *tls.Config
	lim      agtp.Limits
	defaults agtp.Header

	mu     sync.Mutex
	tcp    map[string]*tcpPool
	quic   *quicPool
	closed bool
}

// exchange is one request in progress whose first response has been
// read: the rest of its series, and the connection it holds.
type exchange interface {
	// next reads the next response of the series.
	next() (*agtp.Response, error)
	// finish releases the connection. last is the final response of a
	// completely read series, or nil when the series was abandoned or
	// failed, which costs the connection (TCP) or the stream (QUIC).
	finish(last *agtp.Response)
}

// New returns a Client for opts. It reads the certificate files opts
// names, so a bad path fails here rather than on the first request.
func New(opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("agtp client: %w", err)
	}
	opts = opts.withDefaults()
	cfg, err := opts.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("agtp client: %w", err)
	}
	c := &Client{opts: opts, tls: cfg, lim: opts.Limits, tcp: map[string]*tcpPool{}}
	c.defaults = opts.Header.Clone()
	for _, d := range [...]struct{ name, value string }{
		{agtp.HeaderAgentID, opts.AgentID},
		{agtp.HeaderAuthorityScope, opts.AuthorityScope},
		{agtp.HeaderSessionID, opts.SessionID},
	} {
		if d.value != "" && !c.defaults.Has(d.name) {
			c.defaults.Add(d.name, d.value)
		}
	}
	return c, nil
}

// Close closes every connection, idle or busy, and makes further
// requests fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	pools := make([]*tcpPool, 0, len(c.tcp))
	for _, p := range c.tcp {
		pools = append(pools, p)
	}
	q := c.quic
	c.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
	if q != nil {
		return q.close()
	}
	return nil
}

// Do sends req to addr ("host:port", or "host" for port 4480) and
// returns its response.
//
// The request is answered on a pooled connection: in order with any
// other requests on it (TCP), or on a stream of its own (QUIC). ctx
// bounds the whole exchange; its deadline becomes the connection's (or
// stream's) deadline, and cancelling it abandons the request, which
// costs the connection on TCP. The default fields of Options are added
// to a copy of req when req lacks them; req itself is not modified.
//
// When the server answers with a series of responses (agtp.Stream), Do
// reads the whole series and returns the last one, the way an HTTP
// client passes over 1xx interim responses; use Stream to see every
// part. A non-2xx status is not an error: check resp.Status.
//
// With Options.Retry set, a 429 or 503 answer to a request that is safe
// to repeat (Idempotent) is waited out and sent again, honouring the
// server's Retry-After; the last answer is returned when the retries run
// out. Stream does the same for a refusal that comes as a single answer.
func (c *Client) Do(ctx context.Context, req *agtp.Request, addr string) (*agtp.Response, error) {
	x, resp, err := c.startRetrying(ctx, req, addr)
	if err != nil {
		return nil, err
	}
	for n := 1; resp.More(); n++ {
		if n >= c.opts.MaxSeries {
			x.finish(nil)
			return nil, fmt.Errorf("%w (%d)", ErrSeriesTooLong, n)
		}
		if resp, err = x.next(); err != nil {
			x.finish(nil)
			return nil, err
		}
	}
	x.finish(resp)
	return resp, nil
}

// startRetrying is start, waiting out refusals as Options.Retry says.
func (c *Client) startRetrying(ctx context.Context, req *agtp.Request, addr string) (exchange, *agtp.Response, error) {
	policy := c.opts.Retry
	for n := 0; ; n++ {
		x, resp, err := c.start(ctx, req, addr)
		if err != nil || n >= policy.MaxRetries || resp.More() || !retryable(resp) || !Idempotent(req) {
			return x, resp, err
		}
		wait, ok := policy.delay(resp, n, time.Now())
		if !ok {
			return x, resp, nil
		}
		x.finish(resp)
		traceFrom(ctx).retryAfter(resp.Status, wait)
		if err := waitRetry(ctx, wait); err != nil {
			return nil, nil, fmt.Errorf("agtp client: waiting %v to retry a %d: %w", wait, resp.Status, err)
		}
	}
}

// Stream sends req to addr and returns the series of responses it is
// answered with (see agtp.Stream for the convention). A method that
// answers once gives a series of one. The connection belongs to the
// stream until its last response has been read or Close is called, and
// ctx bounds the whole series.
func (c *Client) Stream(ctx context.Context, req *agtp.Request, addr string) (*Stream, error) {
	x, resp, err := c.startRetrying(ctx, req, addr)
	if err != nil {
		return nil, err
	}
	return &Stream{x: x, first: resp}, nil
}

// Stream is the series of responses to one request, read one at a time
// so that progress is seen as it arrives.
type Stream struct {
	x     exchange
	first *agtp.Response
	done  bool
	err   error
}

// Next returns the next response of the series, and io.EOF after the
// last one. A connection that ends before the last response gives
// io.ErrUnexpectedEOF, so io.EOF always means the series is complete.
func (s *Stream) Next() (*agtp.Response, error) {
	if s.err != nil {
		return nil, s.err
	}
	var resp *agtp.Response
	if s.first != nil {
		resp, s.first = s.first, nil
	} else {
		var err error
		if resp, err = s.x.next(); err != nil {
			s.done, s.err = true, err
			s.x.finish(nil)
			return nil, err
		}
	}
	if !resp.More() {
		s.done, s.err = true, io.EOF
		s.x.finish(resp)
	}
	return resp, nil
}

// Close releases the stream's connection. Closing before the last
// response has been read abandons the rest of the series, which costs
// the connection (TCP) or resets the stream (QUIC). Close is safe to call
// more than once, and after the series completed.
func (s *Stream) Close() error {
	if !s.done {
		s.done, s.err = true, errStreamClosed
		s.x.finish(nil)
	}
	return nil
}

var errStreamClosed = errors.New("agtp client: stream closed")

// Send parses uri, an agtp:// URI, sends method to the server it names
// with the URI's path and query as the request-target, and returns the
// response. body may be nil; a JSON body gets Content-Type
// application/vnd.agtp+json unless hdr sets one.
//
// The URI forms (core §6.1.2) address as follows:
//   - Form 1a, agtp://{agent-id}@host[:port]/path: connects to host (port
//     4480 by default). The agent-id names the agent addressed, with host
//     only a hint of where to ask; it is not sent as Agent-ID, which names
//     the caller (docs/decisions.md#D-agent-id-is-the-caller; set it in
//     Options or hdr). When the answer is an Identity Document whose
//     agent_id differs from the URI's, Send returns the response with
//     ErrAgentMismatch, as core §6.1.2 requires a client to reject it.
//   - Forms 2, 2a, 3 and 4: connect to the host, port 4480 unless Form 2
//     gives one; Forms 3 and 4 send /agents/{name}[/...] as the path.
//   - Form 1, agtp://{agent-id}, names no server: ErrNoAddress.
func (c *Client) Send(ctx context.Context, method, uri string, body []byte, hdr agtp.Header) (*agtp.Response, error) {
	req, u, err := NewURIRequest(method, uri, body, hdr)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, req, u.Address())
	if err != nil {
		return nil, err
	}
	return resp, CheckAddressedAgent(u, resp)
}

// NewURIRequest returns the request Send would make for method and uri,
// with the URI; send it with Do or Stream to u.Address(). See Send for
// how the URI forms address, and for Content-Type.
func NewURIRequest(method, uri string, body []byte, hdr agtp.Header) (*agtp.Request, agtp.URI, error) {
	u, err := agtp.ParseURI(uri)
	if err != nil {
		return nil, agtp.URI{}, err
	}
	if u.Address() == "" {
		return nil, u, fmt.Errorf("%w: %s is Form 1; give a server to ask as agtp://%s@host[:port]/path", ErrNoAddress, uri, u.AgentID)
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	req := &agtp.Request{Method: method, Target: u.Target(), Path: path, RawQuery: u.RawQuery, Header: hdr.Clone(), Body: body}
	if len(body) > 0 && !req.Header.Has(agtp.HeaderContentType) && json.Valid(body) {
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	}
	return req, u, nil
}

// CheckAddressedAgent applies core §6.1.2's Form 1a rule to a response:
// an Identity Document (application/vnd.agtp.identity+json) must carry
// the agent_id the URI names, else ErrAgentMismatch. Other forms and
// other responses pass.
func CheckAddressedAgent(u agtp.URI, resp *agtp.Response) error {
	if u.Form != agtp.FormCanonicalHost || len(resp.Body) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get(agtp.HeaderContentType))
	if err != nil || mt != agtp.MediaTypeIdentityJSON {
		return nil
	}
	var doc struct {
		AgentID *string `json:"agent_id"`
	}
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		return fmt.Errorf("%w: the identity document does not parse: %v", ErrAgentMismatch, err)
	}
	if doc.AgentID == nil || *doc.AgentID != u.AgentID {
		got := "none"
		if doc.AgentID != nil {
			got = strconv.Quote(*doc.AgentID)
		}
		return fmt.Errorf("%w: asked for %s, document names %s", ErrAgentMismatch, u.AgentID, got)
	}
	return nil
}

// start sends req and reads its first response, retrying idempotent
// requests that met ErrNoResponse on a reused connection.
func (c *Client) start(ctx context.Context, req *agtp.Request, addr string) (exchange, *agtp.Response, error) {
	tr := traceFrom(ctx)
	req = withTraceContext(ctx, c.withDefaults(req))
	if c.opts.QUIC {
		q, err := c.quicPool()
		if err != nil {
			return nil, nil, err
		}
		return retry(ctx, req, tr, c.opts.MaxConnsPerHost, func() (exchange, *agtp.Response, error) {
			return q.start(ctx, req, addr, tr)
		})
	}
	p, err := c.tcpPool(addr)
	if err != nil {
		return nil, nil, err
	}
	defer c.unref(p)
	return retry(ctx, req, tr, c.opts.MaxConnsPerHost, func() (exchange, *agtp.Response, error) {
		return p.start(ctx, req, tr)
	})
}

func retry(ctx context.Context, req *agtp.Request, tr *Trace, retries int, attempt func() (exchange, *agtp.Response, error)) (exchange, *agtp.Response, error) {
	for i := 0; ; i++ {
		x, resp, err := attempt()
		if err == nil {
			return x, resp, nil
		}
		var nr *noResponseError
		if !errors.As(err, &nr) || i >= retries || ctx.Err() != nil || !(nr.unsent || nr.reused && Idempotent(req)) {
			return nil, nil, err
		}
		tr.retry(err)
	}
}

// withDefaults returns req, or a copy of it with the default fields it
// lacks.
func (c *Client) withDefaults(req *agtp.Request) *agtp.Request {
	var h agtp.Header
	for _, f := range c.defaults {
		if req.Header.Has(f.Name) {
			continue
		}
		if h == nil {
			h = make(agtp.Header, len(req.Header), len(req.Header)+len(c.defaults))
			copy(h, req.Header)
		}
		h = append(h, f)
	}
	if h == nil {
		return req
	}
	cp := *req
	cp.Header = h
	return &cp
}

// tcpPool returns the pool of addr's normalised host:port, made on first
// use, with a reference taken for the caller, who gives it back with
// unref. A pool leaves the map once it is unused (dropIfUnused), so an
// address named once costs nothing after its connections are gone.
func (c *Client) tcpPool(addr string) (*tcpPool, error) {
	hostport, host, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	p := c.tcp[hostport]
	if p == nil {
		p = newTCPPool(c, hostport, c.tlsFor(host))
		c.tcp[hostport] = p
	}
	p.refs++
	return p, nil
}

// unref gives back a reference tcpPool took, and drops the pool if it is
// now unused.
func (c *Client) unref(p *tcpPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.refs--
	c.dropIfUnusedLocked(p)
}

// dropIfUnused removes p from the map when nobody holds a reference to it
// and it has no connection, no dial in progress and no waiter: the next
// request to its address makes a new pool.
func (c *Client) dropIfUnused(p *tcpPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropIfUnusedLocked(p)
}

func (c *Client) dropIfUnusedLocked(p *tcpPool) {
	if p.refs > 0 || c.tcp[p.addr] != p {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) > 0 || p.dialing > 0 || len(p.waiters) > 0 {
		return
	}
	delete(c.tcp, p.addr)
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
}

func (c *Client) quicPool() (*quicPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.quic == nil {
		c.quic = newQUICPool(c)
	}
	return c.quic, nil
}

// tlsFor returns the TLS configuration for a server host.
func (c *Client) tlsFor(host string) *tls.Config {
	cfg := c.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	return cfg
}

// splitAddr normalises addr to host:port, adding agtp.DefaultPort when
// there is none, and returns the host alone for certificate checks.
func splitAddr(addr string) (hostport, host string, err error) {
	if addr == "" {
		return "", "", errors.New("agtp client: empty address")
	}
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		// No port: the whole of addr is the host (an IPv6 literal may
		// come with or without brackets).
		h = addr
		if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1]
		}
		port = strconv.Itoa(agtp.DefaultPort)
	}
	if h == "" {
		return "", "", fmt.Errorf("agtp client: address %q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", "", fmt.Errorf("agtp client: address %q has an invalid port", addr)
	}
	return net.JoinHostPort(h, port), h, nil
}
