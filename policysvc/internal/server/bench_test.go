package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
