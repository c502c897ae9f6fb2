package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
)

var agentA = strings.Repeat("a1", 32)

func TestDoRoundTripOverTLS(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{AgentID: agentA})
	req := request(t, agtp.MethodQuery, "/documents?lang=en", agtp.HeaderTaskID, "t-1")
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = []byte(`{"q":1}`)

	resp, err := c.Do(testContext(t), req, srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != agtp.StatusOK || string(resp.Body) != `QUERY /documents?lang=en {"q":1}` {
		t.Fatalf("got %d %q", resp.Status, resp.Body)
	}
	if got := resp.Header.Get(agtp.HeaderAgentID); got != agentA {
		t.Errorf("default Agent-ID not sent: server saw %q", got)
	}
	if resp.Header.Get(agtp.HeaderTaskID) != "t-1" {
		t.Errorf("Task-ID not sent")
	}
	if req.Header.Has(agtp.HeaderAgentID) {
		t.Errorf("Do modified the caller's request: %v", req.Header)
	}
}

func TestDefaultHeadersDoNotOverrideTheRequest(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{AgentID: agentA, AuthorityScope: "documents:read"})
	other := strings.Repeat("b2", 32)
	resp, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/", "agent-id", other), srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(agtp.HeaderAgentID); got != other {
		t.Errorf("Agent-ID = %q, want the request's %q", got, other)
	}
	if got := resp.Header.Get(agtp.HeaderAuthorityScope); got != "documents:read" {
		t.Errorf("Authority-Scope default = %q", got)
	}
}

func TestPoolSequentialRequestsReuseOneConnection(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	for i := range 25 {
		resp, err := c.Do(ctx, request(t, agtp.MethodQuery, fmt.Sprintf("/n/%d", i)), srv.addr())
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := fmt.Sprintf("QUERY /n/%d ", i); string(resp.Body) != want {
			t.Fatalf("request %d answered %q (responses out of step?)", i, resp.Body)
		}
	}
	st := srv.Stats()
	if st.AcceptedTCP != 1 || st.RequestsTCP != 25 {
		t.Fatalf("server accepted %d connections for %d requests, want 1 for 25", st.AcceptedTCP, st.RequestsTCP)
	}
}

func TestPoolBoundsConnectionsPerHost(t *testing.T) {
	var inHandler, peak atomic.Int64
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		n := inHandler.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		inHandler.Add(-1)
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{MaxConnsPerHost: 2})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			resp, err := c.Do(ctx, request(t, agtp.MethodQuery, fmt.Sprintf("/%d", i)), srv.addr())
			if err == nil && string(resp.Body) != fmt.Sprintf("QUERY /%d ", i) {
				err = fmt.Errorf("request %d got %q", i, resp.Body)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := srv.Stats(); st.AcceptedTCP != 2 {
		t.Errorf("accepted %d connections, want exactly MaxConnsPerHost=2", st.AcceptedTCP)
	}
	if peak.Load() > 2 {
		t.Errorf("%d requests served at once over 2 unpipelined connections", peak.Load())
	}
}

