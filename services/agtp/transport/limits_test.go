package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// dialFrom opens a TLS connection from a given loopback source address.
func (ts *testServer) dialFrom(src string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return tls.DialWithDialer(d, "tcp", ts.TCPAddr().String(), ts.certs.clientTLS())
}

// Over MaxConnsPerIP a TCP connection is reset before its handshake, other
// sources are unaffected, and a slot is reusable once a connection ends.
func TestTCPPerAddressLimitResetsOverLimit(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, MaxConnsPerIP: 2}, echo())
	var held []*tls.Conn
	for range 2 {
		c, err := ts.dialFrom("127.0.0.1")
		if err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
	}
	start := time.Now()
	if c, err := ts.dialFrom("127.0.0.1"); err == nil {
		c.Close()
		t.Fatal("third connection from one address completed its handshake at MaxConnsPerIP=2")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the refusal took %v; it should be immediate", d)
	}
	if got := ts.Stats().PerIPRefused; got != 1 {
		t.Errorf("PerIPRefused = %d, want 1", got)
	}
	other, err := ts.dialFrom("127.0.0.2")
	if err != nil {
		t.Fatalf("another address was refused: %v", err)
	}
	defer other.Close()
	if resp := newClient(other).roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
		t.Fatalf("another address got %d", resp.Status)
	}
	if resp := newClient(held[0]).roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
		t.Fatalf("a connection within the limit got %d", resp.Status)
	}
	held[1].Close()
	freed := func() bool {
		c, err := ts.dialFrom("127.0.0.1")
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	waitFor(t, "a slot freed by a closed connection", freed)
}

// Over MaxConnsPerIP a QUIC connection attempt is refused with
// CONNECTION_REFUSED; other sources are unaffected.
func TestQUICPerAddressLimitRefuses(t *testing.T) {
	ts := startServer(t, Options{MaxConnsPerIP: 1}, echo())
	qc := ts.quicDial(t, nil)
	quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x"))

	_, err := quicDialFrom(t, ts, "127.0.0.1")
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("second QUIC connection from one address: %v, want CONNECTION_REFUSED", err)
	}
	if ts.Stats().PerIPRefused == 0 {
		t.Error("PerIPRefused not counted")
	}
	other, err := quicDialFrom(t, ts, "127.0.0.2")
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	quicRoundTrip(t, other, rawRequest(t, "QUERY", "/x"))
}

func quicDialFrom(t *testing.T, ts *testServer, src string) (*quic.Conn, error) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	addr, err := net.ResolveUDPAddr("udp", ts.QUICAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	qc, err := tr.Dial(ctx, addr, ts.certs.clientTLS(), &quic.Config{})
	if err == nil {
		t.Cleanup(func() { qc.CloseWithError(0, "") })
	}
	return qc, err
}

// silentConn opens a TCP connection that never starts its handshake.
func silentConn(t *testing.T, ts *testServer) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// At MaxHandshakes a newcomer waits while the handshakes in progress are
// young, then sheds the oldest once it has run for a second; the shed
// connection is closed long before its handshake timeout.
func TestTCPHandshakeBacklogPausesThenShedsStalled(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, MaxHandshakes: 1, HandshakeTimeout: time.Minute}, echo())
	silent := silentConn(t, ts)
	waitFor(t, "the silent connection in the backlog", func() bool { return ts.Stats().Handshakes == 1 })

	done := make(chan error, 1)
	go func() {
		c, err := ts.dialFrom("127.0.0.1")
		if err == nil {
			defer c.Close()
			if resp := newClient(c).roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
				err = errors.New("not 200")
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the newcomer was served while the only handshake in progress was younger than a second: %v", err)
	case <-time.After(handshakeShedAge / 2):
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("newcomer after shedding: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("newcomer never served")
	}
	expectClosed(t, silent, nil, 2*time.Second)
	st := ts.Stats()
	if st.HandshakesShed != 1 || st.HandshakeLimit == 0 {
		t.Errorf("HandshakesShed = %d, HandshakeLimit = %d; want 1 and > 0", st.HandshakesShed, st.HandshakeLimit)
	}
	if st.HandshakeFailed != 0 {
		t.Errorf("a shed handshake counted as failed too: HandshakeFailed = %d", st.HandshakeFailed)
	}
}

// blackhole is a client packet conn that sends but never receives: the
// server's first flight never arrives, so the handshake never completes.
// Its socket options pass through, so quic-go can size the buffers.
type blackhole struct {
	*net.UDPConn
	once   sync.Once
	closed chan struct{}
}

func (b *blackhole) ReadMsgUDP() {} // hides the embedded method, so quic-go reads with ReadFrom

func (b *blackhole) ReadFrom([]byte) (int, net.Addr, error) {
	<-b.closed
	return 0, nil, net.ErrClosed
}

func (b *blackhole) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.UDPConn.Close()
}

// halfOpenQUIC starts a QUIC handshake that the client never completes.
func halfOpenQUIC(t *testing.T, ts *testServer) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{UDPConn: udp, closed: make(chan struct{})}
	tr := &quic.Transport{Conn: bh}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	addr, _ := net.ResolveUDPAddr("udp", ts.QUICAddr().String())
	go func() {
		defer close(done)
		if qc, err := tr.Dial(ctx, addr, ts.certs.clientTLS(), &quic.Config{}); err == nil {
			qc.CloseWithError(0, "")
		}
	}()
	t.Cleanup(func() { cancel(); <-done; bh.Close(); tr.Close() }) // the transport does not close a conn it was given
}

// QUIC shares the backlog: from three quarters full, attempts must
// answer a Retry, which a half-open flood cannot, so it stops adding
// handshakes; a client that can answer takes the last places, shedding a
// stalled handshake (of either transport) when it has run a second.
func TestQUICHandshakeBacklogRetriesThenShedsStalled(t *testing.T) {
	ts := startServer(t, Options{MaxHandshakes: 4, HandshakeTimeout: time.Minute}, echo())
	for range 3 {
		halfOpenQUIC(t, ts)
	}
	waitFor(t, "three half-open handshakes in the backlog", func() bool { return ts.Stats().Handshakes == 3 })
	halfOpenQUIC(t, ts)
	waitFor(t, "a Retry for the fourth", func() bool { return ts.Stats().QUICRetries > 0 })
	silentConn(t, ts) // TCP has no Retry: it fills the last place
	waitFor(t, "a full backlog", func() bool { return ts.Stats().Handshakes == 4 })

	time.Sleep(handshakeShedAge)
	qc, err := quicDialFrom(t, ts, "127.0.0.1")
	if err != nil {
		t.Fatalf("a client that answers the Retry, once the stalled handshakes aged: %v", err)
	}
	quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x"))
	st := ts.Stats()
	if st.HandshakesShed != 1 {
		t.Errorf("HandshakesShed = %d, want 1", st.HandshakesShed)
	}
	if st.Handshakes != 3 {
		t.Errorf("Handshakes = %d after one was shed and one completed, want 3", st.Handshakes)
	}
}
