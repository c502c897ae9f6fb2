package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
)

// TestRetry drives the RETRY built-in (standard methods §8.5; companions
// assertion 32) against the suite as processes: an unknown or another agent's
// task is 404, a non-idempotent task that succeeded is 409 and its effect
// is not repeated, a failed task runs again through every check under a
// new Task-ID, and the records link the RETRY and the re-run to the
// original task.
func TestRetry(t *testing.T) {
	c := Start(t, Options{})
	alice := c.registerAgent(t, "retry-alice", "orders:read", "orders:write")
	bob := c.registerAgent(t, "retry-bob", "orders:read", "orders:write")
	keys := c.signingKeys(t)

	orderCount := func(t *testing.T) int { return c.orderCount(t, alice) }
	// record verifies a response's Attribution-Record.
	record := func(t *testing.T, resp *agtp.Response) attribution.Payload {
		t.Helper()
		rec, err := attribution.Verify(resp.Header.Get(agtp.HeaderAttributionRecord), attribution.VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatalf("Attribution-Record does not verify: %v", err)
		}
		return rec.Payload
	}
	// stored fetches a record of alice's from the audit store by Audit-ID
	// (INSPECT, as alice).
	stored := func(t *testing.T, auditID string) attribution.Payload {
		t.Helper()
		got := c.roundTrip(t, request(t, "INSPECT", "/?target=audit&audit_id="+auditID, agtp.HeaderAgentID, alice))
		var out struct {
			JWS string `json:"jws"`
		}
		if got.Status != 200 || json.Unmarshal(got.Body, &out) != nil {
			t.Fatalf("INSPECT audit %s = %d %s", auditID, got.Status, got.Body)
		}
		jws := out.JWS
		rec, err := attribution.Verify(jws, attribution.VerifyOptions{Keys: keys})
		if err != nil || rec.AuditID != auditID {
			t.Fatalf("stored record %s does not verify: %v (%s)", auditID, err, got.Body)
		}
		return rec.Payload
	}
	originalTaskID := func(p attribution.Payload) string {
		var s string
		_ = json.Unmarshal(p.Extra["original_task_id"], &s)
		return s
	}
	retry := func(t *testing.T, agent, body string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "RETRY", "/", body, headers...)
	}
	refused := func(t *testing.T, resp *agtp.Response, eb map[string]any, status int, reason string) {
		t.Helper()
		if resp.Status != status || eb["reason"] != reason {
			t.Fatalf("= %d %s, want %d %s", resp.Status, resp.Body, status, reason)
		}
	}
	const newOrder = `{"customer_ref":"retry","lines":[{"sku":"widget","quantity":1}]}`

	t.Run("RETRY is a built-in listed in DISCOVER /methods", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DISCOVER", "/methods", agtp.HeaderAgentID, alice))
		if resp.Status != 200 || !strings.Contains(string(resp.Body), `"method":"RETRY"`) {
			t.Fatalf("DISCOVER /methods = %d %s", resp.Status, resp.Body)
		}
	})

	t.Run("400 without original_task_id", func(t *testing.T) {
		resp, eb := retry(t, alice, `{}`)
		refused(t, resp, eb, 400, "original-task-id-required")
	})

	t.Run("companions 32: an unknown original_task_id is 404, on the record", func(t *testing.T) {
		resp, eb := retry(t, alice, `{"original_task_id":"retry-no-such-task"}`)
		refused(t, resp, eb, 404, "task-not-found")
		if p := record(t, resp); p.AgentID != alice || p.Status != 404 || originalTaskID(p) != "retry-no-such-task" {
			t.Fatalf("record = %+v", p)
		}
	})

	t.Run("companions 32: a non-idempotent task that succeeded is 409 and not repeated", func(t *testing.T) {
		resp, _ := c.call(t, alice, "CREATE", "/orders", newOrder, agtp.HeaderTaskID, "retry-created")
		if resp.Status != 200 {
			t.Fatalf("CREATE = %d %s", resp.Status, resp.Body)
		}
		before := orderCount(t)
		resp, eb := retry(t, alice, `{"original_task_id":"retry-created"}`)
		refused(t, resp, eb, 409, "task-already-succeeded")
		if eb["original_task_id"] != "retry-created" {
			t.Fatalf("body = %s", resp.Body)
		}
		if after := orderCount(t); after != before {
			t.Fatalf("orders %d -> %d: the RETRY repeated the CREATE", before, after)
		}
	})

	t.Run("another agent's task is 404, never 403", func(t *testing.T) {
		resp, eb := retry(t, bob, `{"original_task_id":"retry-created"}`)
		refused(t, resp, eb, 404, "task-not-found")
	})

	t.Run("a failed task runs again under the caller's authority, linked to the original", func(t *testing.T) {
		before := orderCount(t)
		resp, eb := c.call(t, alice, "CREATE", "/orders", newOrder, agtp.HeaderTaskID, "retry-refused", agtp.HeaderAuthorityScope, "orders:read")
		refused(t, resp, eb, 262, "scope-required")
		if orderCount(t) != before {
			t.Fatal("the refused CREATE created an order")
		}

		// The same narrow authority fails the same way: every check runs.
		resp, eb = retry(t, alice, `{"original_task_id":"retry-refused"}`, agtp.HeaderAuthorityScope, "orders:read")
		refused(t, resp, eb, 262, "scope-required")

		resp, body := retry(t, alice, `{"original_task_id":"retry-refused","max_attempts":3}`,
			agtp.HeaderTaskID, "retry-second", agtp.HeaderAuthorityScope, "orders:read, orders:write")
		result, _ := body["result"].(map[string]any)
		orderID, _ := result["order_id"].(string)
		if resp.Status != 200 || orderID == "" || body["original_task_id"] != "retry-refused" || body["task_id"] != "retry-second" || body["attempt"] != float64(3) {
			t.Fatalf("RETRY = %d %s", resp.Status, resp.Body)
		}
		if after := orderCount(t); after != before+1 {
			t.Fatalf("orders %d -> %d, want one more", before, after)
		}
		p := record(t, resp)
		if p.Method != "RETRY" || originalTaskID(p) != "retry-refused" || p.TaskID != "retry-second" || len(p.PriorActions) != 1 {
			t.Fatalf("RETRY record = %+v", p)
		}
		rerun := stored(t, p.PriorActions[0].AuditID)
		if rerun.Method != "CREATE" || rerun.Status != 200 || rerun.TaskID != "retry-second" || originalTaskID(rerun) != "retry-refused" || rerun.AgentID != alice {
			t.Fatalf("re-run record = %+v", rerun)
		}

		// The re-run is a task of its own, and it succeeded.
		resp, eb = retry(t, alice, `{"original_task_id":"retry-second"}`)
		refused(t, resp, eb, 409, "task-already-succeeded")

		// Another RETRY of the original detects the success of the first
		// one and replays it instead of creating a second order.
		resp, body = retry(t, alice, `{"original_task_id":"retry-refused"}`, agtp.HeaderAuthorityScope, "orders:read, orders:write")
		result, _ = body["result"].(map[string]any)
		if resp.Status != 200 || result["order_id"] != orderID || resp.Header.Get(agtp.HeaderIdempotentReplayed) != "true" {
			t.Fatalf("second RETRY = %d %s", resp.Status, resp.Body)
		}
		if after := orderCount(t); after != before+1 {
			t.Fatalf("orders %d -> %d after the second RETRY, want %d", before, after, before+1)
		}

		// max_attempts counts the original and every RETRY that ran.
		resp, eb = retry(t, alice, `{"original_task_id":"retry-refused","max_attempts":4}`)
		refused(t, resp, eb, 409, "max-attempts-exhausted")
	})

	t.Run("a declared handler error runs again and answers as the handler does", func(t *testing.T) {
		body := `{"lines":[{"sku":"unobtainium","quantity":1}]}`
		resp, eb := c.call(t, alice, "CREATE", "/orders", body, agtp.HeaderTaskID, "retry-stock")
		refused(t, resp, eb, 422, "out_of_stock")
		resp, eb = retry(t, alice, `{"original_task_id":"retry-stock"}`)
		refused(t, resp, eb, 422, "out_of_stock")
		if eb["original_task_id"] != "retry-stock" || eb["attempt"] != float64(2) {
			t.Fatalf("RETRY = %s", resp.Body)
		}
	})

	t.Run("an idempotent task runs again; delay is answered 503 with Retry-After", func(t *testing.T) {
		resp, _ := c.call(t, alice, "QUERY", "/orders/ord-1002", "", agtp.HeaderTaskID, "retry-read")
		if resp.Status != 200 {
			t.Fatalf("QUERY = %d %s", resp.Status, resp.Body)
		}
		resp, eb := retry(t, alice, `{"original_task_id":"retry-read","delay":3600}`)
		refused(t, resp, eb, 503, "retry-delayed")
		if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Fatalf("Retry-After = %q", ra)
		}
		for attempt := 2; attempt <= 3; attempt++ {
			resp, body := retry(t, alice, `{"original_task_id":"retry-read"}`)
			result, _ := body["result"].(map[string]any)
			if resp.Status != 200 || result["order_id"] != "ord-1002" || body["attempt"] != float64(attempt) {
				t.Fatalf("RETRY %d = %d %s", attempt, resp.Status, resp.Body)
			}
		}
	})

	t.Run("a request without Task-ID is not indexed", func(t *testing.T) {
		resp, _ := c.call(t, alice, "QUERY", "/orders/ord-1002", "")
		if resp.Status != 200 {
			t.Fatal(resp.Status)
		}
		resp, eb := retry(t, alice, fmt.Sprintf(`{"original_task_id":%q}`, resp.Header.Get(agtp.HeaderResponseID)))
		refused(t, resp, eb, 404, "task-not-found")
	})
}
