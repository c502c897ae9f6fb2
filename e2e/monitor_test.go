package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestMonitor drives the MONITOR built-in (standard methods §8.3, §10.5;
// companions assertion 31) against the suite as processes: a subscription to
// an agent's lifecycle delivers each event once to the caller's inbox as a
// NOTIFY; a callback the caller may not receive at, or that is not
// reachable, is refused and creates no subscription; a monitor_cancel
// NOTIFY ends it.
func TestMonitor(t *testing.T) {
	c := Start(t, Options{Env: []string{outbound.EnvPeers + "=127.0.0.1:*"}})
	watcher := c.registerAgent(t, "mon-watcher", "orders:read")
	target := c.registerAgent(t, "mon-target", "orders:read")
	other := c.registerAgent(t, "mon-other", "orders:read")
	rdb := c.Redis.Client(t)
	subscriptions := func(t *testing.T) int64 {
		t.Helper()
		n, err := rdb.ZCard(context.Background(), rediskeys.MonitorIndex(target)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	monitor := func(t *testing.T, agent, body string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "MONITOR", "/", body)
	}
	type event struct {
		SubscriptionID string `json:"subscription_id"`
		Target         string `json:"target"`
		Event          string `json:"event"`
		Status         string `json:"status"`
		OccurredAt     string `json:"occurred_at"`
	}
	inbox := func(t *testing.T, agent string) []event {
		t.Helper()
		resp := c.roundTrip(t, request(t, "QUERY", "/inbox", agtp.HeaderAgentID, agent))
		var out struct {
			Entries []struct {
				Sender  string          `json:"sender_agent_id"`
				Content json.RawMessage `json:"content"`
			} `json:"entries"`
		}
		if resp.Status != agtp.StatusOK || json.Unmarshal(resp.Body, &out) != nil {
			t.Fatalf("QUERY /inbox = %d %s", resp.Status, resp.Body)
		}
		var evs []event
		for _, e := range out.Entries {
			var ev event
			if err := json.Unmarshal(e.Content, &ev); err != nil || e.Sender != target {
				t.Fatalf("inbox entry from %s: %s (%v)", e.Sender, e.Content, err)
			}
			evs = append(evs, ev)
		}
		return evs
	}

	t.Run("Supported-Methods lists MONITOR", func(t *testing.T) {
		first := c.dialAGTP(t).do(request(t, "DISCOVER", "/"))
		listed := false
		for _, m := range strings.Split(first.Header.Get(agtp.HeaderSupportedMethods), ",") {
			listed = listed || strings.TrimSpace(m) == "MONITOR"
		}
		if !listed {
			t.Fatalf("Supported-Methods %q lacks MONITOR", first.Header.Get(agtp.HeaderSupportedMethods))
		}
	})

	t.Run("refusals create no subscription", func(t *testing.T) {
		unknown := strings.Repeat("ab", 32)
		dead := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)) // allowed, nobody listens
		for _, tc := range []struct {
			name, body string
			status     int
			reason     string
		}{
			{"unknown target", `{"target":"` + unknown + `","events":["*"],"callback":"agtp://` + watcher + `"}`, 404, "agent-not-found"},
			{"target on another host", `{"target":"agtp://` + target + `@127.0.0.1:4480","events":["*"],"callback":"agtp://` + watcher + `"}`, 400, "monitor-target-invalid"},
			{"unknown event", `{"target":"` + target + `","events":["cpu_high"],"callback":"agtp://` + watcher + `"}`, 400, "monitor-events-invalid"},
			{"star with more", `{"target":"` + target + `","events":["*","suspended"],"callback":"agtp://` + watcher + `"}`, 400, "monitor-events-invalid"},
			{"no events", `{"target":"` + target + `","events":[],"callback":"agtp://` + watcher + `"}`, 400, "monitor-events-invalid"},
			{"webhook callback", `{"target":"` + target + `","events":["*"],"callback":"https://127.0.0.1:9/hook"}`, 400, "callback-invalid"},
			{"another agent's inbox", `{"target":"` + target + `","events":["*"],"callback":"agtp://` + other + `"}`, 403, "callback-not-authorized"},
			{"another agent on a host", `{"target":"` + target + `","events":["*"],"callback":"agtp://` + other + `@` + dead + `"}`, 403, "callback-not-authorized"},
			{"host off the allowlist", `{"target":"` + target + `","events":["*"],"callback":"agtp://` + watcher + `@agtp.elsewhere.test"}`, 403, outbound.Reason},
			{"unreachable allowed host", `{"target":"` + target + `","events":["*"],"callback":"agtp://` + watcher + `@` + dead + `"}`, 400, "callback-unreachable"},
			{"ttl over 7 days", `{"target":"` + target + `","events":["*"],"callback":"agtp://` + watcher + `","ttl":604801}`, 422, "input-invalid"},
		} {
			resp, body := monitor(t, watcher, tc.body)
			if resp.Status != tc.status || body["reason"] != tc.reason {
				t.Errorf("%s: MONITOR = %d %v, want %d %s", tc.name, resp.Status, body, tc.status, tc.reason)
			}
		}
		if n := subscriptions(t); n != 0 {
			t.Fatalf("%d subscriptions on the target after refusals, want 0", n)
		}
		if resp := c.roundTrip(t, withJSON(request(t, "MONITOR", "/"), `{"target":"`+target+`","events":["*"],"callback":"agtp://`+watcher+`"}`)); resp.Status != agtp.StatusUnauthorized {
			t.Errorf("anonymous MONITOR = %d, want 401", resp.Status)
		}
	})

	var subID string
	t.Run("a lifecycle event reaches the subscriber's inbox once", func(t *testing.T) {
		resp, body := monitor(t, watcher, `{"target":"`+target+`","events":["suspended","reinstated"],"callback":"agtp://`+watcher+`"}`)
		if resp.Status != agtp.StatusOK {
			t.Fatalf("MONITOR = %d %s", resp.Status, resp.Body)
		}
		subID, _ = body["subscription_id"].(string)
		expires, err := time.Parse(time.RFC3339Nano, body["expires_at"].(string))
		if subID == "" || body["target"] != target || body["callback"] != "agtp://"+watcher || err != nil ||
			time.Until(expires) < 23*time.Hour || time.Until(expires) > 25*time.Hour {
			t.Fatalf("MONITOR body = %v (expires_at %v), want a handle expiring in 24 h", body, err)
		}
		if n := subscriptions(t); n != 1 {
			t.Fatalf("%d subscriptions, want 1", n)
		}
		lifecycle(t, c, "DEACTIVATE", target, "maintenance")
		testkit.WaitFor(t, 10*time.Second, "the suspended notification", func() bool { return len(inbox(t, watcher)) > 0 })
		got := inbox(t, watcher)
		if len(got) != 1 || got[0].Event != "suspended" || got[0].Status != "suspended" || got[0].SubscriptionID != subID ||
			got[0].Target != target || got[0].OccurredAt == "" {
			t.Fatalf("inbox = %+v, want one suspended event of %s", got, subID)
		}
		// The refused callback's agent got nothing.
		if got := inbox(t, other); len(got) != 0 {
			t.Fatalf("the other agent's inbox = %+v, want empty", got)
		}
	})

	t.Run("only the subscriber cancels, with a monitor_cancel NOTIFY", func(t *testing.T) {
		cancel := `{"recipient":"` + target + `","content":{"event_type":"monitor_cancel","subscription_id":"` + subID + `"}}`
		if resp, body := c.call(t, other, "NOTIFY", "/", cancel); resp.Status != agtp.StatusNotFound || body["reason"] != "monitor-not-found" {
			t.Fatalf("another agent's cancel = %d %v, want 404 monitor-not-found", resp.Status, body)
		}
		if resp, body := c.call(t, watcher, "NOTIFY", "/", cancel); resp.Status != agtp.StatusOK || body["status"] != "cancelled" || body["subscription_id"] != subID {
			t.Fatalf("cancel = %d %v", resp.Status, body)
		}
		if resp, _ := c.call(t, watcher, "NOTIFY", "/", cancel); resp.Status != agtp.StatusNotFound {
			t.Fatalf("second cancel = %d, want 404", resp.Status)
		}
		if resp, body := c.call(t, watcher, "NOTIFY", "/", `{"recipient":"`+target+`","content":{"event_type":"monitor_cancel"}}`); resp.Status != agtp.StatusBadRequest || body["reason"] != "subscription-id-required" {
			t.Fatalf("cancel without subscription_id = %d %v", resp.Status, body)
		}
		if n := subscriptions(t); n != 0 {
			t.Fatalf("%d subscriptions after cancel, want 0", n)
		}
		// A cancel is not delivered: the target's inbox is empty.
		if n, err := rdb.XLen(context.Background(), rediskeys.Inbox(target)).Result(); err != nil || n != 0 {
			t.Fatalf("the target's inbox holds %d entries (%v), want 0", n, err)
		}
	})

	t.Run("after cancelling, events deliver nothing", func(t *testing.T) {
		// A second subscriber is the control: once its notification is
		// in, the watcher's would be too.
		resp, _ := monitor(t, other, `{"target":"agtp://`+target+`","events":"*","callback":"agtp://`+other+`"}`)
		if resp.Status != agtp.StatusOK {
			t.Fatalf("MONITOR = %d %s", resp.Status, resp.Body)
		}
		lifecycle(t, c, "REINSTATE", target, "done")
		lifecycle(t, c, "DEACTIVATE", target, "again")
		testkit.WaitFor(t, 10*time.Second, "the control's two notifications", func() bool { return len(inbox(t, other)) >= 2 })
		if got := inbox(t, other); len(got) != 2 || got[0].Event != "reinstated" || got[1].Event != "suspended" {
			t.Fatalf("control inbox = %+v, want reinstated then suspended", got)
		}
		if got := inbox(t, watcher); len(got) != 1 {
			t.Fatalf("the watcher's inbox has %d notifications after cancelling, want 1: %+v", len(got), got)
		}
	})
}
