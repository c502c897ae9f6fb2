package client_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/agtpquic"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/testkit"
	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := testkit.Cleaned(m).Run()
	exampleCleanup()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// testServer is the front door's real AGTP transport (TLS/TCP and QUIC
// on one port number) with a test handler.
type testServer struct {
	*transport.Server
	caFile string
}

func (s *testServer) addr() string     { return s.TCPAddr().String() }
func (s *testServer) quicAddr() string { return s.QUICAddr().String() }

func startServer(t testing.TB, opts transport.Options, h transport.HandlerFunc) *testServer {
	t.Helper()
	pki := testkit.PKI(t)
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	opts.CertFile, opts.KeyFile = pki.Cert("agtp-server"), pki.Key("agtp-server")
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := transport.New(opts, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		<-done
	})
	return &testServer{Server: s, caFile: pki.CA()}
}

// echo answers 200 with "METHOD PATH?QUERY BODY" as a text body and the
// request's Agent-ID and Task-ID copied into the response.
func echo(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
	target := req.Path
	if req.RawQuery != "" {
		target += "?" + req.RawQuery
	}
	resp := agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(req.Method+" "+target+" "+string(req.Body)))
	for _, name := range []string{agtp.HeaderAgentID, agtp.HeaderTaskID, agtp.HeaderAuthorityScope} {
		if v, ok := req.Header.Lookup(name); ok {
			resp.Header.Set(name, v)
		}
	}
	return resp
}

func newClient(t testing.TB, caFile string, opts client.Options) *client.Client {
	t.Helper()
	if opts.CAFile == "" && opts.RootCAs == nil && !opts.InsecureSkipVerify {
		opts.CAFile = caFile
	}
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func request(t testing.TB, method, target string, hdr ...string) *agtp.Request {
	t.Helper()
	req, err := agtp.NewRequest(method, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return req
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawServer is a TLS/TCP AGTP server whose connection loop the test
// writes, for behaviour the real transport does not show (streamed
// series, closing at chosen moments, broken responses).
type rawServer struct {
	ln     net.Listener
	caFile string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	accept int
}

// serveConn handles one connection; n counts connections from 0.
type serveConn func(n int, conn net.Conn, br *bufio.Reader, bw *bufio.Writer)

func startRawServer(t testing.TB, serve serveConn) *rawServer {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", agtp.ServerTLSConfig(cert))
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, caFile: pki.CA()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			n := s.accept
			s.accept++
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(20 * time.Second))
				serve(n, conn, bufio.NewReader(conn), bufio.NewWriter(conn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) addr() string { return s.ln.Addr().String() }

func (s *rawServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accept
}

// answer reads requests and answers each with f until the client goes.
func answer(f func(req *agtp.Request) []*agtp.Response) serveConn {
	return func(_ int, _ net.Conn, br *bufio.Reader, bw *bufio.Writer) {
		for {
			req, err := agtp.ReadRequest(br, agtp.Limits{})
			if err != nil {
				return
			}
			for _, resp := range f(req) {
				if resp.Write(bw) != nil || bw.Flush() != nil {
					return
				}
			}
		}
	}
}

// series returns n text responses, all but the last marked to continue.
func series(n int, prefix string) []*agtp.Response {
	out := make([]*agtp.Response, n)
	for i := range out {
		out[i] = agtp.NewResponse(agtp.StatusOK, "text/plain", []byte(prefix+string(rune('1'+i))))
		if i < n-1 {
			out[i].Header.Set(agtp.HeaderStream, agtp.StreamContinue)
		}
	}
	return out
}

// startRawQUIC is a QUIC AGTP server answering each stream with f.
func startRawQUIC(t testing.TB, f func(req *agtp.Request) []*agtp.Response) (addr, caFile string) {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("agtp-server"), pki.Key("agtp-server"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", agtp.ServerTLSConfig(cert), agtpquic.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.CloseWithError(0, "")
				for {
					str, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					req, err := agtp.ReadRequest(bufio.NewReader(str), agtp.Limits{})
					if err != nil {
						str.CancelRead(1)
						str.CancelWrite(1)
						continue
					}
					bw := bufio.NewWriter(str)
					for _, resp := range f(req) {
						resp.Write(bw)
						bw.Flush()
					}
					str.Close()
				}
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), pki.CA()
}
