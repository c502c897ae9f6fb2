package server_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// benchOptions are limits that never refuse, so every decision does the
// full work: the caller's tier and an idempotency claim in one script, and
// the per-IP limit as a second script in the same pipeline.
func benchOptions() server.Options {
	huge := rateT{Limit: 1_000_000, Period: time.Second}
	return server.Options{RateLimits: server.RateLimitOptions{
		Tiers: map[string]rateT{"default": huge},
		PerIP: huge,
	}}
}

func benchRedis(b *testing.B) *redis.Client {
	r := testkit.StartRedis(b)
	// A pool big enough for the parallel goroutines.
	c := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 64})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func benchRequest(i int64, withKey bool) *policyv1.AuthorizeRequest {
	agents := []string{agentA, agentB}
	r := request(agents[i%2])
	r.AuthorityScope, r.AuthorityScopePresent = "orders:write", true
	r.RequiredScopes = []string{"orders:write"}
	if withKey {
		r.IdempotencyKey = "key-" + strconv.FormatInt(i, 10)
		r.RequestFingerprint = fingerprint("{}")
	}
	return r
}

func runAuthorize(b *testing.B, authorize func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error), withKey bool) {
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			resp, err := authorize(ctx, benchRequest(n.Add(1), withKey))
			if err != nil {
				b.Error(err)
				return
			}
			if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
				b.Errorf("decision %v %v", resp.GetDecision(), resp.GetDenial())
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}

// BenchmarkAuthorize measures decisions against a real Redis, called in
// process (what one policysvc replica can decide).
func BenchmarkAuthorize(b *testing.B) {
	for _, withKey := range []bool{false, true} {
		name := "limits"
		if withKey {
			name = "limits+claim"
		}
		b.Run(name, func(b *testing.B) {
			srv, err := server.New(benchRedis(b), discard, benchOptions())
			if err != nil {
				b.Fatal(err)
			}
			runAuthorize(b, srv.Authorize, withKey)
		})
	}
}

// BenchmarkAuthorizeGRPC adds the loopback gRPC hop the front door pays.
func BenchmarkAuthorizeGRPC(b *testing.B) {
	c := serve(b, benchRedis(b), benchOptions(), nil)
	runAuthorize(b, func(ctx context.Context, r *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
		return c.Authorize(ctx, r)
	}, true)
}

// batchItems is about what one AuthorizeBatch carries from the front door
// under load (docs/performance.md, "Batched hops").
const batchItems = 11

// BenchmarkAuthorizeBatchGRPC measures the front door's hop: 11 decisions
// in one AuthorizeBatch over loopback gRPC. "local" decides with no
// Redis work (a read without rate limits, the suite's QUERY); "limits"
// spends a tier and a per-IP limit per item. ns/op and allocs/op are per
// batch.
func BenchmarkAuthorizeBatchGRPC(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts server.Options
	}{
		{"local", server.Options{}},
		{"limits", benchOptions()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv, err := server.New(benchRedis(b), discard, tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			testkit.Run(b, "Run", srv.Run)
			// Long-lived stream workers, as services/kit serves.
			conn := testkit.ServeGRPCWith(b, []grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))},
				func(g grpc.ServiceRegistrar) { policyv1.RegisterPolicyServiceServer(g, srv) })
			c := policyv1.NewPolicyServiceClient(conn)
			var n atomic.Int64
			b.SetParallelism(4)
			b.ReportAllocs()
			created := goroutinesCreated()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				req := &policyv1.AuthorizeBatchRequest{Items: make([]*policyv1.AuthorizeRequest, batchItems)}
				for pb.Next() {
					for i := range req.Items {
						req.Items[i] = benchRequest(n.Add(1), false)
					}
					resp, err := c.AuthorizeBatch(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					for _, r := range resp.GetResults() {
						if d := r.GetResponse().GetDecision(); d != policyv1.Decision_DECISION_ALLOW {
							b.Errorf("decision %v %v", d, r.GetResponse().GetDenial())
							return
						}
					}
				}
			})
			// Client and server share the process: the count includes
			// the client's goroutines per call.
			b.ReportMetric(float64(goroutinesCreated()-created)/float64(b.N), "goroutines/op")
		})
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
