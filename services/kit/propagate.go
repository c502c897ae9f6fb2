package kit

import (
	"context"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// When telemetry is off, these interceptors carry the W3C trace context
// through a service without recording spans: the incoming traceparent is
// put into the context, and the context's is put on outgoing calls. That
// costs a metadata lookup per call, where the full instrumentation costs a
// span, attributes and metrics.

type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

var _ propagation.TextMapCarrier = metadataCarrier{}

// The metadata keys Propagator reads and writes.
const (
	traceparentKey = "traceparent"
	baggageKey     = "baggage"
)

func extract(ctx context.Context) context.Context {
	// Most calls carry no trace context; looking up the two keys spares
	// them the copy of the whole metadata that FromIncomingContext makes.
	if metadata.ValueFromIncomingContext(ctx, traceparentKey) == nil && metadata.ValueFromIncomingContext(ctx, baggageKey) == nil {
		return ctx
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return Propagator.Extract(ctx, metadataCarrier(md))
}

func inject(ctx context.Context) context.Context {
	// Nothing to propagate (no trace context, no baggage): no metadata
	// map for the call.
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return ctx
	}
	md := metadata.MD{}
	Propagator.Inject(ctx, metadataCarrier(md))
	if len(md) == 0 {
		return ctx
	}
	if out, ok := metadata.FromOutgoingContext(ctx); ok {
		md = metadata.Join(out, md)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

func propagateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(extract(ctx), req)
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s contextStream) Context() context.Context { return s.ctx }

func propagateStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, contextStream{ss, extract(ss.Context())})
}

func injectUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(inject(ctx), method, req, reply, cc, opts...)
}

func injectStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(inject(ctx), desc, cc, method, opts...)
}
