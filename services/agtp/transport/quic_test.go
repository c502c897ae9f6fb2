package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/quic-go/quic-go"
)

func TestQUICRoundTripOneStreamPerRequest(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint64]ConnInfo{}
	ts := startServer(t, Options{}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		mu.Lock()
		seen[ci.Requests] = *ci
		mu.Unlock()
		return echo()(ctx, ci, req)
	}))
	if tcp, udp := ts.TCPAddr().(*net.TCPAddr).Port, ts.QUICAddr().(*net.UDPAddr).Port; tcp != udp {
		t.Fatalf("TCP port %d, QUIC port %d: want the same number", tcp, udp)
	}
	qc := ts.quicDial(t, nil)
	if p := qc.ConnectionState().TLS.NegotiatedProtocol; p != agtp.ALPN {
		t.Fatalf("ALPN %q", p)
	}
	const n = 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path := "/r/" + strconv.Itoa(i)
			resp, err := quicRoundTripErr(qc, rawRequest(t, "QUERY", path))
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Status != 200 || string(resp.Body) != strconv.Quote("QUERY "+path) {
				t.Errorf("%s: %d %s", path, resp.Status, resp.Body)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("Requests numbers %v: want 0..%d once each", seen, n-1)
	}
	for _, ci := range seen {
		if ci.Transport != TransportQUIC || ci.EarlyData || ci.TLS == nil || ci.ID != seen[0].ID {
			t.Errorf("ConnInfo %+v", ci)
		}
	}
	if st := ts.Stats(); st.RequestsQUIC != n || st.AcceptedQUIC != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestQUICProtocolErrorAnswersOnItsStreamOnly(t *testing.T) {
	ts := startServer(t, Options{}, echo())
	qc := ts.quicDial(t, nil)
	resp := quicRoundTrip(t, qc, []byte("GET / HTTP/1.1\r\n\r\n"))
	if eb := errorBody(t, resp); resp.Status != 400 || eb.Reason != agtp.ReasonInvalidRequestLine {
		t.Fatalf("got %d %+v", resp.Status, eb)
	}
	if resp := quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x")); resp.Status != 200 {
		t.Fatalf("next stream: %d", resp.Status)
	}
}

// A stream whose request never completes is reset at the header deadline;
// the connection keeps serving other streams.
func TestQUICHeaderDeadlineResetsStream(t *testing.T) {
	ts := startServer(t, Options{HeaderTimeout: 200 * time.Millisecond}, echo())
	qc := ts.quicDial(t, nil)
	str, err := qc.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	str.Write([]byte("AGTP/1.0 QUE"))
	str.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b [1]byte
	_, err = str.Read(b[:])
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != agtpquic.StreamAbandoned {
		t.Fatalf("read = %v, want stream reset with code %d", err, agtpquic.StreamAbandoned)
	}
	if resp := quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x")); resp.Status != 200 {
		t.Fatalf("other stream: %d", resp.Status)
	}
	waitFor(t, "header timeout counted", func() bool { return ts.Stats().HeaderTimeouts == 1 })
}

func TestQUICStreamsPerConnectionBounded(t *testing.T) {
	g := newGate()
	ts := startServer(t, Options{MaxStreamsPerConn: 2}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		g.entered <- struct{}{}
		<-g.release
		return echo()(ctx, ci, req)
	}))
	defer g.open()
	qc := ts.quicDial(t, nil)
	for range 2 {
		str, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		str.Write(rawRequest(t, "QUERY", "/x"))
		<-g.entered
	}
	_, err := qc.OpenStream()
	var sl *quic.StreamLimitReachedError
	if !errors.As(err, &sl) {
		t.Fatalf("third concurrent stream: %v, want the stream limit", err)
	}
}

// docs/decisions.md#D-zero-rtt: only QUERY and DISCOVER are served from
// 0-RTT data; other methods get 425.
func TestRefuseEarlyRule(t *testing.T) {
	tests := []struct {
		early  bool
		method string
		refuse bool
	}{
		{true, agtp.MethodQuery, false},
		{true, agtp.MethodDiscover, false},
		{true, agtp.MethodExecute, true},
		{true, agtp.MethodRevoke, true},
		{true, "query", true},
		{false, agtp.MethodExecute, false},
		{false, agtp.MethodQuery, false},
	}
	for _, tt := range tests {
		if got := refuseEarly(tt.early, tt.method); got != tt.refuse {
			t.Errorf("refuseEarly(%v, %q) = %v, want %v", tt.early, tt.method, got, tt.refuse)
		}
	}
}

