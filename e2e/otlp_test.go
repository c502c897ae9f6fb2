package e2e

import (
	"context"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/services/testkit"
)

// spanSink is an in-test OTLP trace receiver: the services export their
// spans to it over OTLP/gRPC, as they would to a collector.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []recordedSpan
	Addr  string
}

type recordedSpan struct {
	Service string
	Span    *tracepb.Span
}

func startSpanSink(t *testing.T) *spanSink {
	t.Helper()
	s := &spanSink{}
	// The services are processes that dial the sink themselves: the
	// address is what they need, the connection goes unused.
	s.Addr = testkit.ServeGRPC(t, func(r grpc.ServiceRegistrar) { collectortrace.RegisterTraceServiceServer(r, s) }).Target()
	return s
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.spans = append(s.spans, recordedSpan{Service: service, Span: sp})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// env is what points a process's exporter at the sink.
func (s *spanSink) env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + s.Addr,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// find returns the spans of one trace.
func (s *spanSink) trace(traceID []byte) []recordedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recordedSpan
	for _, r := range s.spans {
		if string(r.Span.GetTraceId()) == string(traceID) {
			out = append(out, r)
		}
	}
	return out
}
