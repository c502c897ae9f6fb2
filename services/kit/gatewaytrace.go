package kit

import (
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A REST caller's trace continues through the gateway: the W3C
// traceparent, tracestate and baggage headers of the HTTP request are put
// into the request's context, and the gateway's gRPC call to its own
// server carries them on as metadata (otelgrpc's client handler, or
// injectUnary when nothing is recorded), so the gRPC server span is a
// child of the caller's span. The headers never become gRPC metadata
// themselves: the access guard's header matcher still decides which
// headers do.

// traceGateway wraps the gateway's handler. With telemetry recording, an
// HTTP server span (otelhttp) stands between the caller's span and the
// gRPC call; without, the caller's trace context is only carried, at the
// cost of reading three headers.
func traceGateway(h http.Handler, service string, tel *Telemetry) http.Handler {
	if tel.Recording {
		return otelhttp.NewHandler(h, service+" gateway",
			// Named, the server's address is not read from each
			// request's Host, which a caller writes: every Host value
			// would be a series of its own in the HTTP metrics.
			otelhttp.WithServerName(service),
			otelhttp.WithTracerProvider(tel.TracerProvider),
			otelhttp.WithMeterProvider(tel.MeterProvider),
			otelhttp.WithPropagators(Propagator),
		)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctx := Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)); ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// gatewayTraceOptions name the HTTP server span after the route the mux
// matched ("GET /v1/catalog/methods"), which is known only once the mux
// has routed the request; otelhttp alone names it after the method.
func gatewayTraceOptions(tel *Telemetry) []runtime.ServeMuxOption {
	if !tel.Recording {
		return nil
	}
	return []runtime.ServeMuxOption{runtime.WithMiddlewares(func(next runtime.HandlerFunc) runtime.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
			if pat, ok := runtime.HTTPPattern(r.Context()); ok {
				route := pat.String()
				span := trace.SpanFromContext(r.Context())
				span.SetName(r.Method + " " + route)
				span.SetAttributes(attribute.String("http.route", route))
			}
			next(w, r, params)
		}
	})}
}
