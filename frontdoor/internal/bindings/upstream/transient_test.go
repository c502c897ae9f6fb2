package upstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
)

// TestFailureClasses: what the upstream answered about the call itself is
// a 422 the front door may store under the Idempotency-Key; a failure
// that says nothing about the call (no answer in time, no connection, the
// upstream's own failure, rate limit or refusal of this server's
// credentials) is a Transient 502 or 504, which a retry runs again; a 2xx
// that cannot be read is a 502 that is not transient (the upstream acted).
func TestFailureClasses(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := strings.TrimPrefix(r.URL.Path, "/"); p {
		case "slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "html":
			_, _ = io.WriteString(w, "<html></html>")
		default:
			code, _ := strconv.Atoi(p)
			w.WriteHeader(code)
		}
	}))
	e := newExecutor(t, func(o *upstream.Options) { o.Breaker.FailureThreshold = 100 })
	refused, _ := flakyListener(t)
	for _, tc := range []struct {
		name      string
		url       string
		errorMap  map[string]string
		want      string
		status    int
		transient bool
	}{
		{name: "a mapped 404 is the endpoint's error", url: srv.URL + "/404", errorMap: map[string]string{"404": "room_not_found"}, want: "room_not_found"},
		{name: "an unmapped 409 is the upstream's answer", url: srv.URL + "/409", want: upstream.ErrUpstream},
		{name: "an unmapped 400 is the upstream's answer", url: srv.URL + "/400", want: upstream.ErrUpstream},
		{name: "no answer in time", url: srv.URL + "/slow", want: upstream.ErrTimeout, status: 504, transient: true},
		{name: "no connection", url: "https://" + refused + "/x", want: upstream.ErrConnection, status: 502, transient: true},
		{name: "an upstream 500", url: srv.URL + "/500", want: upstream.ErrUpstream, status: 502, transient: true},
		{name: "an upstream 503", url: srv.URL + "/503", want: upstream.ErrUpstream, status: 502, transient: true},
		{name: "an upstream 504", url: srv.URL + "/504", want: upstream.ErrUpstream, status: 504, transient: true},
		{name: "an upstream 408", url: srv.URL + "/408", want: upstream.ErrUpstream, status: 504, transient: true},
		{name: "an upstream 429", url: srv.URL + "/429", want: upstream.ErrUpstream, status: 502, transient: true},
		{name: "this server's credentials refused", url: srv.URL + "/401", want: upstream.ErrAuthentication, status: 502, transient: true},
		{name: "a mapped 503 keeps its name", url: srv.URL + "/503", errorMap: map[string]string{"503": "room_not_found"}, want: "room_not_found", status: 502, transient: true},
		{name: "an unreadable 2xx is not known to have failed", url: srv.URL + "/html", want: upstream.ErrMalformed, status: 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timeout := 5.0
			if strings.HasSuffix(tc.url, "/slow") {
				timeout = 0.2
			}
			_, err := e.Call(testCtx(t), binding{url: tc.url, errorMap: tc.errorMap, timeout: timeout}.def(), call(`{}`))
			var he *handler.Error
			if !errors.As(err, &he) {
				t.Fatalf("err = %v, want a declared error", err)
			}
			if he.Name != tc.want || he.Status != tc.status || bindings.IsTransient(err) != tc.transient {
				t.Fatalf("= %s status %d transient %v; want %s status %d transient %v",
					he.Name, he.Status, bindings.IsTransient(err), tc.want, tc.status, tc.transient)
			}
		})
	}
	t.Run("an open circuit", func(t *testing.T) {
		tripped := newExecutor(t, func(o *upstream.Options) { o.Breaker.FailureThreshold = 1 })
		b := binding{url: srv.URL + "/500"}
		_, _ = tripped.Call(testCtx(t), b.def(), call(`{}`))
		_, err := tripped.Call(testCtx(t), b.def(), call(`{}`))
		var he *handler.Error
		if !errors.As(err, &he) || he.Name != upstream.ErrConnection || he.Status != 502 || !bindings.IsTransient(err) {
			t.Fatalf("open circuit = %v, want a transient 502 %s", err, upstream.ErrConnection)
		}
	})
}

