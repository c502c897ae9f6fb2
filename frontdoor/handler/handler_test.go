package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agtpsuite/agtp/frontdoor/handler"
)

// The trace a handler runs in is reachable from its ctx.
func TestTraceID(t *testing.T) {
	if id := handler.TraceID(context.Background()); id != "" {
		t.Fatalf("untraced ctx gave %q", id)
	}
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "s")
	defer span.End()
	if id := handler.TraceID(ctx); id != span.SpanContext().TraceID().String() || len(id) != 32 {
		t.Fatalf("trace id %q", id)
	}
}

// Typed decodes the validated input, encodes the output, and passes a
// declared error through untouched.
func TestTyped(t *testing.T) {
	type in struct {
		N int `json:"n"`
	}
	f := handler.Typed(func(_ context.Context, c *handler.Call, v in) (map[string]any, error) {
		if v.N < 0 {
			return nil, handler.Errorf("negative", "n is %d", v.N)
		}
		return map[string]any{"double": v.N * 2, "key": c.IdempotencyKey}, nil
	})
	res, err := f(context.Background(), &handler.Call{Input: json.RawMessage(`{"n":21}`), IdempotencyKey: "k"})
	if err != nil || string(res.Output) != `{"double":42,"key":"k"}` {
		t.Fatalf("%s %v", res.Output, err)
	}
	_, err = f(context.Background(), &handler.Call{Input: json.RawMessage(`{"n":-1}`)})
	var he *handler.Error
	if !errors.As(err, &he) || he.Name != "negative" {
		t.Fatalf("%v", err)
	}
}
