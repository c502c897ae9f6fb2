package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/quic-go/quic-go"
)

// Abuse kinds: hostile clients run beside the well-behaved load, each at a
// bounded rate.
const (
	// AbuseSlowloris holds TLS connections that send a request line and
	// then one header byte a second, never finishing the header section.
	AbuseSlowloris = "slowloris"
	// AbuseOversizedHeader sends a 70 KiB header section (the limit is
	// 64 KiB) on a new TLS connection.
	AbuseOversizedHeader = "oversized-header"
	// AbuseOversizedBody declares a 2 MiB body (the limit is 1 MiB) and
	// streams it on a new TLS connection.
	AbuseOversizedBody = "oversized-body"
	// AbuseGarbage sends 1 KiB of random bytes on a new TLS connection.
	AbuseGarbage = "garbage"
	// AbuseTLS12 attempts TLS 1.2 handshakes (the server speaks 1.3 only).
	AbuseTLS12 = "tls12"
	// AbusePlaintext sends an AGTP request in the clear on a new TCP
	// connection.
	AbusePlaintext = "plaintext"
	// AbuseConnectFlood opens TCP connections that never send a byte and
	// holds them, from several source addresses.
	AbuseConnectFlood = "tcp-connect-flood"
	// AbuseIdleTLSFlood completes TLS handshakes and holds the
	// connections idle, more than one address is allowed.
	AbuseIdleTLSFlood = "idle-tls-flood"
	// AbuseQUICFlood completes QUIC handshakes and holds the connections
	// idle, more than one address is allowed.
	AbuseQUICFlood = "quic-flood"
	// AbuseQUICHandshakeFlood sends QUIC ClientHellos and never reads the
	// answer, leaving half-open handshakes, from several source addresses.
	AbuseQUICHandshakeFlood = "quic-handshake-flood"
)

// AbuseKinds lists every kind in the benchmark's order.
var AbuseKinds = []string{AbuseSlowloris, AbuseOversizedHeader, AbuseOversizedBody, AbuseGarbage, AbuseTLS12,
	AbusePlaintext, AbuseConnectFlood, AbuseIdleTLSFlood, AbuseQUICFlood, AbuseQUICHandshakeFlood}

// Bounds on an abuser, so that a mistyped flag cannot make it unbounded.
const (
	MaxAbuseRate = 2000   // attempts per second
	MaxAbuseHold = 20_000 // connections held
	// maxAbuseAttempts bounds attempts in progress for the kinds that do
	// not hold connections.
	maxAbuseAttempts = 64
)

// AbuseDefault is a kind's default rate, hold and sources: chosen to
// exceed the front door's default limits (1000 connections per address,
// 1024 handshakes in progress, 10 s header timeout) while costing the two
// shared cores little, so that what is measured is the server's defence
// and not the abuser's theft of CPU.
type AbuseDefault struct {
	Rate    float64
	Hold    int
	Sources int
	// Ramp is how long the abuse runs before measuring starts, for the
	// kinds that build up held connections.
	Ramp time.Duration
}

// AbuseDefaults are the defaults by kind.
var AbuseDefaults = map[string]AbuseDefault{
	AbuseSlowloris:          {Rate: 50, Hold: 250, Sources: 1, Ramp: 5 * time.Second},
	AbuseOversizedHeader:    {Rate: 20, Sources: 1},
	AbuseOversizedBody:      {Rate: 20, Sources: 1},
	AbuseGarbage:            {Rate: 50, Sources: 1},
	AbuseTLS12:              {Rate: 50, Sources: 1},
	AbusePlaintext:          {Rate: 50, Sources: 1},
	AbuseConnectFlood:       {Rate: 300, Hold: 4000, Sources: 4, Ramp: 5 * time.Second},
	AbuseIdleTLSFlood:       {Rate: 200, Hold: 1500, Sources: 1, Ramp: 6 * time.Second},
	AbuseQUICFlood:          {Rate: 150, Hold: 1500, Sources: 1, Ramp: 8 * time.Second},
	AbuseQUICHandshakeFlood: {Rate: 150, Sources: 4, Ramp: 5 * time.Second},
}

// AbuseSources returns n loopback source addresses for abusers,
// 127.0.0.2 onwards: well-behaved clients come from 127.0.0.1, so a
// per-address limit the abuse runs into is its own.
func AbuseSources(n int) []string {
	out := make([]string, max(n, 1))
	for i := range out {
		out[i] = fmt.Sprintf("127.0.0.%d", 2+i)
	}
	return out
}