// TestTruncated2xxIsNotTransient: an upstream that answered 2xx has acted,
// so a body that breaks off or stalls after the status is
// upstream_malformed_response, a 502 that is not transient (the
// Idempotency-Key is held as unknown, docs/bindings.md "What is
// replayed"). It is not sent again, even to an idempotent endpoint, and
// the circuit breaker does not count it as a failure. The same holds for
// the event stream of an MCP server bound as an external service.
func TestTruncated2xxIsNotTransient(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var calls atomic.Int32
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stalls := strings.HasSuffix(r.URL.Path, "/stalls")
		if strings.HasPrefix(r.URL.Path, "/mcp/") {
			var msg upstream.RPCMessage
			_ = json.NewDecoder(r.Body).Decode(&msg)
			switch msg.Method {
			case "initialize":
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}}}}`, msg.ID)
				return
			case "notifications/initialized":
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
		} else {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"confirmation_code":"`)
		}
		calls.Add(1)
		w.(http.Flusher).Flush()
		if stalls {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		panic(http.ErrAbortHandler) // the body breaks off after the 200
	}))
	for _, path := range []string{"/book/breaks-off", "/book/stalls", "/mcp/breaks-off", "/mcp/stalls"} {
		for _, idempotent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, idempotent %v", path[1:], idempotent), func(t *testing.T) {
				b := binding{url: srv.URL + path, idempotent: idempotent, timeout: 0.2}
				send := func(e *upstream.Executor) error {
					if strings.HasPrefix(path, "/mcp/") {
						_, err := e.CallMCP(testCtx(t), b.def(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"book"}}`), "book-1")
						return err
					}
					c := call(`{}`)
					c.IdempotencyKey = "book-1"
					_, err := e.Call(testCtx(t), b.def(), c)
					return err
				}
				calls.Store(0)
				err := send(newExecutor(t, func(o *upstream.Options) { o.Breaker.FailureThreshold = 100 }))
				var he *handler.Error
				if !errors.As(err, &he) {
					t.Fatalf("err = %v, want a declared error", err)
				}
				if he.Name != upstream.ErrMalformed || he.Status != http.StatusBadGateway || bindings.IsTransient(err) || calls.Load() != 1 {
					t.Errorf("got %s status %d transient %v after %d upstream calls; want %s status 502, not transient, 1 call",
						he.Name, he.Status, bindings.IsTransient(err), calls.Load(), upstream.ErrMalformed)
				}
				// A breaker that opens on one failure stays closed.
				tripwire := newExecutor(t, func(o *upstream.Options) { o.Breaker.FailureThreshold = 1 })
				_ = send(tripwire)
				if s := tripwire.CircuitState(srv.URL); s != upstream.CircuitClosed {
					t.Errorf("circuit %s after an upstream that answered 200, want closed", s)
				}
			})
		}
	}
}

// TestIdempotencyKeyGoesUpstream: the request's Idempotency-Key reaches
// the upstream in the binding's idempotency header (Idempotency-Key by
// default), on every attempt, over HTTP and as gRPC metadata; a request
// without a key sends none.
func TestIdempotencyKeyGoesUpstream(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		n := len(seen)
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/flaky") && n%2 == 1 {
			w.WriteHeader(503)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	e := newExecutor(t, nil)
	for _, tc := range []struct {
		name, header, key, path string
		idempotent              bool
		wantHeader              string
		attempts                int
	}{
		{name: "default header", key: "order-7", path: "/ok", wantHeader: "Idempotency-Key", attempts: 1},
		{name: "named header", header: "x-request-key", key: "order-8", path: "/ok", wantHeader: "X-Request-Key", attempts: 1},
		{name: "every attempt", key: "order-9", path: "/flaky", idempotent: true, wantHeader: "Idempotency-Key", attempts: 2},
		{name: "no key", path: "/ok", wantHeader: "Idempotency-Key", attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			c := call(`{}`)
			c.IdempotencyKey = tc.key
			b := binding{url: srv.URL + tc.path, idemHeader: tc.header, idempotent: tc.idempotent,
				headers: map[string]string{"Idempotency-Key": "static"}}
			if tc.header != "" {
				b.headers = nil
			}
			if _, err := e.Call(testCtx(t), b.def(), c); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tc.attempts {
				t.Fatalf("%d attempts, want %d", len(seen), tc.attempts)
			}
			for _, h := range seen {
				want := tc.key
				if tc.key == "" && tc.header == "" {
					want = "static" // the binding's own header stands
				}
				if got := h.Get(tc.wantHeader); got != want {
					t.Fatalf("%s = %q, want %q", tc.wantHeader, got, want)
				}
			}
		})
	}
	t.Run("gRPC metadata", func(t *testing.T) {
		got := make(chan []string, 1)
		addr := grpcUpstream(t, func(_ string, md metadata.MD, _ *structpb.Struct, _ grpc.ServerStream) (*structpb.Struct, error) {
			got <- md.Get("x-request-key")
			return structpb.NewStruct(map[string]any{})
		})
		c := call(`{}`)
		c.IdempotencyKey = "order-10"
		b := binding{url: "https://" + addr + "/rooms.v1.Rooms/Get", idemHeader: "X-Request-Key",
			headers: map[string]string{"Content-Type": "application/grpc"}}
		if _, err := e.Call(testCtx(t), b.def(), c); err != nil {
			t.Fatal(err)
		}
		if v := <-got; len(v) != 1 || v[0] != "order-10" {
			t.Fatalf("metadata x-request-key = %v, want order-10", v)
		}
	})
	t.Run("an identity header is refused", func(t *testing.T) {
		_, err := e.Call(testCtx(t), binding{url: srv.URL + "/ok", idemHeader: "Agent-ID"}.def(), call(`{}`))
		if !errors.Is(err, upstream.ErrBinding) {
			t.Fatalf("err = %v, want ErrBinding", err)
		}
	})
}
