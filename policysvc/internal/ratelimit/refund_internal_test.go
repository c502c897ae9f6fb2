package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/testkit"
)

// When the reply to a refund is lost, the Redis client sends the refund
// script again. The refund names itself, so the second run gives nothing
// back: a decision that spent one request gets exactly one back, and no
// request more passes the limit than it allows (docs/policy.md: a re-sent
// script "never lets one more through").
func TestRefundWhoseReplyIsLostGivesBackOnce(t *testing.T) {
	ctx := context.Background()
	r := testkit.StartRedis(t)
	direct := r.Client(t)
	if err := Load(ctx, direct); err != nil {
		t.Fatal(err)
	}
	proxy := testkit.NewReplyDropper(t, r.Addr, []byte(refund.Hash()))
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { rdb.Close() })

	// Limit 3 per hour: three decisions spend, the third is refunded (a
	// shared limit of its pipeline refused, say).
	bk := Bucket{Key: "{agent}:rl:tier", Rate: Rate{Limit: 3, Period: time.Hour}, Cost: 1}
	var last *Call
	for range 3 {
		var b Batch
		last = b.Gate([]Bucket{bk}, nil)
		if err := b.Exec(ctx, direct); err != nil {
			t.Fatal(err)
		}
		if res, _ := last.Result(); !res.Allowed {
			t.Fatal("spend refused")
		}
	}
	proxy.Arm()
	var refunds Batch
	refunds.Refund(last)
	_ = refunds.Exec(ctx, rdb) // the reply is lost; the client re-sends
	if proxy.Drops() != 1 {
		t.Fatal("no reply was dropped: the test did not exercise a lost reply")
	}
	// Two requests were spent and kept: exactly one more may pass.
	allowed := 0
	for range 3 {
		res, err := Spend(ctx, direct, bk)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("after 2 kept spends of a 3/h limit, %d more requests passed; want 1 (the refund whose reply was lost gave back twice)", allowed)
	}
}

// A refund that reaches Redis later than refundWindow after its spend is
// dropped: its marker may be gone, so a copy of it could not be told from
// the first. It over-counts one request at worst.
func TestLateRefundIsDropped(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	bk := Bucket{Key: "{agent}:rl:tier", Rate: Rate{Limit: 2, Period: time.Hour}, Cost: 1}
	var b Batch
	c := b.Gate([]Bucket{bk}, nil)
	if err := b.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	v, err := c.cmd.Slice()
	if err != nil {
		t.Fatal(err)
	}
	v[4] = v[4].(int64) - refundWindow.Microseconds() - int64(time.Second/time.Microsecond)
	c.cmd.SetVal(v) // the spend happened longer ago than the window
	var refunds Batch
	refunds.Refund(c)
	if err := refunds.Exec(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if r, _ := Spend(ctx, rdb, bk); !r.Allowed {
		t.Fatal("second spend refused")
	}
	if r, _ := Spend(ctx, rdb, bk); r.Allowed {
		t.Fatal("a late refund gave the spend back")
	}
}
