package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/services/idempotency"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func TestBurstThenRefusalWithRetryAfter(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	bk := ratelimit.Bucket{Key: "rl:a", Rate: ratelimit.Rate{Limit: 10, Period: time.Second, Burst: 3}, Cost: 1}
	for i := 0; i < 3; i++ {
		r, err := ratelimit.Spend(ctx, rdb, bk)
		if err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v, %v; want allowed", i, r, err)
		}
		if r.Remaining != int64(2-i) {
			t.Fatalf("request %d: remaining %d, want %d", i, r.Remaining, 2-i)
		}
	}
	r, err := ratelimit.Spend(ctx, rdb, bk)
	if err != nil || r.Allowed {
		t.Fatalf("request past the burst: %+v, %v; want refused", r, err)
	}
	if r.RetryAfter <= 0 || r.RetryAfter > 100*time.Millisecond {
		t.Fatalf("retry after %v, want at most one emission interval (100ms)", r.RetryAfter)
	}
	if got := ratelimit.Seconds(r.RetryAfter); got != 1 {
		t.Fatalf("Seconds(%v) = %d, want 1", r.RetryAfter, got)
	}
	time.Sleep(r.RetryAfter + 5*time.Millisecond)
	if r, _ := ratelimit.Spend(ctx, rdb, bk); !r.Allowed {
		t.Fatal("request after retry-after refused")
	}
}

func TestGateSpendsAllBucketsOrNone(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	roomy := ratelimit.Bucket{Key: "{a}:roomy", Rate: ratelimit.Rate{Limit: 100, Period: time.Minute}, Cost: 1}
	tight := ratelimit.Bucket{Key: "{a}:tight", Rate: ratelimit.Rate{Limit: 1, Period: time.Minute}, Cost: 1}
	var b ratelimit.Batch
	c := b.Gate([]ratelimit.Bucket{roomy, tight}, nil)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Result(); !r.Allowed || r.Remaining != 0 || r.Tightest != 1 {
		t.Fatalf("first gate = %+v; want allowed with 0 remaining (the tight bucket)", r)
	}
	before := rdb.Get(ctx, roomy.Key).Val()
	b = ratelimit.Batch{}
	c = b.Gate([]ratelimit.Bucket{roomy, tight}, nil)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	r, _ := c.Result()
	if r.Allowed || r.Refused != 1 {
		t.Fatalf("second gate = %+v; want refused by bucket 1", r)
	}
	if after := rdb.Get(ctx, roomy.Key).Val(); after != before {
		t.Fatalf("refused gate spent the roomy bucket: TAT %s -> %s", before, after)
	}
}

func TestRefundGivesBackTheSpendAndReleasesTheClaim(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	bk := ratelimit.Bucket{Key: rediskeys.AgentRateLimit("a", "tier"), Rate: ratelimit.Rate{Limit: 2, Period: time.Minute}, Cost: 1}
	slot := rediskeys.IdempotencySlot("a", "k")
	claim := &ratelimit.Claim{Slot: slot, Fingerprint: "fp", Token: "tok", Lease: time.Minute}
	var b ratelimit.Batch
	c := b.Gate([]ratelimit.Bucket{bk}, claim)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	r, _ := c.Result()
	if !r.Allowed || !r.Claimed || r.Claim.Outcome != idempotency.Claimed || r.Remaining != 1 {
		t.Fatalf("gate = %+v; want allowed, claimed, 1 remaining", r)
	}
	b = ratelimit.Batch{}
	b.Refund(c)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, slot).Val(); n != 0 {
		t.Fatal("refund left the claim in place")
	}
	for i := 0; i < 2; i++ {
		if r, _ := ratelimit.Spend(ctx, rdb, bk); !r.Allowed {
			t.Fatalf("spend %d after refund refused; the refund did not give the budget back", i)
		}
	}
}

func TestRefusedGateDoesNotClaim(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	bk := ratelimit.Bucket{Key: rediskeys.AgentRateLimit("a", "tier"), Rate: ratelimit.Rate{Limit: 1, Period: time.Minute}, Cost: 1}
	if r, _ := ratelimit.Spend(ctx, rdb, bk); !r.Allowed {
		t.Fatal("first spend refused")
	}
	slot := rediskeys.IdempotencySlot("a", "k")
	var b ratelimit.Batch
	c := b.Gate([]ratelimit.Bucket{bk}, &ratelimit.Claim{Slot: slot, Fingerprint: "fp", Token: "tok", Lease: time.Minute})
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Result(); r.Allowed || r.Claimed {
		t.Fatalf("gate = %+v; want refused without a claim", r)
	}
	if n := rdb.Exists(ctx, slot).Val(); n != 0 {
		t.Fatal("a refused gate claimed the slot")
	}
}

