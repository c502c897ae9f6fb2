package pipeline_test

import "testing"

// BenchmarkRegisteredFunctionThroughPipeline is the throughput scenario's
// request (QUERY /orders/{order_id} to a registered function) through
// every stage, with policysvc and auditsvc stubs over gRPC on loopback:
// the front door's own cost per request, allocations included.
func BenchmarkRegisteredFunctionThroughPipeline(b *testing.B) {
	f := newBndFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do(b, agentFull, "QUERY", "/orders/o-1", nil, ""); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}
