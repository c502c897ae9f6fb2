package upstream_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
	"github.com/agtpsuite/agtp/services/testkit"
)

// AGTP-API §12.3: input_transform renames on the way up, output_transform
// is inverted on the way back, ${VAR} comes from the lookup, identity is
// never forwarded, and the trace context goes upstream.
func TestCallTransformsResolvesPlaceholdersAndPropagatesTrace(t *testing.T) {
	var got struct {
		body          map[string]any
		auth, traceID string
		agentID       string
		method        string
	}
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method = r.Method
		got.auth = r.Header.Get("Authorization")
		got.traceID = r.Header.Get("Traceparent")
		got.agentID = r.Header.Get("Agent-ID")
		_ = json.NewDecoder(r.Body).Decode(&got.body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"confirmationNumber":"C-17","nights":2}`)
	}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := newExecutor(t, func(o *upstream.Options) {
		o.TracerProvider, o.Propagator = tp, propagation.TraceContext{}
	})
	b := binding{url: strings.Replace(srv.URL, "127.0.0.1", "${UPSTREAM_HOST}", 1) + "/bookings", headers: map[string]string{"Authorization": "Bearer ${TOKEN}"},
		inTr: map[string]string{"guest_id": "guestId"}, outTr: map[string]string{"confirmation_code": "confirmationNumber"}}
	ctx, span := tp.Tracer("test").Start(testCtx(t), "parent")
	res, err := e.Call(ctx, b.def(), call(`{"guest_id":"g-1","nights":2}`))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"confirmation_code":"C-17","nights":2}` {
		t.Errorf("output %s", res.Output)
	}
	if got.method != http.MethodPost || got.body["guestId"] != "g-1" || got.body["guest_id"] != nil {
		t.Errorf("upstream saw %s %v", got.method, got.body)
	}
	if got.auth != "Bearer s3cret" {
		t.Errorf("Authorization %q: ${TOKEN} not resolved", got.auth)
	}
	if got.agentID != "" {
		t.Error("Agent-ID was forwarded")
	}
	if want := span.SpanContext().TraceID().String(); !strings.Contains(got.traceID, want) {
		t.Errorf("traceparent %q does not continue trace %s", got.traceID, want)
	}
	if n := len(rec.Ended()); n != 2 {
		t.Errorf("%d spans, want the parent and one client span", n)
	}
}

// GET sends the input as query parameters, and {param}s in the URL are
// filled from the input, percent-encoded.
func TestGETFillsURLParametersAndQuery(t *testing.T) {
	var path, rawPath, query string
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, rawPath, query = r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery
		_, _ = io.WriteString(w, `{}`)
	}))
	e := newExecutor(t, nil)
	b := binding{url: srv.URL + "/rooms/{room_id}?v=1", method: http.MethodGet}
	if _, err := e.Call(testCtx(t), b.def(), call(`{"room_id":"a/b c","tags":["x","y"],"n":3}`)); err != nil {
		t.Fatal(err)
	}
	if path != "/rooms/a/b c" || rawPath != "/rooms/a%2Fb%20c" {
		t.Errorf("path %q (%q): the parameter must stay one segment", path, rawPath)
	}
	if query != "n=3&tags=x&tags=y&v=1" {
		t.Errorf("query %q", query)
	}
}

