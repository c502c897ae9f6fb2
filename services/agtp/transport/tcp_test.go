package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestTCPRoundTripOnPersistentConnection(t *testing.T) {
	var infos []ConnInfo
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		infos = append(infos, *ci)
		return echo()(ctx, ci, req)
	}))
	c := newClient(ts.dial(t, nil))
	for i, target := range []string{"/documents", "/documents/7?lang=en"} {
		resp := c.roundTrip(t, "QUERY", target)
		path, _, _ := strings.Cut(target, "?")
		if resp.Status != 200 || string(resp.Body) != strconv.Quote("QUERY "+path) {
			t.Fatalf("request %d: got %d %s", i, resp.Status, resp.Body)
		}
	}
	if len(infos) != 2 {
		t.Fatalf("handler called %d times, want 2", len(infos))
	}
	for i, ci := range infos {
		if ci.Transport != TransportTCP || ci.Requests != uint64(i) || ci.ID != infos[0].ID || ci.TLS == nil || ci.EarlyData {
			t.Errorf("request %d: ConnInfo %+v", i, ci)
		}
	}
	if infos[0].TLS.Version != tls.VersionTLS13 || infos[0].TLS.NegotiatedProtocol != agtp.ALPN {
		t.Errorf("TLS version %x, ALPN %q", infos[0].TLS.Version, infos[0].TLS.NegotiatedProtocol)
	}
	if st := ts.Stats(); st.RequestsTCP != 2 || st.AcceptedTCP != 1 || st.OpenTCP != 1 {
		t.Errorf("stats %+v", st)
	}
}

// docs/decisions.md#D-tls-alpn: TLS 1.3 only; ALPN agtp; a client without
// ALPN is accepted on TCP.
func TestTCPTLSAndALPNRules(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	tests := []struct {
		name   string
		adjust func(*tls.Config)
		ok     bool
	}{
		{"alpn agtp", func(*tls.Config) {}, true},
		{"no alpn accepted", func(c *tls.Config) { c.NextProtos = nil }, true},
		{"other alpn refused", func(c *tls.Config) { c.NextProtos = []string{"h2"} }, false},
		{"tls 1.2 refused", func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := ts.certs.clientTLS()
			tt.adjust(conf)
			conn, err := tls.Dial("tcp", ts.TCPAddr().String(), conf)
			if !tt.ok {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if resp := newClient(conn).roundTrip(t, "DISCOVER", "/"); resp.Status != 200 {
				t.Fatalf("status %d", resp.Status)
			}
		})
	}
}

func TestTCPPipelinedRequestsAnsweredInOrder(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		// Later requests finish faster; order must still hold.
		if req.Path == "/a" {
			time.Sleep(20 * time.Millisecond)
		}
		return echo()(ctx, ci, req)
	}))
	conn := ts.dial(t, nil)
	var raw []byte
	for _, p := range []string{"/a", "/b", "/c"} {
		raw = append(raw, rawRequest(t, "QUERY", p)...)
	}
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	c := newClient(conn)
	for _, p := range []string{"/a", "/b", "/c"} {
		if resp := c.recv(t); string(resp.Body) != strconv.Quote("QUERY "+p) {
			t.Fatalf("want response to %s, got %s", p, resp.Body)
		}
	}
}

// A client that sends half a request and stalls is cut off at the header
// deadline, while another client is served meanwhile.
func TestTCPHeaderDeadlineDisconnectsSlowClient(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, HeaderTimeout: 300 * time.Millisecond}, echo())
	slow := ts.dial(t, nil)
	start := time.Now()
	if _, err := slow.Write([]byte("AGTP/1.0 QUE")); err != nil {
		t.Fatal(err)
	}
	fast := newClient(ts.dial(t, nil))
	for range 5 {
		if resp := fast.roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
			t.Fatalf("other client: status %d", resp.Status)
		}
	}
	expectClosed(t, slow, nil, 3*time.Second)
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("slow client closed after %v, before the header deadline", el)
	}
	waitFor(t, "header timeout counted", func() bool { return ts.Stats().HeaderTimeouts == 1 })
}