func TestGateWithoutBucketsOnlyClaims(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	slot := rediskeys.IdempotencySlot("a", "k")
	_, _ = idempotency.Claim(ctx, rdb, slot, "fp", "first", time.Minute)
	_, _ = idempotency.Complete(ctx, rdb, slot, "first", []byte("stored"), time.Hour)
	var b ratelimit.Batch
	c := b.Gate(nil, &ratelimit.Claim{Slot: slot, Fingerprint: "fp", Token: "tok", Lease: time.Minute})
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	r, _ := c.Result()
	if !r.Allowed || r.Remaining != -1 || r.Claim.Outcome != idempotency.Replay || string(r.Claim.Response) != "stored" {
		t.Fatalf("gate = %+v; want allowed, no limit, replay of the stored response", r)
	}
}

// TestGateClaimOverAnUnknownOutcome: the gate refuses a claim over an
// unknown outcome unless the request may run again (an idempotent
// endpoint's), and then spends and claims in the same call.
func TestGateClaimOverAnUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		rerun bool
		want  idempotency.Outcome
	}{
		{"refused", false, idempotency.Unknown},
		{"rerun", true, idempotency.Claimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := testkit.StartRedis(t).Client(t)
			slot := rediskeys.IdempotencySlot("a", "k")
			_, _ = idempotency.Claim(ctx, rdb, slot, "fp", "first", time.Minute)
			_, _ = idempotency.MarkUnknown(ctx, rdb, slot, "first", "fp", time.Hour)
			bk := ratelimit.Bucket{Key: rediskeys.AgentRateLimit("a", "tier"), Rate: ratelimit.Rate{Limit: 2, Period: time.Minute}, Cost: 1}
			var b ratelimit.Batch
			c := b.Gate([]ratelimit.Bucket{bk}, &ratelimit.Claim{Slot: slot, Fingerprint: "fp", Token: "tok", Lease: time.Minute, Rerun: tc.rerun})
			if err := b.Exec(ctx, rdb); err != nil {
				t.Fatal(err)
			}
			r, err := c.Result()
			if err != nil || !r.Allowed || !r.Claimed || r.Claim.Outcome != tc.want {
				t.Fatalf("gate = %+v, %v; want allowed with claim outcome %v", r, err, tc.want)
			}
		})
	}
}

func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	if err := ratelimit.Load(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var b ratelimit.Batch
	one := ratelimit.Bucket{Key: "rl:{x}", Rate: ratelimit.Rate{Limit: 5, Period: time.Second}}
	two := ratelimit.Bucket{Key: "rl:{y}", Rate: ratelimit.Rate{Limit: 5, Period: time.Second}}
	c1, c2 := b.Gate([]ratelimit.Bucket{one}, nil), b.Gate([]ratelimit.Bucket{two}, nil)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatalf("Exec after SCRIPT FLUSH: %v", err)
	}
	for _, c := range []*ratelimit.Call{c1, c2} {
		if r, err := c.Result(); err != nil || !r.Allowed || r.Remaining != 4 {
			t.Fatalf("gate after flush = %+v, %v; want allowed once", r, err)
		}
	}
}

// TestRateHoldsOverTime checks the limiter's accuracy: four clients drive
// a 200/s limit with a burst of 100 for a second; about 300 requests pass.
// The half-second burst keeps a scheduling stall of the clients on a busy
// machine from showing up as unused capacity.
func TestRateHoldsOverTime(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	bk := ratelimit.Bucket{Key: "rl:{rate}", Rate: ratelimit.Rate{Limit: 200, Period: time.Second, Burst: 100}}
	var allowed, total atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < time.Second {
				r, err := ratelimit.Spend(ctx, rdb, bk)
				if err != nil {
					t.Error(err)
					return
				}
				total.Add(1)
				if r.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	want := 100 + 200*time.Since(start).Seconds()
	if float64(total.Load()) < want*1.5 {
		t.Fatalf("only %d requests sent; the limit was not saturated", total.Load())
	}
	// Over-admission is never allowed beyond 5%; the lower bound widens
	// when a starved machine offered under 3x the limit (see the server's
	// TestRateLimitHoldsAcrossTwoInstances).
	low := 0.95
	if float64(total.Load()) < 3*want {
		low = 0.85
	}
	if got := float64(allowed.Load()); got < want*low || got > want*1.05 {
		t.Fatalf("allowed %.0f of %d in %v, want %.0f (-%.0f%%, +5%%)", got, total.Load(), time.Since(start), want, (1-low)*100)
	}
}

func TestRateValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    ratelimit.Rate
		ok   bool
	}{
		{"disabled", ratelimit.Rate{}, true},
		{"normal", ratelimit.Rate{Limit: 100, Period: time.Minute}, true},
		{"negative", ratelimit.Rate{Limit: -1, Period: time.Minute}, false},
		{"no period", ratelimit.Rate{Limit: 100}, false},
		{"too fine", ratelimit.Rate{Limit: 2_000_000, Period: time.Second}, false},
		{"too long", ratelimit.Rate{Limit: 1, Period: 48 * time.Hour}, false},
	} {
		if err := tc.r.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