// AGTP-API §12.3 failure mapping (api assertions 74, 75).
func TestFailureMapping(t *testing.T) {
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/404":
			w.WriteHeader(404)
		case "/409":
			w.WriteHeader(409)
		case "/401":
			w.WriteHeader(401)
		case "/403":
			w.WriteHeader(403)
		case "/500":
			w.WriteHeader(500)
		case "/302":
			http.Redirect(w, r, "https://example.invalid/", http.StatusFound)
		case "/html":
			_, _ = io.WriteString(w, "<html>hello</html>")
		case "/big":
			_, _ = io.WriteString(w, `{"x":"`+strings.Repeat("a", 2048)+`"}`)
		case "/slow":
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		case "/empty":
			w.WriteHeader(204)
		}
	}))
	e := newExecutor(t, func(o *upstream.Options) { o.MaxResponseBytes, o.Breaker.FailureThreshold = 1024, 100 })
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/404", "room_not_found", 404},
		{"/409", upstream.ErrUpstream, 409},
		{"/401", upstream.ErrAuthentication, 401},
		{"/403", upstream.ErrAuthentication, 403},
		{"/500", upstream.ErrUpstream, 500},
		{"/302", upstream.ErrUpstream, 302},
		{"/html", upstream.ErrMalformed, 0},
		{"/big", upstream.ErrMalformed, 0},
		{"/slow", upstream.ErrTimeout, 0},
		{"/empty", "", 0},
	} {
		t.Run(tc.path, func(t *testing.T) {
			b := binding{url: srv.URL + tc.path, errorMap: map[string]string{"404": "room_not_found"}, timeout: 0.2}
			res, err := e.Call(testCtx(t), b.def(), call(`{}`))
			if got := errName(t, err); got != tc.want {
				t.Fatalf("error %q, want %q", got, tc.want)
			}
			if tc.want == "" {
				if string(res.Output) != `{}` {
					t.Errorf("204 output %s", res.Output)
				}
				return
			}
			var he *handler.Error
			errors.As(err, &he)
			if tc.status != 0 {
				if d, _ := he.Details["details"].(map[string]any); d["upstream_status"] != tc.status {
					t.Errorf("details %v", he.Details)
				}
			}
			if strings.Contains(he.Message, "127.0.0.1") {
				t.Errorf("the message %q leaks the upstream's address", he.Message)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		addr, _ := flakyListener(t)
		b := binding{url: "https://" + addr + "/x"}
		if _, err := e.Call(testCtx(t), b.def(), call(`{}`)); errName(t, err) != upstream.ErrConnection {
			t.Fatalf("%v", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		plain := newExecutor(t, func(o *upstream.Options) { o.CAFile = "" })
		b := binding{url: srv.URL + "/404", idempotent: true}
		if _, err := plain.Call(testCtx(t), b.def(), call(`{}`)); errName(t, err) != upstream.ErrConnection {
			t.Fatalf("%v", err)
		}
	})
}

// timeout_seconds is bounded by the request's deadline.
func TestTimeoutBoundedByRequestDeadline(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	e := newExecutor(t, nil)
	ctx, cancel := context.WithTimeout(testCtx(t), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Call(ctx, binding{url: srv.URL, timeout: 30}.def(), call(`{}`))
	if errName(t, err) != upstream.ErrTimeout {
		t.Fatalf("%v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v: the request deadline did not bound the 30 s timeout", d)
	}
}

// Retries happen only for idempotent endpoints, only on 502/503/504 and
// connection errors, and at most MaxAttempts times.
func TestRetriesOnlyIdempotentAndBounded(t *testing.T) {
	var hits atomic.Int32
	var plan atomic.Value // func(n int32) int
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := hits.Add(1)
		st := plan.Load().(func(int32) int)(n)
		w.WriteHeader(st)
		if st == 200 {
			_, _ = io.WriteString(w, `{"ok":true}`)
		}
	}))
	e := newExecutor(t, func(o *upstream.Options) { o.MaxAttempts, o.Breaker.FailureThreshold = 3, 100 })
	for _, tc := range []struct {
		name       string
		idempotent bool
		plan       func(int32) int
		hits       int32
		want       string
	}{
		{"idempotent recovers", true, func(n int32) int { return map[bool]int{true: 503, false: 200}[n < 3] }, 3, ""},
		{"idempotent gives up", true, func(int32) int { return 502 }, 3, upstream.ErrUpstream},
		{"idempotent 504 retried", true, func(n int32) int { return map[bool]int{true: 504, false: 200}[n < 2] }, 2, ""},
		{"not idempotent", false, func(n int32) int { return map[bool]int{true: 503, false: 200}[n < 3] }, 1, upstream.ErrUpstream},
		{"500 is not retried", true, func(int32) int { return 500 }, 1, upstream.ErrUpstream},
		{"429 is not retried", true, func(int32) int { return 429 }, 1, upstream.ErrUpstream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			plan.Store(tc.plan)
			_, err := e.Call(testCtx(t), binding{url: srv.URL + "/" + tc.name, idempotent: tc.idempotent}.def(), call(`{}`))
			if errName(t, err) != tc.want || hits.Load() != tc.hits {
				t.Fatalf("error %v after %d calls; want %q after %d", err, hits.Load(), tc.want, tc.hits)
			}
		})
	}
	t.Run("connection errors", func(t *testing.T) {
		for _, idem := range []bool{true, false} {
			addr, accepts := flakyListener(t)
			_, err := e.Call(testCtx(t), binding{url: "https://" + addr + "/x", idempotent: idem}.def(), call(`{}`))
			want := 1
			if idem {
				want = 3
			}
			if errName(t, err) != upstream.ErrConnection || accepts() != want {
				t.Fatalf("idempotent=%v: %v after %d connections, want %d", idem, err, accepts(), want)
			}
		}
	})
}