// AbuseConfig is one abuser.
type AbuseConfig struct {
	Kind   string
	Target Target
	// Rate is new connection attempts per second; Hold bounds the
	// connections held at once (slowloris and the floods, whose attempts
	// end when the server closes them). Zero takes the kind's default.
	Rate float64
	Hold int
	// Sources are the local addresses attempts come from, in turn;
	// default AbuseSources of the kind's default count.
	Sources []string
}

func (c AbuseConfig) withDefaults() AbuseConfig {
	d := AbuseDefaults[c.Kind]
	if c.Rate <= 0 {
		c.Rate = d.Rate
	}
	if c.Hold <= 0 {
		c.Hold = d.Hold
	}
	if len(c.Sources) == 0 {
		c.Sources = AbuseSources(d.Sources)
	}
	return c
}

// Validate reports every problem at once.
func (c AbuseConfig) Validate() error {
	var errs []error
	if _, ok := AbuseDefaults[c.Kind]; !ok {
		errs = append(errs, fmt.Errorf("abuse kind %q is not one of %s", c.Kind, strings.Join(AbuseKinds, ", ")))
	}
	if c.Target.Addr == "" {
		errs = append(errs, errors.New("target address is empty"))
	}
	if c.Rate < 0 || c.Rate > MaxAbuseRate {
		errs = append(errs, fmt.Errorf("abuse rate %v is outside 0..%d", c.Rate, MaxAbuseRate))
	}
	if c.Hold < 0 || c.Hold > MaxAbuseHold {
		errs = append(errs, fmt.Errorf("abuse hold %d is outside 0..%d", c.Hold, MaxAbuseHold))
	}
	for _, s := range c.Sources {
		if ip := net.ParseIP(s); ip == nil || !ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("abuse source %q is not a loopback address", s))
		}
	}
	return errors.Join(errs...)
}

// AbuseResult is what an abuser did and what became of its attempts.
type AbuseResult struct {
	Kind    string
	Rate    float64
	Hold    int
	Sources []string
	Elapsed time.Duration
	// Attempts are connections tried; Skipped are ticks when the bound on
	// held connections or attempts in progress left no room.
	Attempts, Skipped uint64
	// MaxHeld is the most connections held at once.
	MaxHeld int64
	// Outcomes counts attempts by what the server did with them.
	Outcomes map[string]uint64
	// IdlePriority is whether the abuser ran at idle priority, on CPU
	// nothing else wanted (ServeAbuseChild).
	IdlePriority bool
}

// Count sums the outcomes whose description starts with any of prefixes.
func (r *AbuseResult) Count(prefixes ...string) uint64 { return countOutcomes(r.Outcomes, prefixes) }

func countOutcomes(outcomes map[string]uint64, prefixes []string) uint64 {
	var n uint64
	for k, v := range outcomes {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				n += v
				break
			}
		}
	}
	return n
}

