package transport

import (
	"bufio"
	"context"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// staticHandler answers every request with one shared response, so the
// benchmarks measure the transport and wire code, not response building.
func staticHandler() HandlerFunc {
	resp := agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, []byte(`{"status":200,"result":{}}`))
	resp.Header.Set(agtp.HeaderServerID, "bench")
	return func(context.Context, *ConnInfo, *agtp.Request) *agtp.Response { return resp }
}

func benchRequest(b *testing.B) []byte {
	return rawRequest(b, "QUERY", "/bench/items?limit=10",
		agtp.HeaderAgentID, "7f3a0000000000000000000000000000000000000000000000000000000e1f8",
		agtp.HeaderTaskID, "task-0042",
		agtp.HeaderAuthorityScope, "documents:query")
}

// One persistent TLS connection, one request at a time: the latency the
// transport adds to a request (client and server in this process; allocs
// are both sides').
func BenchmarkTCPRoundTrip(b *testing.B) {
	ts := startServer(b, Options{DisableQUIC: true}, staticHandler())
	conn := ts.dial(b, nil)
	br := bufio.NewReader(conn)
	raw := benchRequest(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(raw); err != nil {
			b.Fatal(err)
		}
		if _, err := agtp.ReadResponse(br, agtp.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// Sixteen requests per write on one connection: pipelined responses
// batched into few writes.
func BenchmarkTCPPipelined16(b *testing.B) {
	ts := startServer(b, Options{DisableQUIC: true}, staticHandler())
	conn := ts.dial(b, nil)
	br := bufio.NewReader(conn)
	one := benchRequest(b)
	var raw []byte
	for range 16 {
		raw = append(raw, one...)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(raw); err != nil {
			b.Fatal(err)
		}
		for range 16 {
			if _, err := agtp.ReadResponse(br, agtp.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/request")
}

// Many persistent connections in parallel: throughput on this machine.
func BenchmarkTCPRoundTripParallel(b *testing.B) {
	benchParallel(b, staticHandler())
}

// As BenchmarkTCPRoundTripParallel, with a handler that derives a
// deadline and a cancellable context from its request's, as the front
// door's pipeline and its internal calls do: what the request context
// costs when every connection's requests make children of it at once.
func BenchmarkTCPRoundTripParallelDerived(b *testing.B) {
	h := staticHandler()
	benchParallel(b, HandlerFunc(func(ctx context.Context, ci *ConnInfo, req *agtp.Request) *agtp.Response {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		call, stop := context.WithCancel(ctx)
		defer stop()
		return h(call, ci, req)
	}))
}

func benchParallel(b *testing.B, h Handler) {
	ts := startServer(b, Options{DisableQUIC: true}, h)
	raw := benchRequest(b)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		conn := ts.dial(b, nil)
		br := bufio.NewReader(conn)
		for pb.Next() {
			if _, err := conn.Write(raw); err != nil {
				b.Error(err)
				return
			}
			if _, err := agtp.ReadResponse(br, agtp.Limits{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// One QUIC stream per request on a persistent connection.
func BenchmarkQUICRoundTrip(b *testing.B) {
	ts := startServer(b, Options{}, staticHandler())
	qc := ts.quicDial(b, nil)
	raw := benchRequest(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := quicRoundTripErr(qc, raw); err != nil {
			b.Fatal(err)
		}
	}
}

// A new TLS connection per request (session resumption off): handshake
// cost.
func BenchmarkTCPNewConnectionPerRequest(b *testing.B) {
	ts := startServer(b, Options{DisableQUIC: true}, staticHandler())
	raw := benchRequest(b)
	conf := ts.certs.clientTLS()
	b.ReportAllocs()
	for b.Loop() {
		conn := ts.dial(b, conf)
		if _, err := conn.Write(raw); err != nil {
			b.Fatal(err)
		}
		if _, err := agtp.ReadResponse(bufio.NewReader(conn), agtp.Limits{}); err != nil {
			b.Fatal(err)
		}
		conn.Close()
	}
}
