package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// TestSessionSuspendedWhileWatchDownIsRefusedAfterResync: a session
// suspended through another front door replica (here: identitysvc's
// SuspendSession called directly, as another front door does) must be
// refused by this front door too (docs/frontdoor.md, "Sessions"). When
// the suspension's notice is lost because the agent-event subscription
// was down, identitysvc resyncs the watch streams once it is back
// ("events may have been missed"); the front door must then stop trusting
// the Session-ID bindings it confirmed, as it does its agent records.
func TestSessionSuspendedWhileWatchDownIsRefusedAfterResync(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	agent := c.registerAgent(t, "sess-watch", "orders:read")
	// Another front door replica: identitysvc admits SuspendSession from
	// the front door's certificate only.
	otherReplica := identityv1.NewIdentityServiceClient(c.DialAs(t, "identitysvc", "frontdoor"))
	query := func(sid string) *agtp.Response {
		return c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid))
	}
	suspend := func(sid string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := otherReplica.SuspendSession(ctx, &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: agent, Reason: "elsewhere"}); err != nil {
			t.Fatalf("SuspendSession: %v", err)
		}
	}
	refusedWithin := func(sid string, d time.Duration) *agtp.Response {
		deadline := time.Now().Add(d)
		for {
			resp := query(sid)
			if resp.Status == 409 || time.Now().After(deadline) {
				return resp
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("control: the notice arrives", func(t *testing.T) {
		sid := "sess-" + strings.Repeat("3a", 12)
		if resp := query(sid); resp.Status != 200 {
			t.Fatalf("first use = %d %s", resp.Status, resp.Body)
		}
		suspend(sid)
		if resp := refusedWithin(sid, 5*time.Second); resp.Status != 409 {
			t.Fatalf("after a suspension elsewhere: %d %s, want 409 session-suspended", resp.Status, resp.Body)
		}
	})

	t.Run("the notice is lost while the subscription is down", func(t *testing.T) {
		sid := "sess-" + strings.Repeat("4b", 12)
		if resp := query(sid); resp.Status != 200 {
			t.Fatalf("first use = %d %s", resp.Status, resp.Body)
		}
		// Keep identitysvc's agent-event subscription down (every kill
		// is followed by a reconnect backoff of at least 50 ms) while the
		// session is suspended, so its notice reaches no subscriber.
		admin := c.Redis.Client(t)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_ = admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err()
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		time.Sleep(150 * time.Millisecond)
		suspend(sid)
		time.Sleep(150 * time.Millisecond)
		close(stop)
		wg.Wait()
		// The subscription comes back (backoff at most 2 s), identitysvc
		// resyncs every watch stream, and the front door's caches start
		// over: the session's next request is checked with identitysvc.
		if resp := refusedWithin(sid, 10*time.Second); resp.Status != 409 || errorBody(t, resp)["reason"] != "session-suspended" {
			t.Fatalf("10 s after the watch resynced, a request in the session suspended meanwhile = %d %s, want 409 session-suspended", resp.Status, resp.Body)
		}
	})
}