func TestTCPBodyDeadline(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, BodyTimeout: 200 * time.Millisecond}, echo())
	conn := ts.dial(t, nil)
	conn.Write([]byte("AGTP/1.0 EXECUTE /x\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 10\r\n\r\n{\"a\""))
	expectClosed(t, conn, nil, 3*time.Second)
	waitFor(t, "body timeout counted", func() bool { return ts.Stats().BodyTimeouts == 1 })
}

// Each response gets a write deadline of its own, however it leaves the
// connection's buffer: a response whose body fits the buffer but whose
// head and body together do not is written out while it is being built,
// before any flush. Such a response must not go out under a deadline left
// from the handshake or from the previous response, which has passed for
// a client that waits longer than the handshake or write timeout between
// requests (both well inside the idle timeout).
func TestTCPEachResponseHasItsOwnWriteDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	overflowing := func(_ context.Context, _ *ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/small" {
			return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte(`"small"`))
		}
		// The body alone fits the 4 KiB buffer; with the head (an
		// Attribution-Record is about this large) it does not.
		resp := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte(strconv.Quote(strings.Repeat("b", 3000))))
		resp.Header.Set("X-Large-Field", strings.Repeat("h", 2000))
		return resp
	}
	for _, tc := range []struct {
		name   string
		opts   Options
		before []string // requests answered before the wait
	}{
		{"first request after the handshake timeout", Options{HandshakeTimeout: timeout}, nil},
		{"later request after the write timeout", Options{WriteTimeout: timeout}, []string{"/small"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DisableQUIC = true
			ts := startServer(t, tc.opts, HandlerFunc(overflowing))
			c := newClient(ts.dial(t, nil))
			for _, p := range tc.before {
				if resp := c.roundTrip(t, "QUERY", p); resp.Status != agtp.StatusOK {
					t.Fatalf("%s: status %d", p, resp.Status)
				}
			}
			time.Sleep(2 * timeout)
			c.send(t, "QUERY", "/large")
			c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := agtp.ReadResponse(c.br, agtp.Limits{})
			if err != nil {
				t.Fatalf("the response was lost: %v", err)
			}
			if resp.Status != agtp.StatusOK || len(resp.Body) != 3002 {
				t.Fatalf("status %d, %d body bytes", resp.Status, len(resp.Body))
			}
		})
	}
}

// docs/decisions.md#D-limits: exceeding a limit gets 400 with a reason
// naming it, and the connection is closed.
func TestTCPOversizedInputGets400AndClose(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	tests := []struct {
		name, raw, reason string
	}{
		{"header section", "AGTP/1.0 QUERY /x\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", agtp.ReasonHeaderSectionTooLarge},
		{"request line", "AGTP/1.0 QUERY /" + strings.Repeat("a", 9<<10) + "\r\n\r\n", agtp.ReasonRequestLineTooLong},
		{"body", "AGTP/1.0 EXECUTE /x\r\nContent-Type: application/vnd.agtp+json\r\nContent-Length: 2000000\r\n\r\n{}", agtp.ReasonBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := ts.dial(t, nil)
			go conn.Write([]byte(tt.raw))
			c := newClient(conn)
			resp := c.recv(t)
			if eb := errorBody(t, resp); resp.Status != 400 || eb.Reason != tt.reason {
				t.Fatalf("got %d %+v", resp.Status, eb)
			}
			expectClosed(t, conn, c.br, 3*time.Second)
		})
	}
}