// FormatOutcomes lists the outcomes, most frequent first.
func (r *AbuseResult) FormatOutcomes() string {
	type kv struct {
		k string
		v uint64
	}
	var all []kv
	for k, v := range r.Outcomes {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.v != b.v {
			return int(b.v) - int(a.v)
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, len(all))
	for i, x := range all {
		parts[i] = fmt.Sprintf("%s × %d", x.k, x.v)
	}
	return strings.Join(parts, "; ")
}

// Abuser is a running abuse; Stop ends it.
type Abuser struct {
	cfg    AbuseConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time
	tls    *tls.Config

	attempts, skipped atomic.Uint64
	held, maxHeld     atomic.Int64

	mu       sync.Mutex
	outcomes map[string]uint64
	open     map[io.Closer]struct{} // closed by Stop
	quicTr   []*quic.Transport      // one per source, for AbuseQUICFlood
}

// StartAbuse starts an abuser; it runs until Stop or ctx ends.
func StartAbuse(ctx context.Context, cfg AbuseConfig) (*Abuser, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Abuser{cfg: cfg, start: time.Now(), tls: cfg.Target.tlsConfig(),
		outcomes: map[string]uint64{}, open: map[io.Closer]struct{}{}}
	a.ctx, a.cancel = context.WithCancel(ctx)
	if cfg.Kind == AbuseQUICFlood {
		for _, src := range cfg.Sources {
			udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
			if err != nil {
				a.closeTransports()
				return nil, fmt.Errorf("abuse source %s: %w", src, err)
			}
			a.quicTr = append(a.quicTr, &quic.Transport{Conn: udp})
		}
	}
	a.wg.Go(a.run)
	return a, nil
}

// Stop ends the abuse, closes what it holds and returns what it did.
func (a *Abuser) Stop() *AbuseResult {
	a.cancel()
	a.mu.Lock()
	for c := range a.open {
		_ = c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.closeTransports()
	a.mu.Lock()
	defer a.mu.Unlock()
	return &AbuseResult{Kind: a.cfg.Kind, Rate: a.cfg.Rate, Hold: a.cfg.Hold, Sources: a.cfg.Sources,
		Elapsed: time.Since(a.start), Attempts: a.attempts.Load(), Skipped: a.skipped.Load(),
		MaxHeld: a.maxHeld.Load(), Outcomes: maps.Clone(a.outcomes)}
}

// Count sums the outcomes so far whose description starts with any of
// prefixes.
func (a *Abuser) Count(prefixes ...string) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return countOutcomes(a.outcomes, prefixes)
}

// Held is the number of connections held now.
func (a *Abuser) Held() int64 { return a.held.Load() }

func (a *Abuser) closeTransports() {
	for _, tr := range a.quicTr {
		_ = tr.Close()
		_ = tr.Conn.Close() // a transport does not close a conn it was given
	}
	a.quicTr = nil
}

// run starts attempts at the configured rate, within the bound on
// attempts in progress (and connections held).
func (a *Abuser) run() {
	bound := maxAbuseAttempts
	if a.cfg.Hold > 0 {
		bound = a.cfg.Hold
	}
	slots := make(chan struct{}, bound)
	tick := time.NewTicker(time.Duration(float64(time.Second) / a.cfg.Rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			a.skipped.Add(1)
			continue
		}
		a.attempts.Add(1)
		src := a.cfg.Sources[i%len(a.cfg.Sources)]
		a.wg.Go(func() {
			defer func() { <-slots }()
			a.outcome(a.attempt(src, i))
		})
	}
}

func (a *Abuser) outcome(s string) {
	if s == "" {
		return
	}
	a.mu.Lock()
	a.outcomes[s]++
	a.mu.Unlock()
}

// track registers c to be closed by Stop; untrack forgets it. track
// reports false when the abuse has already stopped (c is then closed).
func (a *Abuser) track(c io.Closer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx.Err() != nil {
		_ = c.Close()
		return false
	}
	a.open[c] = struct{}{}
	return true
}

func (a *Abuser) untrack(c io.Closer) {
	a.mu.Lock()
	delete(a.open, c)
	a.mu.Unlock()
	_ = c.Close()
}

// hold counts a held connection until release is called.
func (a *Abuser) hold() (release func()) {
	n := a.held.Add(1)
	for {
		m := a.maxHeld.Load()
		if n <= m || a.maxHeld.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { a.held.Add(-1) }
}

// attempt runs one attempt of the abuser's kind and returns its outcome.
func (a *Abuser) attempt(src string, i int) string {
	t := a.cfg.Target
	t.Source = src
	switch a.cfg.Kind {
	case AbuseSlowloris:
		return a.slowloris(t)
	case AbuseOversizedHeader:
		head := "AGTP/1.0 DISCOVER /\r\nX-Filler: " + strings.Repeat("a", 70<<10) + "\r\n\r\n"
		return a.sendTLS(t, []byte(head), 0)
	case AbuseOversizedBody:
		head := fmt.Sprintf("AGTP/1.0 SUMMARIZE /documents\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", agtp.MediaTypeJSON, 2<<20)
		return a.sendTLS(t, []byte(head), 2<<20)
	case AbuseGarbage:
		b := make([]byte, 1024, 1028)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		return a.sendTLS(t, append(b, "\r\n\r\n"...), 0)
	case AbuseTLS12:
		conf := a.tls.Clone()
		conf.MinVersion, conf.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		tc, err := a.dialTLS(t, conf)
		if err != nil {
			return "handshake failed: " + short(err)
		}
		a.untrack(tc)
		return "TLS 1.2 handshake succeeded"
	case AbusePlaintext:
		return a.plaintext(t)
	case AbuseConnectFlood:
		return a.connectFlood(t)
	case AbuseIdleTLSFlood:
		tc, err := a.dialTLS(t, a.tls)
		if err != nil {
			return "handshake failed: " + short(err)
		}
		return a.holdUntilClosed(tc, tc)
	case AbuseQUICFlood:
		return a.quicFlood(i)
	case AbuseQUICHandshakeFlood:
		return a.quicHalfOpen(t)
	}
	return ""
}

// dialTLS opens a TLS connection, tracked so Stop closes it.
func (a *Abuser) dialTLS(t Target, conf *tls.Config) (*tls.Conn, error) {
	raw, err := t.dialer().DialContext(a.ctx, "tcp", t.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if !a.track(raw) {
		return nil, context.Canceled
	}
	tc := tls.Client(raw, conf)
	_ = raw.SetDeadline(time.Now().Add(ioTimeout))
	if err := tc.HandshakeContext(a.ctx); err != nil {
		a.untrack(raw)
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	a.mu.Lock()
	delete(a.open, raw)
	a.open[tc] = struct{}{}
	a.mu.Unlock()
	return tc, nil
}

// sendTLS writes head on a new TLS connection, then body bytes of filler
// (concurrently, as a client that does not wait for an answer would),
// and reports the server's answer.
func (a *Abuser) sendTLS(t Target, head []byte, body int) string {
	tc, err := a.dialTLS(t, a.tls)
	if err != nil {
		return "handshake failed: " + short(err)
	}
	defer a.untrack(tc)
	_ = tc.SetDeadline(time.Now().Add(ioTimeout))
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := tc.Write(head); err != nil || body == 0 {
			return
		}
		chunk := make([]byte, 16<<10)
		for sent := 0; sent < body; sent += len(chunk) {
			if _, err := tc.Write(chunk); err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	resp, err := agtp.ReadResponse(bufio.NewReader(tc), responseLimits)
	_ = tc.Close() // ends the writer
	if err != nil {
		return "no answer: " + short(err)
	}
	return answer(resp)
}

// answer names a response by status and reason.
func answer(resp *agtp.Response) string {
	var eb agtp.ErrorBody
	if err := eb.UnmarshalJSON(resp.Body); err == nil && eb.Reason != "" {
		return fmt.Sprintf("%d %s", resp.Status, eb.Reason)
	}
	return fmt.Sprintf("%d", resp.Status)
}

func (a *Abuser) slowloris(t Target) string {
	tc, err := a.dialTLS(t, a.tls)
	if err != nil {
		return "handshake failed: " + short(err)
	}
	defer a.untrack(tc)
	defer a.hold()()
	start := time.Now()
	if _, err := tc.Write([]byte("AGTP/1.0 QUERY /orders/ord-1001\r\nX-Slow: ")); err != nil {
		return "closed by the server: " + short(err)
	}
	// Reads notice the server's close; writes keep the header open.
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, tc)
		closed <- err
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			return "cut off by the server after " + seconds(time.Since(start))
		case <-a.ctx.Done():
			return "still open when the abuse stopped"
		case <-tick.C:
			if _, err := tc.Write([]byte("a")); err != nil {
				return "cut off by the server after " + seconds(time.Since(start))
			}
		}
	}
}

func (a *Abuser) plaintext(t Target) string {
	c, err := t.dialer().DialContext(a.ctx, "tcp", t.Addr)
	if err != nil {
		return "dial: " + short(err)
	}
	if !a.track(c) {
		return ""
	}
	defer a.untrack(c)
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	_, _ = c.Write([]byte("AGTP/1.0 DISCOVER /\r\n\r\n"))
	b, _ := io.ReadAll(io.LimitReader(c, 64<<10))
	if strings.HasPrefix(string(b), "AGTP/") {
		return "answered in plaintext"
	}
	return "closed without an AGTP answer"
}

// connectFlood opens a TCP connection, sends nothing and holds it until
// the server closes it.
func (a *Abuser) connectFlood(t Target) string {
	c, err := t.dialer().DialContext(a.ctx, "tcp", t.Addr)
	if err != nil {
		return "dial: " + short(err)
	}
	return a.holdUntilClosed(c, c)
}

// holdUntilClosed holds c (which r reads) until the server closes it or
// the abuse stops.
func (a *Abuser) holdUntilClosed(c io.Closer, r io.Reader) string {
	if !a.track(c) {
		return ""
	}
	defer a.untrack(c)
	defer a.hold()()
	start := time.Now()
	_, err := io.Copy(io.Discard, r)
	if a.ctx.Err() != nil {
		return "held until the abuse stopped"
	}
	how := "closed"
	if errors.Is(err, syscall.ECONNRESET) {
		how = "reset"
	}
	return how + " by the server after " + seconds(time.Since(start))
}

// quicFlood completes a QUIC handshake and holds the connection idle.
func (a *Abuser) quicFlood(i int) string {
	tr := a.quicTr[i%len(a.quicTr)]
	addr, err := net.ResolveUDPAddr("udp", a.cfg.Target.Addr)
	if err != nil {
		return "resolve: " + short(err)
	}
	ctx, cancel := context.WithTimeout(a.ctx, ioTimeout)
	qc, err := tr.Dial(ctx, addr, a.tls, agtpquic.Config())
	cancel()
	if err != nil {
		if a.ctx.Err() != nil {
			return ""
		}
		return "handshake failed: " + short(err)
	}
	closer := quicCloser{qc}
	if !a.track(closer) {
		return ""
	}
	defer a.untrack(closer)
	defer a.hold()()
	start := time.Now()
	select {
	case <-qc.Context().Done():
		if a.ctx.Err() != nil {
			return "held until the abuse stopped"
		}
		return "closed by the server after " + seconds(time.Since(start))
	case <-a.ctx.Done():
		return "held until the abuse stopped"
	}
}

type quicCloser struct{ qc *quic.Conn }

func (c quicCloser) Close() error { return c.qc.CloseWithError(0, "") }

// quicHalfOpen sends a ClientHello from a fresh socket and never reads
// the server's answer, then abandons the socket: the server holds a
// half-open handshake until its handshake timeout, or sheds it.
func (a *Abuser) quicHalfOpen(t Target) string {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(t.Source)})
	if err != nil {
		return "socket: " + short(err)
	}
	pc := &firstFlight{UDPConn: udp, closed: make(chan struct{})}
	tr := &quic.Transport{Conn: pc}
	defer func() { _ = pc.Close(); _ = tr.Close() }()
	addr, err := net.ResolveUDPAddr("udp", t.Addr)
	if err != nil {
		return "resolve: " + short(err)
	}
	ctx, cancel := context.WithTimeout(a.ctx, 300*time.Millisecond)
	defer cancel()
	if qc, err := tr.Dial(ctx, addr, a.tls, agtpquic.Config()); err == nil {
		_ = qc.CloseWithError(0, "")
		return "handshake completed (the answer was read)"
	}
	if a.ctx.Err() != nil {
		return ""
	}
	return "ClientHello sent, the answer never read"
}

