package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"
)

var verboseLog = flag.Bool("transport.log", false, "log server events at debug level to stderr")

func TestMain(m *testing.M) {
	if os.Getenv(idleClientEnv) != "" {
		os.Exit(runIdleClients())
	}
	goleak.VerifyTestMain(testkit.Cleaned(m))
}

func testLogger() *slog.Logger {
	if *verboseLog {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testCerts copies the test PKI's server certificate into a directory of
// the test's own, so reload tests can rewrite it.
type testCerts struct {
	dir, cert, key string
	ca             *x509.CertPool
	caFile         string
}

func newTestCerts(t testing.TB) testCerts {
	t.Helper()
	pki := testkit.PKI(t)
	dir := t.TempDir()
	tc := testCerts{dir: dir, cert: filepath.Join(dir, "server.pem"), key: filepath.Join(dir, "server-key.pem"), caFile: pki.CA()}
	copyFile(t, pki.Cert("agtp-server"), tc.cert)
	copyFile(t, pki.Key("agtp-server"), tc.key)
	pem, err := os.ReadFile(pki.CA())
	if err != nil {
		t.Fatal(err)
	}
	tc.ca = x509.NewCertPool()
	tc.ca.AppendCertsFromPEM(pem)
	return tc
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (tc testCerts) clientTLS(certs ...tls.Certificate) *tls.Config {
	c := agtp.ClientTLSConfig("localhost", tc.ca, certs...)
	return c
}

// echo answers 200 with "METHOD PATH" as the body, and records ConnInfo.
func echo() HandlerFunc {
	return func(_ context.Context, _ *ConnInfo, req *agtp.Request) *agtp.Response {
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte(strconv.Quote(req.Method+" "+req.Path)))
	}
}

type testServer struct {
	*Server
	certs testCerts
	done  chan error
}

// startServer runs a server on loopback with opts (Addr, certificate and
// logger filled in) and drains it when the test ends.
func startServer(t testing.TB, opts Options, h Handler) *testServer {
	t.Helper()
	certs := newTestCerts(t)
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.CertFile == "" {
		opts.CertFile, opts.KeyFile = certs.cert, certs.key
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	s, err := New(opts, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, certs: certs, done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case <-ts.done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Shutdown")
		}
	})
	return ts
}

func (ts *testServer) dial(t testing.TB, conf *tls.Config) *tls.Conn {
	t.Helper()
	if conf == nil {
		conf = ts.certs.clientTLS()
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ts.TCPAddr().String(), conf)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// client is a minimal AGTP client over one connection.
type client struct {
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
}

func newClient(c net.Conn) *client {
	return &client{conn: c, br: bufio.NewReader(c), bw: bufio.NewWriter(c)}
}

func (c *client) send(t testing.TB, method, target string, hdr ...string) {
	t.Helper()
	req, err := agtp.NewRequest(method, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if err := req.Write(c.bw); err != nil {
		t.Fatal(err)
	}
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (c *client) recv(t testing.TB) *agtp.Response {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := agtp.ReadResponse(c.br, agtp.Limits{})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp
}

func (c *client) roundTrip(t testing.TB, method, target string, hdr ...string) *agtp.Response {
	t.Helper()
	c.send(t, method, target, hdr...)
	return c.recv(t)
}

// expectClosed asserts that the server closes the connection within d.
func expectClosed(t testing.TB, c net.Conn, br io.Reader, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	if br == nil {
		br = c
	}
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", d)
	}
}

func errorBody(t testing.TB, resp *agtp.Response) agtp.ErrorBody {
	t.Helper()
	var eb agtp.ErrorBody
	if err := eb.UnmarshalJSON(resp.Body); err != nil {
		t.Fatalf("error body %q: %v", resp.Body, err)
	}
	return eb
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, what, cond)
}

// gate is a handler path that blocks until released, for tests of work in
// flight.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// quicDial opens a QUIC connection to the server.
func (ts *testServer) quicDial(t testing.TB, conf *tls.Config) *quic.Conn {
	t.Helper()
	if conf == nil {
		conf = ts.certs.clientTLS()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, ts.QUICAddr().String(), conf, &quic.Config{})
	if err != nil {
		t.Fatalf("quic dial: %v", err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

// quicRoundTrip sends raw request bytes on a new stream, closes the
// stream's write side, and reads one response and then the server's FIN.
func quicRoundTrip(t testing.TB, qc *quic.Conn, raw []byte) *agtp.Response {
	t.Helper()
	resp, err := quicRoundTripErr(qc, raw)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func quicRoundTripErr(qc *quic.Conn, raw []byte) (*agtp.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	str.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := str.Write(raw); err != nil {
		return nil, err
	}
	str.Close()
	br := bufio.NewReader(str)
	resp, err := agtp.ReadResponse(br, agtp.Limits{})
	if err != nil {
		return nil, err
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("stream not closed after the response: " + errString(err))
	}
	return resp, nil
}

func errString(err error) string {
	if err == nil {
		return "more data"
	}
	return err.Error()
}

func rawRequest(t testing.TB, method, target string, hdr ...string) []byte {
	t.Helper()
	req, err := agtp.NewRequest(method, target)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	var b bytesBuffer
	bw := bufio.NewWriter(&b)
	if err := req.Write(bw); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	return b.b
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
