package client_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestQUICRoundTripsShareOneConnection(t *testing.T) {
	srv := startServer(t, transport.Options{}, echo)
	c := newClient(t, srv.caFile, client.Options{QUIC: true, AgentID: agentA})
	ctx := testContext(t)
	var infos []client.ConnInfo
	tctx := client.WithTrace(ctx, &client.Trace{GotConn: func(ci client.ConnInfo) { infos = append(infos, ci) }})
	for i := range 10 {
		req := request(t, agtp.MethodExecute, fmt.Sprintf("/orders/%d", i))
		req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
		req.Body = []byte(`{}`)
		resp, err := c.Do(tctx, req, srv.quicAddr())
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := fmt.Sprintf("EXECUTE /orders/%d {}", i); string(resp.Body) != want || resp.Header.Get(agtp.HeaderAgentID) != agentA {
			t.Fatalf("request %d: %q", i, resp.Body)
		}
	}
	st := srv.Stats()
	if st.AcceptedQUIC != 1 || st.RequestsQUIC != 10 || st.AcceptedTCP != 0 {
		t.Fatalf("QUIC connections %d, requests %d, TCP %d; want 1, 10, 0", st.AcceptedQUIC, st.RequestsQUIC, st.AcceptedTCP)
	}
	if infos[0].Transport != client.TransportQUIC || infos[0].Reused || !infos[9].Reused || infos[0].TLS.NegotiatedProtocol != agtp.ALPN {
		t.Errorf("conn infos: first %+v, last reused %v", infos[0], infos[9].Reused)
	}
}