func TestTCPGarbageIsRejectedAndOthersStillServed(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	t.Run("not TLS", func(t *testing.T) {
		raw, err := net.Dial("tcp", ts.TCPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		expectClosed(t, raw, nil, 3*time.Second)
		waitFor(t, "handshake failure counted", func() bool { return ts.Stats().HandshakeFailed == 1 })
	})
	t.Run("not AGTP inside TLS", func(t *testing.T) {
		conn := ts.dial(t, nil)
		conn.Write([]byte("\x16\x03\x01garbage\x00\xff\r\n\r\n"))
		c := newClient(conn)
		resp := c.recv(t)
		if eb := errorBody(t, resp); resp.Status != 400 || eb.Reason != agtp.ReasonInvalidRequestLine {
			t.Fatalf("got %d %+v", resp.Status, eb)
		}
		expectClosed(t, conn, c.br, 3*time.Second)
	})
	if resp := newClient(ts.dial(t, nil)).roundTrip(t, "QUERY", "/still"); resp.Status != 200 {
		t.Fatalf("status %d", resp.Status)
	}
}

// A wire error that leaves the stream framed (459, retired header) is
// answered and the connection stays usable; the error body echoes task_id
// and, for 459, the method.
func TestTCPFramedProtocolErrorKeepsConnection(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	c := newClient(ts.dial(t, nil))
	resp := c.roundTrip(t, "frob", "/x", agtp.HeaderTaskID, "task-9")
	eb := errorBody(t, resp)
	if resp.Status != agtp.StatusMethodViolation || eb.Reason != agtp.ReasonMethodInvalid || eb.TaskID != "task-9" || eb.Extra["method"] != "frob" {
		t.Fatalf("got %d %+v", resp.Status, eb)
	}
	if resp := c.roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
		t.Fatalf("next request: status %d", resp.Status)
	}
	if st := ts.Stats(); st.ProtocolErrors != 1 {
		t.Errorf("ProtocolErrors = %d", st.ProtocolErrors)
	}
}

// errorStamper is a handler that also shapes transport errors.
type errorStamper struct{ HandlerFunc }

func (errorStamper) RespondError(_ context.Context, ci *ConnInfo, _ *agtp.Request, perr *agtp.ProtocolError) *agtp.Response {
	r := perr.Response()
	r.Header.Set(agtp.HeaderServerID, "fd-1")
	if ci.Requests == 0 {
		r.Header.Set(agtp.HeaderSupportedMethods, "QUERY")
	}
	return r
}

func TestTCPErrorResponderStampsTransportErrors(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, errorStamper{echo()})
	c := newClient(ts.dial(t, nil))
	resp := c.roundTrip(t, "frob", "/x")
	if resp.Status != 459 || resp.Header.Get(agtp.HeaderServerID) != "fd-1" || resp.Header.Get(agtp.HeaderSupportedMethods) != "QUERY" {
		t.Fatalf("first response: %d %v", resp.Status, resp.Header)
	}
	resp = c.roundTrip(t, "frob", "/x")
	if resp.Header.Has(agtp.HeaderSupportedMethods) {
		t.Fatal("Supported-Methods on the second response: ConnInfo.Requests not counted")
	}
}

func TestTCPIdleTimeoutClosesConnection(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, IdleTimeout: 300 * time.Millisecond}, echo())
	conn := ts.dial(t, nil)
	c := newClient(conn)
	c.roundTrip(t, "QUERY", "/x")
	start := time.Now()
	expectClosed(t, conn, c.br, 3*time.Second)
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", el)
	}
	waitFor(t, "idle timeout counted", func() bool { return ts.Stats().IdleTimeouts == 1 })
}