// The breaker opens after FailureThreshold consecutive failures, refuses
// without calling while open, admits one probe after OpenFor, and closes
// on the probe's success (or opens again on its failure).
func TestCircuitBreaker(t *testing.T) {
	var hits atomic.Int32
	var status atomic.Int32
	status.Store(500)
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, `{}`)
	}))
	clock := testkit.NewClock(time.Unix(1_700_000_000, 0))
	e := newExecutor(t, func(o *upstream.Options) {
		o.Now = clock.Now
		o.Breaker = upstream.BreakerOptions{FailureThreshold: 3, OpenFor: time.Minute}
	})
	def := binding{url: srv.URL + "/x"}.def()
	callOnce := func() (string, *handler.Error) {
		_, err := e.Call(testCtx(t), def, call(`{}`))
		var he *handler.Error
		errors.As(err, &he)
		return errName(t, err), he
	}
	// A 4xx is the upstream working; it does not count.
	status.Store(404)
	for range 5 {
		callOnce()
	}
	if s := e.CircuitState(srv.URL); s != upstream.CircuitClosed {
		t.Fatalf("4xx answers opened the circuit: %s", s)
	}
	status.Store(500)
	for range 3 {
		if name, _ := callOnce(); name != upstream.ErrUpstream {
			t.Fatal(name)
		}
	}
	if s := e.CircuitState(srv.URL); s != upstream.CircuitOpen {
		t.Fatalf("state %s after 3 failures", s)
	}
	before := hits.Load()
	name, he := callOnce()
	d, _ := he.Details["details"].(map[string]any)
	if name != upstream.ErrConnection || d["circuit"] != upstream.CircuitOpen || d["retry_after_seconds"] != 60 {
		t.Fatalf("open circuit answered %s %v", name, he.Details)
	}
	if hits.Load() != before {
		t.Fatal("an open circuit called the upstream")
	}
	// After OpenFor a failed probe opens it again...
	clock.Advance(time.Minute)
	if s := e.CircuitState(srv.URL); s != upstream.CircuitHalfOpen {
		t.Fatalf("state %s after OpenFor", s)
	}
	callOnce()
	if s := e.CircuitState(srv.URL); s != upstream.CircuitOpen || hits.Load() != before+1 {
		t.Fatalf("state %s, %d calls: a failed probe must reopen", s, hits.Load()-before)
	}
	// ...and a successful one closes it.
	clock.Advance(time.Minute)
	status.Store(200)
	if name, _ := callOnce(); name != "" {
		t.Fatalf("probe: %s", name)
	}
	if s := e.CircuitState(srv.URL); s != upstream.CircuitClosed {
		t.Fatalf("state %s after a successful probe", s)
	}
}

// An unresolved ${VAR} or a plain-http URL makes the binding unusable:
// the operator's error, not an upstream failure.
func TestBindingErrors(t *testing.T) {
	e := newExecutor(t, nil)
	for name, b := range map[string]binding{
		"unresolved header": {url: "https://127.0.0.1:1/x", headers: map[string]string{"X-Key": "${NOPE}"}},
		"unresolved url":    {url: "https://${NOPE}/x"},
		"plain http":        {url: "http://127.0.0.1:1/x"},
		"identity header":   {url: "https://127.0.0.1:1/x", headers: map[string]string{"Agent-ID": "x"}},
	} {
		if _, err := e.Call(testCtx(t), b.def(), call(`{}`)); !errors.Is(err, upstream.ErrBinding) {
			t.Errorf("%s: %v", name, err)
		}
		if err := e.Check(b.def()); !errors.Is(err, upstream.ErrBinding) {
			t.Errorf("%s: Check: %v", name, err)
		}
	}
	if _, err := e.Call(testCtx(t), binding{url: "https://127.0.0.1:1/x/{missing}"}.def(), call(`{}`)); !errors.Is(err, upstream.ErrBinding) {
		t.Errorf("missing URL parameter: %v", err)
	}
}

func BenchmarkCallHTTP(b *testing.B) {
	srv := startUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"confirmationNumber":"C-17"}`)
	}))
	e := newExecutor(b, nil)
	def := binding{url: srv.URL + "/bookings", headers: map[string]string{"Authorization": "Bearer ${TOKEN}"},
		outTr: map[string]string{"confirmation_code": "confirmationNumber"}}.def()
	c := call(`{"guest_id":"g-1"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Call(ctx, def, c); err != nil {
			b.Fatal(err)
		}
	}
}

