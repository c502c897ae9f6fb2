package kit

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

const (
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testTraceparent = "00-" + testTraceID + "-00f067aa0ba902b7-01"
)

// TestExtract: the trace context and baggage of an incoming call reach
// the handler's context, and a call without them keeps its context as it
// is.
func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name        string
		md          metadata.MD
		wantTrace   bool
		wantBaggage string
	}{
		{"none", metadata.Pairs("x-other", "1"), false, ""},
		{"traceparent", metadata.Pairs("traceparent", testTraceparent), true, ""},
		{"baggage only", metadata.Pairs("baggage", "tenant=t1"), false, "t1"},
		{"both", metadata.Pairs("traceparent", testTraceparent, "baggage", "tenant=t1"), true, "t1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := metadata.NewIncomingContext(context.Background(), tc.md)
			out := extract(in)
			sc := trace.SpanContextFromContext(out)
			if sc.IsValid() != tc.wantTrace {
				t.Fatalf("span context valid = %v, want %v", sc.IsValid(), tc.wantTrace)
			}
			if tc.wantTrace && sc.TraceID().String() != testTraceID {
				t.Fatalf("trace id %s, want %s", sc.TraceID(), testTraceID)
			}
			if got := baggage.FromContext(out).Member("tenant").Value(); got != tc.wantBaggage {
				t.Fatalf("baggage tenant %q, want %q", got, tc.wantBaggage)
			}
			if !tc.wantTrace && tc.wantBaggage == "" && out != in {
				t.Fatal("a call without trace context got a new context")
			}
		})
	}
}

// TestInject: an outgoing call carries the context's trace context and
// baggage next to the metadata already set, and nothing when there is
// nothing to carry.
func TestInject(t *testing.T) {
	remote := extract(metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", testTraceparent)))
	member, err := baggage.NewMember("tenant", "t1")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want map[string]string
	}{
		{"none", context.Background(), nil},
		{"none, metadata kept", metadata.AppendToOutgoingContext(context.Background(), "x-other", "1"), map[string]string{"x-other": "1"}},
		{"trace", remote, map[string]string{"traceparent": testTraceparent}},
		{"baggage", baggage.ContextWithBaggage(context.Background(), bag), map[string]string{"baggage": "tenant=t1"}},
		{"trace and metadata", metadata.AppendToOutgoingContext(remote, "x-other", "1"), map[string]string{"traceparent": testTraceparent, "x-other": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md, _ := metadata.FromOutgoingContext(inject(tc.ctx))
			if len(md) != len(tc.want) {
				t.Fatalf("outgoing metadata %v, want %v", md, tc.want)
			}
			for k, v := range tc.want {
				if got := md.Get(k); len(got) != 1 || got[0] != v {
					t.Fatalf("%s = %v, want %q", k, got, v)
				}
			}
		})
	}
}