// The same rule over a real 0-RTT connection. A UDP proxy holds back the
// client's Handshake flight, so the server has read the 0-RTT request
// before its handshake can complete.
func TestQUIC0RTTOnlyQueryAndDiscover(t *testing.T) {
	var early []string
	var mu sync.Mutex
	ts := startServer(t, Options{}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		if ci.EarlyData {
			mu.Lock()
			early = append(early, req.Method)
			mu.Unlock()
		}
		return echo()(ctx, ci, req)
	}))
	conf := ts.certs.clientTLS()
	conf.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	// A first connection obtains a session ticket.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := quic.DialAddr(ctx, ts.QUICAddr().String(), conf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	quicRoundTrip(t, first, rawRequest(t, "QUERY", "/warm"))
	time.Sleep(50 * time.Millisecond) // the ticket comes after the handshake
	first.CloseWithError(0, "")

	proxy := newHandshakeDelayProxy(t, ts.QUICAddr().(*net.UDPAddr), 300*time.Millisecond)
	tests := []struct {
		method string
		status int
	}{
		{agtp.MethodExecute, agtp.StatusTooEarly},
		{agtp.MethodQuery, agtp.StatusOK},
		{agtp.MethodDiscover, agtp.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			qc, err := quic.DialAddrEarly(ctx, proxy.addr().String(), conf, &quic.Config{Versions: []quic.Version{quic.Version1}})
			if err != nil {
				t.Fatal(err)
			}
			defer qc.CloseWithError(0, "")
			str, err := qc.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			resp := streamRoundTrip(t, str, rawRequest(t, tt.method, "/e"))
			if !qc.ConnectionState().Used0RTT {
				t.Fatal("the client did not use 0-RTT")
			}
			if resp.Status != tt.status {
				t.Fatalf("%s in 0-RTT: %d %s", tt.method, resp.Status, resp.Body)
			}
			if tt.status == agtp.StatusTooEarly {
				if eb := errorBody(t, resp); eb.Reason != agtp.ReasonTooEarly {
					t.Fatalf("reason %q", eb.Reason)
				}
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) != 2 {
		t.Errorf("handler saw EarlyData for %v, want QUERY and DISCOVER", early)
	}
	if ts.Stats().TooEarly != 1 {
		t.Errorf("TooEarly = %d", ts.Stats().TooEarly)
	}
}

func streamRoundTrip(t *testing.T, str *quic.Stream, raw []byte) *agtp.Response {
	t.Helper()
	str.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := str.Write(raw); err != nil {
		t.Fatal(err)
	}
	str.Close()
	resp, err := agtp.ReadResponse(bufio.NewReader(str), agtp.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestQUICRetryAboveHandshakeRate(t *testing.T) {
	ts := startServer(t, Options{QUICRetryAbove: -1}, echo())
	qc := ts.quicDial(t, nil)
	if resp := quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x")); resp.Status != 200 {
		t.Fatalf("status %d", resp.Status)
	}
	if ts.Stats().QUICRetries == 0 {
		t.Fatal("no Retry required")
	}
}

func TestQUICMaxConnsRefusesNewConnections(t *testing.T) {
	ts := startServer(t, Options{MaxConns: 1}, echo())
	qc := ts.quicDial(t, nil)
	quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	second, err := quic.DialAddr(ctx, ts.QUICAddr().String(), ts.certs.clientTLS(), &quic.Config{})
	if err == nil {
		second.CloseWithError(0, "")
		t.Fatal("second connection accepted at MaxConns=1")
	}
	// Counted per refused Initial packet; a ClientHello may span two.
	if ts.Stats().QUICRefused == 0 {
		t.Errorf("QUICRefused = %d", ts.Stats().QUICRefused)
	}
}

func TestQUICIdleTimeoutClosesConnection(t *testing.T) {
	ts := startServer(t, Options{IdleTimeout: 300 * time.Millisecond}, echo())
	qc := ts.quicDial(t, nil)
	quicRoundTrip(t, qc, rawRequest(t, "QUERY", "/x"))
	select {
	case <-qc.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("connection still open after the idle timeout")
	}
	var ae *quic.ApplicationError
	if err := context.Cause(qc.Context()); !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(agtpquic.CodeNoError) || !ae.Remote {
		t.Fatalf("closed with %v, want the server's application close 0", err)
	}
	waitFor(t, "idle timeout counted", func() bool { return ts.Stats().IdleTimeouts == 1 })
}

func TestQUICShutdownFinishesInFlightThenCloses(t *testing.T) {
	g := newGate()
	ts := startServer(t, Options{}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/slow" {
			g.entered <- struct{}{}
			<-g.release
		}
		return echo()(ctx, ci, req)
	}))
	defer g.open()
	qc := ts.quicDial(t, nil)
	idle := ts.quicDial(t, nil)
	quicRoundTrip(t, idle, rawRequest(t, "QUERY", "/x"))
	result := make(chan error, 1)
	go func() {
		resp, err := quicRoundTripErr(qc, rawRequest(t, "QUERY", "/slow"))
		if err == nil && resp.Status != 200 {
			err = errors.New("status " + strconv.Itoa(resp.Status))
		}
		result <- err
	}()
	<-g.entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- ts.Shutdown(ctx)
	}()
	select {
	case <-idle.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("idle QUIC connection not closed at shutdown")
	}
	g.open()
	if err := <-result; err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("connection not closed after its last response")
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