// MaxInFlight is a server-wide bound: a request that finds it full waits
// BusyWait, then gets 503 server-busy.
func TestTCPMaxInFlightAnswers503ServerBusy(t *testing.T) {
	g := newGate()
	ts := startServer(t, Options{DisableQUIC: true, MaxInFlight: 1, BusyWait: 50 * time.Millisecond},
		HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
			if req.Path == "/slow" {
				g.entered <- struct{}{}
				<-g.release
			}
			return echo()(ctx, ci, req)
		}))
	defer g.open()
	a := newClient(ts.dial(t, nil))
	a.send(t, "QUERY", "/slow")
	<-g.entered
	b := newClient(ts.dial(t, nil))
	start := time.Now()
	resp := b.roundTrip(t, "QUERY", "/fast", agtp.HeaderTaskID, "t-1")
	if eb := errorBody(t, resp); resp.Status != 503 || eb.Reason != ReasonServerBusy || eb.TaskID != "t-1" {
		t.Fatalf("got %d %+v", resp.Status, eb)
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Errorf("503 after %v: did not wait BusyWait", el)
	}
	g.open()
	if resp := a.recv(t); resp.Status != 200 {
		t.Fatalf("slow request: %d", resp.Status)
	}
	if resp := b.roundTrip(t, "QUERY", "/fast"); resp.Status != 200 {
		t.Fatalf("after release: %d", resp.Status)
	}
	if st := ts.Stats(); st.Busy != 1 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestTCPHandlerFailuresBecome500AndConnectionSurvives(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		switch req.Path {
		case "/panic":
			panic("boom")
		case "/nil":
			return nil
		case "/invalid":
			r := agtp.NewResponse(200, "", nil)
			r.Header.Add("Bad Name", "x")
			return r
		}
		return echo()(ctx, ci, req)
	}))
	c := newClient(ts.dial(t, nil))
	for _, p := range []string{"/panic", "/nil", "/invalid"} {
		resp := c.roundTrip(t, "QUERY", p)
		if eb := errorBody(t, resp); resp.Status != 500 || eb.Reason != ReasonInternalError {
			t.Fatalf("%s: got %d %+v", p, resp.Status, eb)
		}
		if resp := c.roundTrip(t, "QUERY", "/ok"); resp.Status != 200 {
			t.Fatalf("after %s: %d", p, resp.Status)
		}
	}
	if st := ts.Stats(); st.Panics != 1 || st.InvalidResponses != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Every 500 the transport makes itself, a refused response's included,
// is shaped by the ErrorResponder (Server-ID and the rest of what a
// handler stamps on its own answers).
func TestTCPHandlerFailure500sAreStamped(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, errorStamper{func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		switch req.Path {
		case "/panic":
			panic("boom")
		case "/invalid":
			return agtp.NewResponse(agtp.StatusNoContent, agtp.MediaTypeJSON, []byte(`{}`))
		}
		return echo()(ctx, ci, req)
	}})
	c := newClient(ts.dial(t, nil))
	for _, p := range []string{"/panic", "/invalid"} {
		resp := c.roundTrip(t, "QUERY", p)
		if eb := errorBody(t, resp); resp.Status != 500 || eb.Reason != ReasonInternalError || resp.Header.Get(agtp.HeaderServerID) != "fd-1" {
			t.Fatalf("%s: got %d %+v %v", p, resp.Status, eb, resp.Header)
		}
	}
}

// Graceful shutdown: idle connections are closed, new ones refused, the
// request in flight finishes and its response is written, then the
// connection closes and Shutdown returns.
func TestTCPShutdownFinishesInFlightThenCloses(t *testing.T) {
	g := newGate()
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/slow" {
			g.entered <- struct{}{}
			<-g.release
		}
		return echo()(ctx, ci, req)
	}))
	defer g.open()
	busyConn := ts.dial(t, nil)
	busy := newClient(busyConn)
	idleConn := ts.dial(t, nil)
	idle := newClient(idleConn)
	idle.roundTrip(t, "QUERY", "/x")
	busy.send(t, "QUERY", "/slow")
	<-g.entered

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- ts.Shutdown(ctx)
	}()
	expectClosed(t, idleConn, idle.br, 2*time.Second)
	if _, err := net.DialTimeout("tcp", ts.TCPAddr().String(), time.Second); err == nil {
		t.Error("new connection accepted during shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.open()
	if resp := busy.recv(t); resp.Status != 200 || string(resp.Body) != strconv.Quote("QUERY /slow") {
		t.Fatalf("in-flight response: %d %s", resp.Status, resp.Body)
	}
	expectClosed(t, busyConn, busy.br, 2*time.Second)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-ts.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	ts.done <- nil // for the cleanup
}

func TestTCPShutdownDeadlineCancelsHandlers(t *testing.T) {
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		return echo()(ctx, ci, req)
	}))
	c := newClient(ts.dial(t, nil))
	c.send(t, "QUERY", "/stuck")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("handler context not cancelled at the drain deadline")
	}
	waitFor(t, "connections gone", func() bool { return ts.Stats().OpenTCP == 0 })
}