// The raw server refuses to answer a request until the next one has
// arrived on the same connection, which only a pipelining client sends.
func TestPipeliningWritesBeforeEarlierResponsesArrive(t *testing.T) {
	const n = 6
	srv := startRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader, bw *bufio.Writer) {
		var reqs []*agtp.Request
		for len(reqs) < n {
			req, err := agtp.ReadRequest(br, agtp.Limits{})
			if err != nil {
				return
			}
			reqs = append(reqs, req)
		}
		for _, req := range reqs {
			agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(req.Path)).Write(bw)
			bw.Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	c := newClient(t, srv.caFile, client.Options{MaxConnsPerHost: 1, MaxPipeline: n})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			path := fmt.Sprintf("/p%d", i)
			resp, err := c.Do(ctx, request(t, agtp.MethodQuery, path), srv.addr())
			if err == nil && string(resp.Body) != path {
				err = fmt.Errorf("%s answered with %q: responses matched to the wrong requests", path, resp.Body)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if srv.accepted() != 1 {
		t.Errorf("accepted %d connections, want 1", srv.accepted())
	}
}

func TestPipelinedRequestAbandonedWhileQueuedCostsOnlyTheConnection(t *testing.T) {
	release := make(chan struct{})
	srv := startRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader, bw *bufio.Writer) {
		for {
			req, err := agtp.ReadRequest(br, agtp.Limits{})
			if err != nil {
				return
			}
			if req.Path == "/slow" {
				<-release
			}
			agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(req.Path)).Write(bw)
			bw.Flush()
		}
	})
	c := newClient(t, srv.caFile, client.Options{MaxConnsPerHost: 1, MaxPipeline: 2})
	ctx := testContext(t)
	slow := make(chan error, 1)
	go func() {
		resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/slow"), srv.addr())
		if err == nil && string(resp.Body) != "/slow" {
			err = fmt.Errorf("slow got %q", resp.Body)
		}
		slow <- err
	}()
	time.Sleep(50 * time.Millisecond) // /slow is in flight
	qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := c.Do(qctx, request(t, agtp.MethodQuery, "/queued"), srv.addr())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued request: err = %v, want deadline exceeded", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the request ahead of the abandoned one failed: %v", err)
	}
	resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/after"), srv.addr())
	if err != nil || string(resp.Body) != "/after" {
		t.Fatalf("after: %v %v", err, resp)
	}
	if srv.accepted() != 2 {
		t.Errorf("accepted %d connections; the abandoned one should have been replaced once", srv.accepted())
	}
}

func TestContextDeadlineBoundsTheExchange(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/slow" {
			time.Sleep(700 * time.Millisecond)
		}
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{})
	ctx, cancel := context.WithTimeout(testContext(t), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Do(ctx, request(t, agtp.MethodQuery, "/slow"), srv.addr())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Do returned after %v; the deadline was 100ms", d)
	}
	// The abandoned connection is not reused: the next request works.
	resp, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/fast"), srv.addr())
	if err != nil || resp.Status != 200 {
		t.Fatalf("after a deadline: %v", err)
	}
	if st := srv.Stats(); st.AcceptedTCP != 2 {
		t.Errorf("accepted %d connections, want 2 (the timed-out one discarded)", st.AcceptedTCP)
	}
}

func TestContextCancelAbandonsTheRequest(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		time.Sleep(500 * time.Millisecond)
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{})
	ctx, cancel := context.WithCancel(testContext(t))
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestReconnectsAfterTheServerClosesAnIdleConnection(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true, IdleTimeout: 100 * time.Millisecond}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	if _, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "server idle close", func() bool { return srv.Stats().OpenTCP == 0 })
	// Not idempotent, so no retry could hide a dead connection: the pool
	// must notice the close before writing.
	resp, err := c.Do(ctx, request(t, agtp.MethodExecute, "/orders"), srv.addr())
	if err != nil {
		t.Fatalf("request after the server's idle close: %v", err)
	}
	if resp.Status != 200 {
		t.Fatalf("status %d", resp.Status)
	}
	if st := srv.Stats(); st.AcceptedTCP != 2 {
		t.Errorf("accepted %d connections, want 2", st.AcceptedTCP)
	}
}

// closeSecond answers the first request of each connection and closes
// the connection on reading the second, as a server whose idle close
// races with the request does.
func closeSecond(_ int, conn net.Conn, br *bufio.Reader, bw *bufio.Writer) {
	for i := 0; ; i++ {
		req, err := agtp.ReadRequest(br, agtp.Limits{})
		if err != nil || i == 1 {
			return
		}
		agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(req.Method)).Write(bw)
		bw.Flush()
	}
}

func TestRetryRuleNoResponseOnAReusedConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		req     func(t testing.TB) *agtp.Request
		retried bool
	}{
		{"idempotent method is retried", func(t testing.TB) *agtp.Request { return request(t, agtp.MethodQuery, "/") }, true},
		{"idempotency key makes it retryable", func(t testing.TB) *agtp.Request {
			return request(t, agtp.MethodExecute, "/", agtp.HeaderIdempotencyKey, "k-1")
		}, true},
		{"non-idempotent method is not retried", func(t testing.TB) *agtp.Request { return request(t, agtp.MethodExecute, "/") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, closeSecond)
			c := newClient(t, srv.caFile, client.Options{})
			var retries atomic.Int32
			ctx := client.WithTrace(testContext(t), &client.Trace{Retry: func(error) { retries.Add(1) }})
			if _, err := c.Do(ctx, tc.req(t), srv.addr()); err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(ctx, tc.req(t), srv.addr())
			if tc.retried {
				if err != nil {
					t.Fatalf("err = %v, want a retry on a new connection", err)
				}
				if resp.Status != 200 || retries.Load() != 1 || srv.accepted() != 2 {
					t.Fatalf("status %d, %d retries, %d connections; want 200, 1, 2", resp.Status, retries.Load(), srv.accepted())
				}
				return
			}
			if !errors.Is(err, client.ErrNoResponse) {
				t.Fatalf("err = %v, want ErrNoResponse", err)
			}
			if retries.Load() != 0 || srv.accepted() != 1 {
				t.Fatalf("%d retries, %d connections; a non-idempotent request must not be sent twice", retries.Load(), srv.accepted())
			}
		})
	}
}

func TestFreshConnectionClosedIsNotRetried(t *testing.T) {
	srv := startRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader, _ *bufio.Writer) {
		agtp.ReadRequest(br, agtp.Limits{})
	})
	c := newClient(t, srv.caFile, client.Options{})
	_, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr())
	if !errors.Is(err, client.ErrNoResponse) {
		t.Fatalf("err = %v, want ErrNoResponse", err)
	}
	if srv.accepted() != 1 {
		t.Fatalf("%d connections: a server that drops fresh connections must not be retried", srv.accepted())
	}
}

func TestProtocolErrorDiscardsTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(bw *bufio.Writer)
	}{
		{"garbage status line", func(bw *bufio.Writer) { bw.WriteString("HTTP/1.1 200 OK\r\n\r\n") }},
		{"transfer-encoding", func(bw *bufio.Writer) {
			bw.WriteString("AGTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		}},
		{"bytes after the response", func(bw *bufio.Writer) {
			agtp.NewResponse(200, "text/plain", []byte("ok")).Write(bw)
			bw.WriteString("AGTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, func(n int, conn net.Conn, br *bufio.Reader, bw *bufio.Writer) {
				for {
					if _, err := agtp.ReadRequest(br, agtp.Limits{}); err != nil {
						return
					}
					if n == 0 {
						tc.write(bw)
					} else {
						agtp.NewResponse(200, "text/plain", []byte("fresh")).Write(bw)
					}
					bw.Flush()
				}
			})
			c := newClient(t, srv.caFile, client.Options{})
			ctx := testContext(t)
			c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr())
			resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr())
			if err != nil || string(resp.Body) != "fresh" {
				t.Fatalf("second request: %v %v; the broken connection was reused", err, resp)
			}
		})
	}
}

func TestResponseLimitsApply(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 2048)
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(context.Context, *transport.ConnInfo, *agtp.Request) *agtp.Response {
		return agtp.NewResponse(200, "text/plain", big)
	})
	c := newClient(t, srv.caFile, client.Options{Limits: agtp.Limits{MaxBody: 1024}})
	_, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr())
	var pe *agtp.ProtocolError
	if !errors.As(err, &pe) || pe.Reason != agtp.ReasonBodyTooLarge {
		t.Fatalf("err = %v, want body-too-large", err)
	}
}

func TestInvalidRequestIsRefusedWithoutCostingTheConnection(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	if _, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	bad := request(t, agtp.MethodQuery, "/", "X-Evil", "a\r\nInjected: 1")
	if _, err := c.Do(ctx, bad, srv.addr()); !errors.Is(err, agtp.ErrInvalidHeader) {
		t.Fatalf("err = %v, want ErrInvalidHeader", err)
	}
	body := request(t, agtp.MethodQuery, "/")
	body.Body = []byte("no type")
	if _, err := c.Do(ctx, body, srv.addr()); !errors.Is(err, agtp.ErrMissingContentType) {
		t.Fatalf("err = %v, want ErrMissingContentType", err)
	}
	if _, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.AcceptedTCP != 1 || st.RequestsTCP != 2 {
		t.Fatalf("%d connections, %d requests; want 1, 2", st.AcceptedTCP, st.RequestsTCP)
	}
}