func TestQUICConcurrentRequests(t *testing.T) {
	srv := startServer(t, transport.Options{}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		time.Sleep(10 * time.Millisecond)
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{QUIC: true})
	ctx := testContext(t)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 20 {
		wg.Go(func() {
			path := fmt.Sprintf("/c/%d", i)
			resp, err := c.Do(ctx, request(t, agtp.MethodQuery, path), srv.quicAddr())
			if err != nil || string(resp.Body) != "QUERY "+path+" " {
				t.Errorf("%s: %v %v", path, err, resp)
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if st := srv.Stats(); failed.Load() == 0 && st.AcceptedQUIC != 1 {
		t.Errorf("accepted %d QUIC connections for concurrent requests, want 1", st.AcceptedQUIC)
	}
}

func TestQUICContextDeadline(t *testing.T) {
	srv := startServer(t, transport.Options{}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if req.Path == "/slow" {
			select {
			case <-ctx.Done(): // the client reset the stream
			case <-time.After(2 * time.Second):
			}
		}
		return echo(ctx, ci, req)
	})
	c := newClient(t, srv.caFile, client.Options{QUIC: true})
	ctx, cancel := context.WithTimeout(testContext(t), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Do(ctx, request(t, agtp.MethodQuery, "/slow"), srv.quicAddr())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("returned after %v", d)
	}
	// Only the stream was given up: the connection serves the next one.
	if _, err := c.Do(testContext(t), request(t, agtp.MethodQuery, "/fast"), srv.quicAddr()); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.AcceptedQUIC != 1 {
		t.Errorf("accepted %d QUIC connections, want 1", st.AcceptedQUIC)
	}
}

func TestQUICRedialsAfterTheConnectionEnds(t *testing.T) {
	srv := startServer(t, transport.Options{IdleTimeout: 150 * time.Millisecond}, echo)
	c := newClient(t, srv.caFile, client.Options{QUIC: true})
	ctx := testContext(t)
	if _, err := c.Do(ctx, request(t, agtp.MethodQuery, "/"), srv.quicAddr()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "server idle close", func() bool { return srv.Stats().OpenQUIC == 0 })
	time.Sleep(50 * time.Millisecond) // let the CONNECTION_CLOSE arrive
	if _, err := c.Do(ctx, request(t, agtp.MethodExecute, "/"), srv.quicAddr()); err != nil {
		t.Fatalf("after idle close: %v", err)
	}
	if st := srv.Stats(); st.AcceptedQUIC != 2 {
		t.Errorf("accepted %d QUIC connections, want 2", st.AcceptedQUIC)
	}
}

// 0-RTT needs a session ticket from an earlier connection; clients that
// share a session cache resume. Only QUERY and DISCOVER may go in early
// data; other methods wait for the handshake.
//
// Under -race on a loaded machine this test can, rarely, report a data
// race inside quic-go itself: a stream opened in 0-RTT reads the peer's
// transport parameters while the connection's goroutine stores the ones
// the handshake just brought, a race quic-go's maintainers know of and
// have not fixed. Both sides are quic-go's; the client opens the stream
// as quic-go documents for early data.
func TestQUIC0RTTOnlyForQueryAndDiscover(t *testing.T) {
	var early sync.Map
	srv := startServer(t, transport.Options{}, func(ctx context.Context, ci *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		early.Store(req.Method, ci.EarlyData)
		return echo(ctx, ci, req)
	})
	cache := tls.NewLRUClientSessionCache(8)
	resume := func(method string) client.ConnInfo {
		t.Helper()
		c := newClient(t, srv.caFile, client.Options{QUIC: true, TLS: &tls.Config{ClientSessionCache: cache}})
		var info client.ConnInfo
		ctx := client.WithTrace(testContext(t), &client.Trace{GotConn: func(ci client.ConnInfo) { info = ci }})
		resp, err := c.Do(ctx, request(t, method, "/"), srv.quicAddr())
		if err != nil || resp.Status != 200 {
			t.Fatalf("%s: %v %v", method, err, resp)
		}
		c.Close()
		return info
	}
	resume(agtp.MethodDescribe) // first contact: gets a ticket
	// Whether the server reads the request before the handshake
	// completes is a race on its side even when the client sent it
	// early, so try a few resumptions.
	testkit.WaitFor(t, 5*time.Second, "QUERY served from 0-RTT data", func() bool {
		early.Delete(agtp.MethodQuery)
		info := resume(agtp.MethodQuery)
		v, _ := early.Load(agtp.MethodQuery)
		return info.EarlyData && v == true
	})
	if info := resume(agtp.MethodExecute); info.EarlyData {
		t.Errorf("EXECUTE was sent in 0-RTT data")
	}
	if v, _ := early.Load(agtp.MethodExecute); v != false {
		t.Errorf("server saw EXECUTE as early data")
	}
	if st := srv.Stats(); st.TooEarly != 0 {
		t.Errorf("server answered %d requests 425", st.TooEarly)
	}
}

func TestStreamedSeries(t *testing.T) {
	quicAddr, caFile := startRawQUIC(t, func(req *agtp.Request) []*agtp.Response { return series(3, req.Path+"#") })
	tcp := startRawServer(t, answer(func(req *agtp.Request) []*agtp.Response { return series(3, req.Path+"#") }))
	for _, tc := range []struct {
		name string
		opts client.Options
		addr string
	}{
		{"tcp", client.Options{}, tcp.addr()},
		{"quic", client.Options{QUIC: true}, quicAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, caFile, tc.opts)
			ctx := testContext(t)
			s, err := c.Stream(ctx, request(t, agtp.MethodSummarize, "/s"), tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for {
				resp, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, string(resp.Body))
			}
			s.Close()
			if fmt.Sprint(parts) != "[/s#1 /s#2 /s#3]" {
				t.Fatalf("parts %v", parts)
			}
			if _, err := s.Next(); err != io.EOF {
				t.Errorf("Next after the end: %v, want io.EOF", err)
			}
			// Do reads the whole series and returns the last part, and
			// the connection is in step for the next request.
			resp, err := c.Do(ctx, request(t, agtp.MethodSummarize, "/d"), tc.addr)
			if err != nil || string(resp.Body) != "/d#3" {
				t.Fatalf("Do: %v %v", err, resp)
			}
			resp, err = c.Do(ctx, request(t, agtp.MethodSummarize, "/e"), tc.addr)
			if err != nil || string(resp.Body) != "/e#3" {
				t.Fatalf("Do after Do: %v %v", err, resp)
			}
		})
	}
	if tcp.accepted() != 1 {
		t.Errorf("TCP: %d connections for three complete series, want 1", tcp.accepted())
	}
}

func TestStreamClosedEarlyCostsTheConnection(t *testing.T) {
	srv := startRawServer(t, answer(func(req *agtp.Request) []*agtp.Response { return series(3, req.Path) }))
	c := newClient(t, srv.caFile, client.Options{})
	ctx := testContext(t)
	s, err := c.Stream(ctx, request(t, agtp.MethodSummarize, "/a"), srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	resp, err := c.Do(ctx, request(t, agtp.MethodSummarize, "/b"), srv.addr())
	if err != nil || string(resp.Body) != "/b3" {
		t.Fatalf("after an abandoned series: %v %v (parts of /a leaked into /b?)", err, resp)
	}
	if srv.accepted() != 2 {
		t.Errorf("%d connections, want 2", srv.accepted())
	}
}

func TestStreamEndingMidSeriesIsUnexpectedEOF(t *testing.T) {
	srv := startRawServer(t, func(_ int, _ net.Conn, br *bufio.Reader, bw *bufio.Writer) {
		if _, err := agtp.ReadRequest(br, agtp.Limits{}); err != nil {
			return
		}
		for _, resp := range series(3, "x")[:2] {
			resp.Write(bw)
		}
		bw.Flush() // and close, mid-series
	})
	c := newClient(t, srv.caFile, client.Options{})
	s, err := c.Stream(testContext(t), request(t, agtp.MethodSummarize, "/"), srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		if _, err := s.Next(); err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
	}
	if _, err := s.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("third Next = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestDoBoundsTheSeriesLength(t *testing.T) {
	srv := startRawServer(t, answer(func(req *agtp.Request) []*agtp.Response { return series(10, "x") }))
	c := newClient(t, srv.caFile, client.Options{MaxSeries: 4})
	if _, err := c.Do(testContext(t), request(t, agtp.MethodSummarize, "/"), srv.addr()); !errors.Is(err, client.ErrSeriesTooLong) {
		t.Fatalf("err = %v, want ErrSeriesTooLong", err)
	}
}
