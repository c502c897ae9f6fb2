package kit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/services/kit"
)

// logLines decodes the JSON lines a logger wrote.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestLogRecordsCarryTheSpan: a record written with a context that holds
// a valid span names its trace and span; any other record does not.
func TestLogRecordsCarryTheSpan(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	recording, span := tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()
	// A caller's trace context passed on by a service that records
	// nothing: valid, remote, not recording.
	remoteSC := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Remote:  true,
	})
	remote := trace.ContextWithRemoteSpanContext(context.Background(), remoteSC)
	type key struct{}

	cases := []struct {
		name string
		log  func(*slog.Logger)
		want trace.SpanContext
	}{
		{"recording span", func(l *slog.Logger) { l.InfoContext(recording, "m") }, span.SpanContext()},
		{"remote span context", func(l *slog.Logger) { l.InfoContext(remote, "m") }, remoteSC},
		{"no context", func(l *slog.Logger) { l.Info("m") }, trace.SpanContext{}},
		{"context without a span", func(l *slog.Logger) { l.InfoContext(context.WithValue(context.Background(), key{}, 1), "m") }, trace.SpanContext{}},
		{"invalid span context", func(l *slog.Logger) {
			l.InfoContext(trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}), "m")
		}, trace.SpanContext{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := kit.DefaultCommon("catalogsvc", "127.0.0.1:0", "")
			cfg.LogFormat = "json"
			log := cfg.Logger(&buf)
			// Derived loggers keep the IDs at the record's top level.
			tc.log(log.With("component", "test"))
			lines := logLines(t, &buf)
			if len(lines) != 1 {
				t.Fatalf("%d log lines", len(lines))
			}
			got := lines[0]
			if got["service"] != "catalogsvc" || got["component"] != "test" {
				t.Fatalf("the logger's own attributes are gone: %v", got)
			}
			if !tc.want.IsValid() {
				if _, ok := got[kit.LogTraceID]; ok {
					t.Fatalf("a record without a span names a trace: %v", got)
				}
				if _, ok := got[kit.LogSpanID]; ok {
					t.Fatalf("a record without a span names a span: %v", got)
				}
				return
			}
			if got[kit.LogTraceID] != tc.want.TraceID().String() || got[kit.LogSpanID] != tc.want.SpanID().String() {
				t.Fatalf("record %v, want trace %s span %s", got, tc.want.TraceID(), tc.want.SpanID())
			}
		})
	}
}

// TestTextLogRecordsCarryTheSpan: the text format carries them too.
func TestTextLogRecordsCarryTheSpan(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()
	var buf bytes.Buffer
	kit.DefaultCommon("policysvc", "127.0.0.1:0", "").Logger(&buf).WarnContext(ctx, "m", "k", "v")
	sc := span.SpanContext()
	for _, want := range []string{"trace_id=" + sc.TraceID().String(), "span_id=" + sc.SpanID().String(), "k=v", "service=policysvc"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("%q lacks %q", buf.String(), want)
		}
	}
}

// BenchmarkLogContext compares a record whose context has no span (the
// common case when nothing is traced) with one whose context has a span.
func BenchmarkLogContext(b *testing.B) {
	cfg := kit.DefaultCommon("catalogsvc", "127.0.0.1:0", "")
	cfg.LogFormat = "json"
	log := cfg.Logger(io.Discard)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	withSpan, span := tp.Tracer("bench").Start(context.Background(), "work")
	defer span.End()
	type key struct{}
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"background", context.Background()}, {"no span", context.WithValue(context.Background(), key{}, 1)}, {"span", withSpan}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				log.InfoContext(bc.ctx, "call failed", "method", "/x.Y/Z")
			}
		})
	}
}
