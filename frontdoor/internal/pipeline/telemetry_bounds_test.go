package pipeline_test

import (
	"github.com/agtpsuite/agtp/services/testkit"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	"github.com/agtpsuite/agtp/services/agtp"
)

// maxSpanValue is a generous bound for one span attribute taken from a
// request: the longest echoed field the front door takes is 256 bytes.
const maxSpanValue = 1 << 10

// A Task-ID over its bound is refused by the wire stage (400
// invalid-header) and is never echoed or recorded; the request's server
// span must not carry it either, or every refused request puts up to the
// header section's 64 KiB into the exported trace.
func TestTaskIDOverBoundNotOnSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.tracer = tp.Tracer("test")
	})
	v := strings.Repeat("t", 40<<10)
	resp, body := f.do(t, stageRequest("EXECUTE", "/notes", `{"text":"x"}`, agtp.HeaderTaskID, v))
	wantAnswer(t, resp, body, agtp.StatusBadRequest, "invalid-header")
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if n := len(a.Value.String()); n > maxSpanValue {
				t.Fatalf("span %q attribute %s is %d bytes (the refused Task-ID)", s.Name(), a.Key, n)
			}
		}
	}
}

// A caller-chosen value in a request body must not reach a WARN log line
// unbounded: the carried-payload disagreement warning copies the body's
// task_id whole, so one request of a few hundred KiB writes a log line of
// that size, per request.
func TestCarriedDisagreementLogBounded(t *testing.T) {
	var out testkit.SyncBuffer
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.log = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	big := strings.Repeat("x", 256<<10)
	req := stageRequest("EXECUTE", "/notes", `{"method":"EXECUTE","task_id":"`+big+`","parameters":{"text":"x"}}`,
		agtp.HeaderTaskID, "t-1", agtp.HeaderContentType, "application/vnd.mcp.tools+json")
	resp := f.p.ServeAGTP(t.Context(), stageConn(), req)
	t.Logf("answer %d %.200s", resp.Status, resp.Body)
	for _, line := range strings.Split(out.String(), "\n") {
		if len(line) > 8<<10 {
			t.Fatalf("a log line of %d bytes: %.160s...", len(line), line)
		}
	}
}
