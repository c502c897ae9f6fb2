package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// When the reply to a decision's script is lost, the Redis client sends
// the script again; the re-run finds the idempotency slot the first run
// claimed with its own token and claims it again, so the request is
// allowed with its claim instead of being refused as in flight (and the
// key blocked for the lease).
func TestLostScriptReplyStillClaimsAFreshKey(t *testing.T) {
	r := testkit.StartRedis(t)
	direct := r.Client(t)
	slot := rediskeys.IdempotencySlot(agentA, "fresh-key-1")
	proxy := testkit.NewReplyDropper(t, r.Addr, []byte(slot))
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { rdb.Close() })
	opts := server.Options{RateLimits: server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: 10, Period: time.Hour}}}}
	c := serve(t, rdb, opts, nil)
	wantAllow(t, authorize(t, c, request(agentA)))

	proxy.Arm()
	resp, err := c.Authorize(context.Background(), withKey(request(agentA), "fresh-key-1", `{"qty":1}`))
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW || resp.GetClaim() == nil {
		state, _ := direct.HGet(context.Background(), slot, rediskeys.SlotState).Result()
		t.Fatalf("a fresh key whose script reply was lost = %v %s; want ALLOW with its claim (slot %q)",
			resp.GetDecision(), resp.GetDenial().GetReason(), state)
	}
	if proxy.Armed() {
		t.Fatal("no reply was dropped: the test did not exercise a lost reply")
	}
}