// A request's context is its connection's: two requests on one connection
// share it, another connection has its own, and it ends with the
// connection, while the server goes on.
func TestTCPRequestContextIsTheConnections(t *testing.T) {
	ctxs := make(chan context.Context, 3)
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		ctxs <- ctx
		return echo()(ctx, ci, req)
	}))
	conn := ts.dial(t, nil)
	c := newClient(conn)
	c.roundTrip(t, "QUERY", "/a")
	c.roundTrip(t, "QUERY", "/b")
	newClient(ts.dial(t, nil)).roundTrip(t, "QUERY", "/c")
	first, second, other := <-ctxs, <-ctxs, <-ctxs
	if first != second {
		t.Error("two requests on one connection got different contexts")
	}
	if first == other {
		t.Error("two connections share a context")
	}
	if first.Err() != nil {
		t.Fatalf("context of an open connection ended: %v", first.Err())
	}
	conn.Close()
	waitFor(t, "the closed connection's context to end", func() bool { return first.Err() != nil })
	if other.Err() != nil {
		t.Errorf("another connection's context ended: %v", other.Err())
	}
}

// At MaxConns the accept loop pauses: a new connection waits (its
// handshake does not start) until an existing one ends, then is served.
func TestTCPMaxConnsPausesAccept(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true, MaxConns: 1}, echo())
	first := ts.dial(t, nil)
	newClient(first).roundTrip(t, "QUERY", "/x")

	done := make(chan error, 1)
	go func() {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ts.TCPAddr().String(), ts.certs.clientTLS())
		if err == nil {
			conn.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("second handshake finished at the connection limit: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if ts.Stats().ConnLimitWaits == 0 {
		t.Error("ConnLimitWaits not counted")
	}
	first.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second connection after the first closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second connection never served")
	}
}