// The request's core per-method parameters reach the upstream in
// X-AGTP-Core-Parameters (base64url of their JSON object), beside the
// endpoint's input in the body; a request without them sends no such
// header (docs/decisions.md#D-core-parameters).
func TestCoreParametersHeader(t *testing.T) {
	var mu sync.Mutex
	var seen, bodies []string
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, strings.Join(r.Header.Values(upstream.CoreParametersHeader), ","))
		bodies = append(bodies, string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, `{}`)
	}))
	e := newExecutor(t, nil)
	b := binding{url: srv.URL + "/reports"}
	with := call(`{"period":"day"}`)
	with.CoreParams = json.RawMessage(`{"intent":"sales by sku","confidence_threshold":0.5}`)
	for _, c := range []*handler.Call{with, call(`{"period":"day"}`)} {
		if _, err := e.Call(testCtx(t), b.def(), c); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	decoded, err := base64.RawURLEncoding.DecodeString(seen[0])
	if err != nil || string(decoded) != string(with.CoreParams) {
		t.Errorf("header %q decodes to %q (%v), want %s", seen[0], decoded, err, with.CoreParams)
	}
	if seen[1] != "" {
		t.Errorf("a call without core parameters sent %q", seen[1])
	}
	for _, body := range bodies {
		if body != `{"period":"day"}` {
			t.Errorf("upstream body %s, want the endpoint's input only", body)
		}
	}
}

// A URL parameter's value stays inside its path segment: a value that
// would make the segment empty, "." or "..", or that holds such a part
// between slashes (a server that decodes %2F first would climb with it),
// is the caller's invalid_input (422) and reaches no upstream; other
// values are percent-encoded, ';' and '?' included, so none adds a path
// parameter or a query.
func TestURLParametersStayInTheirSegment(t *testing.T) {
	type seen struct{ path, query string }
	var mu sync.Mutex
	var got []seen
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.URL.EscapedPath(), r.URL.RawQuery})
		mu.Unlock()
		_, _ = io.WriteString(w, `{}`)
	}))
	e := newExecutor(t, nil)
	for _, tc := range []struct {
		name, url, input string
		path, query      string // "" path: refused
	}{
		{name: "dot dot", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":".."}`},
		{name: "dot", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"."}`},
		{name: "empty", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":""}`},
		{name: "dot dot after a slash", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"a/../../admin"}`},
		{name: "dot dot after a backslash", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"a\\..\\admin"}`},
		{name: "two parameters making dot dot", url: "/v2/rooms/{a}{b}/holds", input: `{"a":".","b":"."}`},
		{name: "dots within a segment", url: "/v2/rooms/{room_id}.json", input: `{"room_id":".."}`},
		{name: "dots in a name", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"r..1"}`, path: "/v2/rooms/r..1/holds"},
		{name: "three dots", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"..."}`, path: "/v2/rooms/.../holds"},
		{name: "query and fragment characters", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"x?scope=admin#f"}`,
			path: "/v2/rooms/x%3Fscope=admin%23f/holds"},
		{name: "path parameter", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"x;jsessionid=1"}`, path: "/v2/rooms/x%3Bjsessionid=1/holds"},
		{name: "percent", url: "/v2/rooms/{room_id}/holds", input: `{"room_id":"%2e%2e"}`, path: "/v2/rooms/%252e%252e/holds"},
		{name: "number", url: "/v2/rooms/{room_id}/holds?v=1", input: `{"room_id":7}`, path: "/v2/rooms/7/holds", query: "v=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			b := binding{url: srv.URL + tc.url}
			_, err := e.Call(testCtx(t), b.def(), call(tc.input))
			mu.Lock()
			defer mu.Unlock()
			if tc.path == "" {
				var he *handler.Error
				if !errors.As(err, &he) || he.Name != "invalid_input" || he.Status != http.StatusUnprocessableEntity {
					t.Fatalf("err %v, want invalid_input 422", err)
				}
				if len(got) != 0 {
					t.Fatalf("the upstream was called: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].path != tc.path || got[0].query != tc.query {
				t.Fatalf("upstream saw %v, want path %q query %q", got, tc.path, tc.query)
			}
		})
	}
}

// A {param} outside the URL's path (host, query, fragment) makes the
// binding unusable: an input value could choose the upstream or add
// query parameters.
func TestURLParametersOutsideThePathAreRefused(t *testing.T) {
	e := newExecutor(t, nil)
	for _, u := range []string{
		"https://127.0.0.1:1/rooms?q={q}",
		"https://127.0.0.1:1/rooms?v=1&q=x{q}",
		"https://127.0.0.1:1/rooms#{q}",
		"https://{q}.example/rooms",
		"https://{q}/rooms",
	} {
		b := binding{url: u}
		if err := e.Check(b.def()); !errors.Is(err, upstream.ErrBinding) {
			t.Errorf("%s: Check: %v", u, err)
		}
		if _, err := e.Call(testCtx(t), b.def(), call(`{"q":"x&scope=admin"}`)); !errors.Is(err, upstream.ErrBinding) {
			t.Errorf("%s: Call: %v", u, err)
		}
	}
	if err := e.Check(binding{url: "https://127.0.0.1:1/rooms/{q}?v=1&t=${TOKEN}"}.def()); err != nil {
		t.Errorf("a path parameter beside a query ${VAR}: %v", err)
	}
}
