package kit

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log records written with a context (log.InfoContext and the like) carry
// the trace_id and span_id of the context's span, so that a log line can
// be found from a trace and a trace from a log line. The span need not be
// recording: a service that exports nothing still logs the IDs of the
// trace its caller passed on.

// The attribute keys of the trace and span IDs.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// traceHandler adds the IDs of the record's span to the records it passes
// on. A record without a context, or whose context has no valid span,
// costs one comparison or one context lookup and is passed on untouched.
//
// The IDs are added like any attribute of the record, so under
// Logger.WithGroup they land in the group.
type traceHandler struct {
	slog.Handler
}

// withTraceIDs wraps h so that its records carry the span's IDs.
func withTraceIDs(h slog.Handler) slog.Handler { return traceHandler{h} }

// Handle implements slog.Handler.
func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	// Logger.Info and the other methods without a context pass
	// context.Background().
	if ctx == nil || ctx == context.Background() {
		return h.Handler.Handle(ctx, r)
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return h.Handler.Handle(ctx, r)
	}
	// Clone, so the record the caller holds is not changed under it; the
	// two attributes fit the record's inline storage in most records.
	r = r.Clone()
	r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