// Client certificates are optional, verified against ClientCAs when given,
// and visible to the handler as the TLS client identity.
func TestTCPClientCertificateOptionalAndVerified(t *testing.T) {
	pki := testkit.PKI(t)
	var peer atomic.Value
	ts := startServer(t, Options{DisableQUIC: true, ClientCAFile: pki.CA()}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		name := ""
		if len(ci.TLS.PeerCertificates) > 0 {
			name = ci.TLS.PeerCertificates[0].Subject.CommonName
		}
		peer.Store(name)
		return echo()(ctx, ci, req)
	}))
	clientCert, err := tls.LoadX509KeyPair(pki.Cert("admin"), pki.Key("admin"))
	if err != nil {
		t.Fatal(err)
	}
	foreign := foreignCert(t)

	tests := []struct {
		name  string
		certs []tls.Certificate
		want  string
		ok    bool
	}{
		{"no certificate", nil, "", true},
		{"suite certificate", []tls.Certificate{clientCert}, "admin", true},
		{"foreign CA refused", []tls.Certificate{foreign}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := ts.certs.clientTLS()
			if len(tt.certs) > 0 {
				// Always present it: crypto/tls would otherwise send no
				// certificate when the server's CA list does not match.
				conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tt.certs[0], nil }
			}
			conn, err := tls.Dial("tcp", ts.TCPAddr().String(), conf)
			if err != nil {
				if tt.ok {
					t.Fatal(err)
				}
				return
			}
			defer conn.Close()
			// In TLS 1.3 the client learns of a rejected certificate on
			// its first read.
			c := newClient(conn)
			c.send(t, "QUERY", "/who")
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := agtp.ReadResponse(c.br, agtp.Limits{})
			if !tt.ok {
				if err == nil {
					t.Fatalf("served with a foreign certificate: %d", resp.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := peer.Load(); got != tt.want {
				t.Fatalf("handler saw client identity %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTCPClientCloseWithoutRequestIsQuiet(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	conn := ts.dial(t, nil)
	conn.Close()
	waitFor(t, "connection gone", func() bool { return ts.Stats().OpenTCP == 0 })
	if st := ts.Stats(); st.ProtocolErrors != 0 || st.HandshakeFailed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{"minimal", Options{CertFile: "c", KeyFile: "k"}, true},
		{"missing cert", Options{KeyFile: "k"}, false},
		{"bad addr", Options{CertFile: "c", KeyFile: "k", Addr: "4480"}, false},
		{"negative timeout", Options{CertFile: "c", KeyFile: "k", IdleTimeout: -1}, false},
		{"both client CA forms", Options{CertFile: "c", KeyFile: "k", ClientCAFile: "x", ClientCAs: newTestCerts(t).ca}, false},
		{"negative body budget", Options{CertFile: "c", KeyFile: "k", BodyBudget: -1}, false},
		{"body budget below the default body limit", Options{CertFile: "c", KeyFile: "k", BodyBudget: agtp.DefaultMaxBody - 1}, false},
		{"body budget below the configured body limit", Options{CertFile: "c", KeyFile: "k", BodyBudget: 4 << 20, Limits: agtp.Limits{MaxBody: 8 << 20}}, false},
		{"body budget of one body", Options{CertFile: "c", KeyFile: "k", BodyBudget: 8 << 20, Limits: agtp.Limits{MaxBody: 8 << 20}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
	if _, err := New(Options{CertFile: "/nonexistent", KeyFile: "/nonexistent"}, echo()); err == nil {
		t.Error("New with unreadable certificate files succeeded")
	}
}

var _ io.Reader = (*tcpConn)(nil)

// A connection that never finishes its handshake does not hold up a drain.
func TestShutdownClosesConnectionsInHandshake(t *testing.T) {
	ts := startServer(t, Options{DisableQUIC: true}, echo())
	raw, err := net.Dial("tcp", ts.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	waitFor(t, "connection accepted", func() bool { return ts.Stats().OpenTCP == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("drain took %v", el)
	}
	expectClosed(t, raw, nil, time.Second)
}

// Run serves until its context ends, then drains and returns nil.
func TestRunDrainsWhenContextEnds(t *testing.T) {
	certs := newTestCerts(t)
	s, err := New(Options{Addr: "127.0.0.1:0", CertFile: certs.cert, KeyFile: certs.key, Logger: testLogger()}, echo())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "listening", func() bool { return s.TCPAddr() != nil && s.QUICAddr() != nil })
	conn, err := tls.Dial("tcp", s.TCPAddr().String(), certs.clientTLS())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp := newClient(conn).roundTrip(t, "QUERY", "/x"); resp.Status != 200 {
		t.Fatalf("status %d", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if err := s.Serve(context.Background()); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after shutdown = %v", err)
	}
}

// A finished response does not wait for the handler of the next
// pipelined request: that handler may run for as long as the request
// timeout, or wait for something the client does only once it has the
// first answer.
func TestTCPPipelinedResponseIsNotHeldBehindTheNextHandler(t *testing.T) {
	g := newGate()
	ts := startServer(t, Options{DisableQUIC: true}, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/slow" {
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
		return echo()(ctx, ci, req)
	}))
	defer g.open()
	conn := ts.dial(t, nil)
	raw := append(rawRequest(t, "QUERY", "/fast"), rawRequest(t, "QUERY", "/slow")...)
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	c := newClient(conn)
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := agtp.ReadResponse(c.br, agtp.Limits{})
	if err != nil {
		t.Fatalf("the response to /fast, complete on the server, did not arrive within 3 s while /slow's handler ran: %v", err)
	}
	if string(resp.Body) != strconv.Quote("QUERY /fast") {
		t.Fatalf("got %s", resp.Body)
	}
	g.open()
	if resp := c.recv(t); string(resp.Body) != strconv.Quote("QUERY /slow") {
		t.Fatalf("got %s", resp.Body)
	}
}
