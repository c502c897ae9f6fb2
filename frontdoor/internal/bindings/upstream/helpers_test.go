package upstream_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/services/testkit"
)

// serverTLS is a TLS config with a certificate from the test PKI (SANs
// 127.0.0.1 and localhost), which the executor trusts through CAFile.
func serverTLS(t testing.TB, protos ...string) *tls.Config {
	t.Helper()
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("frontdoor"), pki.Key("frontdoor"))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: protos, MinVersion: tls.VersionTLS12}
}

// startUpstream serves h over HTTPS on loopback.
func startUpstream(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = serverTLS(t, "h2", "http/1.1")
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func newExecutor(t testing.TB, mod func(*upstream.Options)) *upstream.Executor {
	t.Helper()
	opts := upstream.Options{
		CAFile:       testkit.PKI(t).CA(),
		Log:          slog.New(slog.DiscardHandler),
		RetryBackoff: time.Millisecond, RetryBackoffMax: 5 * time.Millisecond,
		LookupEnv: func(name string) (string, bool) {
			v, ok := map[string]string{"TOKEN": "s3cret", "UPSTREAM_HOST": "127.0.0.1"}[name]
			return v, ok
		},
	}
	if mod != nil {
		mod(&opts)
	}
	e, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// binding is an external_service endpoint definition.
type binding struct {
	url, method string
	headers     map[string]string
	inTr, outTr map[string]string
	errorMap    map[string]string
	timeout     float64
	idempotent  bool
	idemHeader  string
}

func (b binding) def() *endpoint.Definition {
	idem := b.idempotent
	d := &endpoint.Definition{
		Method: "QUERY", Path: "/rooms/{room_id}",
		Semantic: endpoint.Semantic{IsIdempotent: &idem, Impact: "informational"},
		Errors:   append([]string{"room_not_found"}, endpoint.UpstreamErrors...),
		Handler: endpoint.Handler{Type: endpoint.HandlerExternalService, URL: b.url, Method: b.method, Headers: b.headers,
			InputTransform: b.inTr, OutputTransform: b.outTr, ErrorMap: b.errorMap, IdempotencyHeader: b.idemHeader},
	}
	if d.Handler.Method == "" {
		d.Handler.Method = http.MethodPost
	}
	if b.timeout > 0 {
		d.Handler.TimeoutSeconds = &b.timeout
	}
	return d
}

func call(input string) *handler.Call {
	return &handler.Call{Method: "QUERY", Input: json.RawMessage(input), Caller: handler.Caller{AgentID: "a"}}
}

// errName is the declared error name of err, or "" for success.
func errName(t testing.TB, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var he *handler.Error
	if !errors.As(err, &he) {
		t.Fatalf("not a declared error: %v", err)
	}
	return he.Name
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// flakyListener accepts connections and closes them at once: a
// connection error an idempotent call retries.
func flakyListener(t testing.TB) (addr string, accepts func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			_ = c.Close()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}