// firstFlight is a UDP socket that sends the client's first flight (the
// Initial packets carrying the ClientHello) and nothing after it, not
// even a CONNECTION_CLOSE, and never receives. Its socket options pass
// through; it hides ReadMsgUDP so quic-go reads with ReadFrom.
type firstFlight struct {
	*net.UDPConn
	sent   atomic.Int32
	once   sync.Once
	closed chan struct{}
}

// firstFlightPackets covers a ClientHello with a post-quantum key share,
// which spans two Initial packets.
const firstFlightPackets = 2

func (f *firstFlight) WriteTo(b []byte, addr net.Addr) (int, error) {
	if f.sent.Add(1) > firstFlightPackets {
		return len(b), nil
	}
	return f.UDPConn.WriteTo(b, addr)
}

func (f *firstFlight) ReadFrom([]byte) (int, net.Addr, error) {
	<-f.closed
	return 0, nil, net.ErrClosed
}

func (f *firstFlight) ReadMsgUDP() {}

func (f *firstFlight) Close() error {
	f.once.Do(func() { close(f.closed) })
	return f.UDPConn.Close()
}

// short is an error's message without addresses, for outcome labels.
func short(err error) string {
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote {
		return "QUIC " + te.ErrorCode.String()
	}
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "reset by the server"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed by the server"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local address or port left"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	for {
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Err == nil {
			break
		}
		err = oe.Err
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}

// seconds rounds d to a label: "<1s", "1s", "10s" ...
func seconds(d time.Duration) string {
	if d < time.Second {
		return "<1s"
	}
	return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
}
