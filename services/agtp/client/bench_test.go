package client_test

import (
	"context"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

var okBody = []byte(`{"status":200,"result":{}}`)

func trivial(context.Context, *transport.ConnInfo, *agtp.Request) *agtp.Response {
	return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, okBody)
}

func benchRequest(b *testing.B) *agtp.Request {
	req := request(b, agtp.MethodQuery, "/documents?lang=en", agtp.HeaderAgentID, agentA, agtp.HeaderTaskID, "task-0042")
	req.Header.Set(agtp.HeaderContentType, agtp.MediaTypeJSON)
	req.Body = []byte(`{"parameters":{"intent":"find the Q3 report"}}`)
	return req
}

// BenchmarkClientDo is one request and response on a persistent TLS/TCP
// connection to the front door's transport on loopback: the client's
// cost plus the server's and the kernel's.
func BenchmarkClientDo(b *testing.B) {
	srv := startServer(b, transport.Options{DisableQUIC: true}, trivial)
	c := newClient(b, srv.caFile, client.Options{})
	req, ctx, addr := benchRequest(b), context.Background(), srv.addr()
	if _, err := c.Do(ctx, req, addr); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Do(ctx, req, addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClientDoDeadline is BenchmarkClientDo with a cancellable
// context carrying a deadline, as most callers have.
func BenchmarkClientDoDeadline(b *testing.B) {
	srv := startServer(b, transport.Options{DisableQUIC: true}, trivial)
	c := newClient(b, srv.caFile, client.Options{})
	req, addr := benchRequest(b), srv.addr()
	ctx := testContext(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Do(ctx, req, addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClientDoParallel shares one client across goroutines, which
// spreads over up to MaxConnsPerHost connections.
func BenchmarkClientDoParallel(b *testing.B) {
	srv := startServer(b, transport.Options{DisableQUIC: true}, trivial)
	c := newClient(b, srv.caFile, client.Options{})
	addr := srv.addr()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest(b)
		for pb.Next() {
			if _, err := c.Do(context.Background(), req, addr); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClientDoQUIC is one request per QUIC stream on one connection.
func BenchmarkClientDoQUIC(b *testing.B) {
	srv := startServer(b, transport.Options{}, trivial)
	c := newClient(b, srv.caFile, client.Options{QUIC: true})
	req, ctx, addr := benchRequest(b), context.Background(), srv.quicAddr()
	if _, err := c.Do(ctx, req, addr); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Do(ctx, req, addr); err != nil {
			b.Fatal(err)
		}
	}
}
