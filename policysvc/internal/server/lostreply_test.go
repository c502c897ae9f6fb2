package server_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// replyDropper is a TCP proxy in front of redis-server that, once armed,
// passes the next command containing marker to Redis and cuts the
// client's connection before the reply reaches it: the command runs, and
// the client sees only a broken connection.
type replyDropper struct {
	ln     net.Listener
	target string
	marker []byte
	armed  atomic.Bool
}

func newReplyDropper(t *testing.T, target string, marker []byte) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target, marker: marker}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *replyDropper) serve(client net.Conn) {
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	defer upstream.Close()
	defer client.Close()
	go func() { _, _ = io.Copy(client, upstream); client.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			drop := bytes.Contains(chunk, p.marker) && p.armed.CompareAndSwap(true, false)
			if drop {
				client.Close()
			}
			if _, werr := upstream.Write(chunk); werr != nil || drop {
				if drop {
					time.Sleep(200 * time.Millisecond) // let Redis run it
				}
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// When the reply to a decision's script is lost, the Redis client sends
// the script again; the re-run finds the idempotency slot the first run
// claimed with its own token and claims it again, so the request is
// allowed with its claim instead of being refused as in flight (and the
// key blocked for the lease).
func TestLostScriptReplyStillClaimsAFreshKey(t *testing.T) {
	r := testkit.StartRedis(t)
	direct := r.Client(t)
	slot := rediskeys.IdempotencySlot(agentA, "fresh-key-1")
	proxy := newReplyDropper(t, r.Addr, []byte(slot))
	rdb := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { rdb.Close() })
	opts := server.Options{RateLimits: server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: 10, Period: time.Hour}}}}
	c := serve(t, rdb, opts, nil)
	wantAllow(t, authorize(t, c, request(agentA)))

	proxy.armed.Store(true)
	resp, err := c.Authorize(context.Background(), withKey(request(agentA), "fresh-key-1", `{"qty":1}`))
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW || resp.GetClaim() == nil {
		state, _ := direct.HGet(context.Background(), slot, rediskeys.SlotState).Result()
		t.Fatalf("a fresh key whose script reply was lost = %v %s; want ALLOW with its claim (slot %q)",
			resp.GetDecision(), resp.GetDenial().GetReason(), state)
	}
	if proxy.armed.Load() {
		t.Fatal("no reply was dropped: the test did not exercise a lost reply")
	}
}
