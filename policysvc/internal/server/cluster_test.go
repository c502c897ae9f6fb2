package server_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// startCluster runs a three-master Redis Cluster on loopback.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for range 3 {
		r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	testkit.WaitFor(t, 10*time.Second, "cluster_state:ok on every node", func() bool {
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			info, err := n.ClusterInfo(context.Background()).Result()
			_ = n.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	c.ReloadState(context.Background())
	return c
}

// TestDecisionsOnRedisCluster pins the key layout: every script's keys share
// a hash slot (no CROSSSLOT), and limits, claims, replays and refunds work
// when agents, endpoints and addresses live on different masters.
func TestDecisionsOnRedisCluster(t *testing.T) {
	c := startCluster(t)
	rl := server.RateLimitOptions{
		Tiers: map[string]rateT{"default": {Limit: 2, Period: time.Minute}, "anonymous": {Limit: 100, Period: time.Minute}},
		Endpoints: []server.EndpointLimit{
			{Method: "EXECUTE", Path: "/orders", Rate: rateT{Limit: 1000, Period: time.Minute}},
			{Method: "EXECUTE", Rate: rateT{Limit: 1000, Period: time.Minute}, PerAgent: true},
			{Path: "/scarce", Rate: rateT{Limit: 1, Period: time.Minute}},
		},
		PerIP:        rateT{Limit: 1000, Period: time.Minute},
		PerPrincipal: rateT{Limit: 1000, Period: time.Minute},
	}
	client := serve(t, c, server.Options{RateLimits: rl}, nil)
	ctx := context.Background()

	for i := range 20 {
		agent := fmt.Sprintf("%064x", i+1)
		r := withKey(request(agent), "k", "{}")
		r.Principal = fmt.Sprintf("owner-%d", i)
		first := authorize(t, client, r)
		wantAllow(t, first)
		if _, err := client.CompleteIdempotency(ctx, &policyv1.CompleteIdempotencyRequest{Claim: first.GetClaim(), Response: []byte("resp-" + agent)}); err != nil {
			t.Fatalf("agent %d: complete: %v", i, err)
		}
		again := authorize(t, client, r)
		if again.GetDecision() != policyv1.Decision_DECISION_REPLAY || string(again.GetReplayResponse()) != "resp-"+agent {
			t.Fatalf("agent %d: %v %q, want the replay", i, again.GetDecision(), again.GetReplayResponse())
		}
		// The tier (2 per minute) is spent: a third request is refused,
		// and its claim attempt leaves nothing behind.
		third := withKey(request(agent), "k2", "{}")
		wantDenial(t, authorize(t, client, third), 429, "rate-limited")
		if n := c.Exists(ctx, rediskeys.IdempotencySlot(agent, "k2")).Val(); n != 0 {
			t.Fatalf("agent %d: a refused request left a claim", i)
		}
	}
	// A shared limit on another master refuses: the caller's claim (on its
	// own master) is released again.
	scarce := func(agent string) *policyv1.AuthorizeRequest {
		r := withKey(request(agent), "scarce", "{}")
		r.PathTemplate = "/scarce"
		return r
	}
	wantAllow(t, authorize(t, client, scarce(agentA)))
	wantDenial(t, authorize(t, client, scarce(agentB)), 429, "rate-limited")
	if n := c.Exists(ctx, rediskeys.IdempotencySlot(agentB, "scarce")).Val(); n != 0 {
		t.Fatal("the claim of a request refused by a shared limit was not released")
	}

	anon := request("")
	wantAllow(t, authorize(t, client, anon))
	if r, err := client.CheckRateLimit(ctx, &policyv1.CheckRateLimitRequest{Scope: "rcns", Key: agentA}); err != nil || !r.GetAllowed() {
		t.Fatalf("CheckRateLimit on the cluster: %v, %v", r, err)
	}
}
