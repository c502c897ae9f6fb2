package client_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

// refuseThen answers the first refusals requests with status and the
// given Retry-After, then 200; calls counts every request.
func refuseThen(refusals int32, status int, retryAfter string, calls *atomic.Int32) transport.HandlerFunc {
	return func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		if calls.Add(1) <= refusals {
			resp := agtp.NewErrorResponse(status, "rate-limited", "slow down")
			if retryAfter != "" {
				resp.Header.Set("Retry-After", retryAfter)
			}
			return resp
		}
		return agtp.NewResponse(agtp.StatusOK, "text/plain", []byte("ok"))
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name       string
		method     string
		hdr        []string
		status     int
		retryAfter string
		policy     client.RetryPolicy
		wantStatus int
		wantCalls  int32
		wantWaits  int
		minWait    time.Duration
	}{
		{name: "off by default", method: "QUERY", status: 429, retryAfter: "0",
			wantStatus: 429, wantCalls: 1},
		{name: "429 with Retry-After seconds is waited out", method: "QUERY", status: 429, retryAfter: "1",
			policy: client.RetryPolicy{MaxRetries: 2}, wantStatus: 200, wantCalls: 3, wantWaits: 2, minWait: time.Second},
		{name: "503 without Retry-After backs off", method: "DISCOVER", status: 503,
			policy: client.RetryPolicy{MaxRetries: 3, BaseDelay: time.Millisecond}, wantStatus: 200, wantCalls: 3, wantWaits: 2},
		{name: "retries run out with the last answer", method: "QUERY", status: 429, retryAfter: "0",
			policy: client.RetryPolicy{MaxRetries: 1}, wantStatus: 429, wantCalls: 2, wantWaits: 1},
		{name: "a state change is not repeated", method: "EXECUTE", status: 429, retryAfter: "0",
			policy: client.RetryPolicy{MaxRetries: 3}, wantStatus: 429, wantCalls: 1},
		{name: "a state change with Idempotency-Key is", method: "EXECUTE", hdr: []string{agtp.HeaderIdempotencyKey, "k-1"}, status: 429, retryAfter: "0",
			policy: client.RetryPolicy{MaxRetries: 3}, wantStatus: 200, wantCalls: 3, wantWaits: 2},
		{name: "asking for longer than MaxDelay gives up", method: "QUERY", status: 429, retryAfter: "3600",
			policy: client.RetryPolicy{MaxRetries: 3, MaxDelay: 5 * time.Second}, wantStatus: 429, wantCalls: 1},
		{name: "other refusals are final", method: "QUERY", status: 403, retryAfter: "0",
			policy: client.RetryPolicy{MaxRetries: 3}, wantStatus: 403, wantCalls: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			s := startServer(t, transport.Options{}, refuseThen(2, tc.status, tc.retryAfter, &calls))
			c := newClient(t, s.caFile, client.Options{Retry: tc.policy})
			var waits []time.Duration
			ctx := client.WithTrace(testContext(t), &client.Trace{RetryAfter: func(_ int, d time.Duration) { waits = append(waits, d) }})
			resp, err := c.Do(ctx, request(t, tc.method, "/x", tc.hdr...), s.addr())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.wantStatus || calls.Load() != tc.wantCalls || len(waits) != tc.wantWaits {
				t.Fatalf("status %d after %d calls and waits %v; want %d after %d calls and %d waits",
					resp.Status, calls.Load(), waits, tc.wantStatus, tc.wantCalls, tc.wantWaits)
			}
			for _, w := range waits {
				// Jitter adds at most a quarter to what the server asked.
				if w < tc.minWait || tc.minWait > 0 && w > tc.minWait*5/4+time.Millisecond {
					t.Errorf("waited %v for Retry-After %s", w, tc.retryAfter)
				}
			}
		})
	}
}

func TestRetryAfterParsesFieldDateAndBody(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	body := agtp.NewErrorResponse(429, "rate-limited", "slow down")
	body.Body = []byte(`{"status":429,"reason":"rate-limited","explanation":"x","retry_after_seconds":7}`)
	cases := []struct {
		name     string
		resp     *agtp.Response
		min, max time.Duration
		ok       bool
	}{
		{"seconds", withField(agtp.NewErrorResponse(429, "r", "e"), "12"), 12 * time.Second, 12 * time.Second, true},
		{"HTTP date", withField(agtp.NewErrorResponse(503, "r", "e"), date), 85 * time.Second, 91 * time.Second, true},
		{"error body member", body, 7 * time.Second, 7 * time.Second, true},
		{"garbage", withField(agtp.NewErrorResponse(429, "r", "e"), "soon"), 0, 0, false},
		{"absent", agtp.NewErrorResponse(429, "r", "e"), 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := client.RetryAfter(tc.resp)
			if ok != tc.ok || d < tc.min || d > tc.max {
				t.Fatalf("RetryAfter = %v, %v; want %v..%v, %v", d, ok, tc.min, tc.max, tc.ok)
			}
		})
	}
}

func withField(resp *agtp.Response, v string) *agtp.Response {
	resp.Header.Set("Retry-After", v)
	return resp
}

// TestTraceContextInjected checks that a caller inside a span continues
// its trace into the server: the request carries the span's traceparent.
func TestTraceContextInjected(t *testing.T) {
	got := make(chan string, 2)
	s := startServer(t, transport.Options{}, func(_ context.Context, _ *transport.ConnInfo, req *agtp.Request) *agtp.Response {
		got <- req.Header.Get(agtp.HeaderTraceparent)
		return agtp.NewResponse(agtp.StatusOK, "text/plain", nil)
	})
	c := newClient(t, s.caFile, client.Options{})
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(testContext(t), "caller")
	defer span.End()

	if _, err := c.Do(ctx, request(t, "QUERY", "/x"), s.addr()); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-0" + strconv.Itoa(int(sc.TraceFlags()))
	if tp := <-got; tp != want {
		t.Fatalf("traceparent %q, want %q", tp, want)
	}
	if _, err := c.Do(testContext(t), request(t, "QUERY", "/x"), s.addr()); err != nil {
		t.Fatal(err)
	}
	if tp := <-got; tp != "" {
		t.Fatalf("a caller without a span sent traceparent %q", tp)
	}
}
