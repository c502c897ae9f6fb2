package kit_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// tracedCatalog answers ListMethods and reports the span context its
// handler ran with.
type tracedCatalog struct {
	seen chan trace.SpanContext
}

func (c *tracedCatalog) ListMethods(ctx context.Context, _ *catalogv1.ListMethodsRequest) (*catalogv1.ListMethodsResponse, error) {
	select {
	case c.seen <- trace.SpanContextFromContext(ctx):
	default:
	}
	return &catalogv1.ListMethodsResponse{}, nil
}

// TestRESTCallerKeepsItsTrace: a REST request's W3C trace context reaches
// the gRPC call the gateway makes, so the gRPC server span continues the
// caller's trace; without telemetry the context is still carried to the
// handler. The access guard still judges the HTTP client.
func TestRESTCallerKeepsItsTrace(t *testing.T) {
	const (
		traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerSpan  = "00f067aa0ba902b7"
		traceparent = "00-" + traceID + "-" + callerSpan + "-01"
		tracestate  = "congo=t61rcWkgMzE"
	)
	for _, tc := range []struct {
		name      string
		recording bool
	}{{"telemetry recording", true}, {"telemetry off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			pki := testkit.PKI(t)
			rec := tracetest.NewSpanRecorder()
			cfg := kit.DefaultCommon("catalogsvc", "127.0.0.1:0", "127.0.0.1:0")
			cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert("catalogsvc"), pki.Key("catalogsvc")
			cfg.LogLevel = "error"
			if tc.recording {
				cfg.Telemetry.SpanProcessors = []sdktrace.SpanProcessor{rec}
			}
			b, err := kit.NewBase(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if b.Telemetry.Recording != tc.recording {
				t.Fatalf("telemetry recording = %v", b.Telemetry.Recording)
			}
			cat := &tracedCatalog{seen: make(chan trace.SpanContext, 1)}
			catalogv1.RegisterCatalogServiceServer(b.Server.GRPC(), &testkit.CatalogStub{ListMethodsF: cat.ListMethods})
			b.Server.Register("agtp.catalog.v1.CatalogService", func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
				return catalogv1.RegisterCatalogServiceHandler(ctx, mux, conn)
			}, access.Table{catalogv1.CatalogService_ListMethods_FullMethodName: {Operators: true}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})

			admin, err := tls.LoadX509KeyPair(pki.Cert(devpki.Admin), pki.Key(devpki.Admin))
			if err != nil {
				t.Fatal(err)
			}
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS13, RootCAs: b.MTLS.Pool(), ServerName: "catalogsvc", Certificates: []tls.Certificate{admin},
			}}}
			defer hc.CloseIdleConnections()
			req, err := http.NewRequest("GET", "https://"+b.Server.HTTPAddr()+"/v1/catalog/methods", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("traceparent", traceparent)
			req.Header.Set("tracestate", tracestate)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /v1/catalog/methods = %d", resp.StatusCode)
			}

			var seen trace.SpanContext
			select {
			case seen = <-cat.seen:
			default:
				t.Fatal("the handler did not run")
			}
			if seen.TraceID().String() != traceID || seen.TraceState().String() != tracestate {
				t.Fatalf("the handler ran in trace %s (state %q), want the caller's %s (%q)", seen.TraceID(), seen.TraceState(), traceID, tracestate)
			}
			if !tc.recording {
				// Nothing in between records a span: the handler's parent
				// is the caller's span itself.
				if seen.SpanID().String() != callerSpan || !seen.IsRemote() {
					t.Fatalf("the handler's span context is %v, want the caller's remote span %s", seen, callerSpan)
				}
				return
			}
			// The gRPC server span continues the caller's trace, below the
			// gateway's HTTP server span, whose parent is the caller's span.
			var httpSpan, grpcSpan sdktrace.ReadOnlySpan
			testkit.WaitFor(t, 5*time.Second, "the gateway's and the server's spans", func() bool {
				for _, s := range rec.Ended() {
					switch {
					case s.SpanKind() == trace.SpanKindServer && s.Name() == "agtp.catalog.v1.CatalogService/ListMethods":
						grpcSpan = s
					case s.SpanKind() == trace.SpanKindServer && s.Name() == "GET /v1/catalog/methods":
						httpSpan = s
					}
				}
				return httpSpan != nil && grpcSpan != nil
			})
			if got := grpcSpan.SpanContext().TraceID().String(); got != traceID {
				t.Fatalf("the gRPC server span is in trace %s, want the caller's %s", got, traceID)
			}
			if seen.SpanID() != grpcSpan.SpanContext().SpanID() {
				t.Fatalf("the handler ran in span %s, not the gRPC server span %s", seen.SpanID(), grpcSpan.SpanContext().SpanID())
			}
			if httpSpan.SpanContext().TraceID().String() != traceID || httpSpan.Parent().SpanID().String() != callerSpan || !httpSpan.Parent().IsRemote() {
				t.Fatalf("the gateway's span %v has parent %v, want the caller's span %s", httpSpan.SpanContext(), httpSpan.Parent(), callerSpan)
			}
		})
	}
}