func TestBadRequestStatusRetiresTheConnection(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/bad" {
			return agtp.NewErrorResponse(agtp.StatusBadRequest, "invalid-body", "test")
		}
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	resp, err := c.Do(ctx, request(t, agtp.MethodQuery, "/bad"), srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != agtp.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.Status)
	}
	if _, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.AcceptedTCP != 2 {
		t.Errorf("accepted %d, want 2: a connection that got 400 is not reused", st.AcceptedTCP)
	}
}

func TestClientIdleTimeoutClosesPooledConnections(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{IdleConnTimeout: 100 * time.Millisecond})
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "client closes its idle connection", func() bool { return srv.Stats().OpenTCP == 0 })
}

func TestTraceSeesTheRawWire(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	var sent, received bytes.Buffer
	var infos []client.ConnInfo
	ctx := client.WithTrace(testContext(t), &client.Trace{
		GotConn:  func(ci client.ConnInfo) { infos = append(infos, ci) },
		Sent:     func(p []byte) { sent.Write(p) },
		Received: func(p []byte) { received.Write(p) },
	})
	for range 2 {
		sent.Reset()
		received.Reset()
		if _, err := c.Do(ctx, request(t, agtp.MethodDiscover, "/", agtp.HeaderTaskID, "t-9"), srv.addr()); err != nil {
			t.Fatal(err)
		}
	}
	if want := "AGTP/1.0 DISCOVER /\r\nTask-ID: t-9\r\nContent-Length: 0\r\n\r\n"; sent.String() != want {
		t.Errorf("sent %q, want %q", sent.String(), want)
	}
	if want := "AGTP/1.0 200 OK\r\nContent-Type: text/plain\r\nTask-ID: t-9\r\nContent-Length: 11\r\n\r\nDISCOVER / "; received.String() != want {
		t.Errorf("received %q, want %q", received.String(), want)
	}
	if len(infos) != 2 || infos[0].Reused || !infos[1].Reused || infos[0].Transport != client.TransportTCP || infos[0].TLS.NegotiatedProtocol != agtp.ALPN {
		t.Errorf("conn infos %+v", infos)
	}
}

func TestUnknownAuthorityFailsTheHandshake(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c, err := client.New(client.Options{}) // system roots: the suite CA is unknown
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr())
	if err == nil || !strings.Contains(err.Error(), "TLS handshake") {
		t.Fatalf("err = %v, want a TLS handshake failure", err)
	}
	insecure := newClient(t, "", client.Options{InsecureSkipVerify: true})
	if _, err := insecure.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatalf("InsecureSkipVerify: %v", err)
	}
}

func TestClosedClientRefusesRequests(t *testing.T) {
	srv := startServer(t, transport.Options{DisableQUIC: true}, echo)
	c := newClient(t, srv.caFile, client.Options{})
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	testkit.WaitFor(t, 5*time.Second, "pooled connection closed", func() bool { return srv.Stats().OpenTCP == 0 })
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts client.Options
	}{
		{"cert without key", client.Options{CertFile: "c.pem"}},
		{"missing CA file", client.Options{CAFile: "/nonexistent/ca.pem"}},
		{"pipeline too deep", client.Options{MaxPipeline: 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := client.New(tc.opts); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestMutualTLSPresentsTheClientCertificate(t *testing.T) {
	pki := testkit.PKI(t)
	var seen atomic.Value
	srv := startServer(t, transport.Options{DisableQUIC: true, ClientCAFile: pki.CA()}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if len(ci.TLS.PeerCertificates) > 0 {
			seen.Store(ci.TLS.PeerCertificates[0].Subject.CommonName)
		}
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{CertFile: pki.Cert("admin"), KeyFile: pki.Key("admin")})
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/"), srv.addr()); err != nil {
		t.Fatal(err)
	}
	if got, _ := seen.Load().(string); got == "" {
		t.Fatal("server saw no client certificate")
	}
}
