package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestInbox: an agent reads the notifications delivered to it over AGTP
// (QUERY /inbox), and nobody else's.
func TestInbox(t *testing.T) {
	c := Start(t, Options{})
	sender := c.registerAgent(t, "inbox-sender", "orders:read")
	recipient := c.registerAgent(t, "inbox-recipient", "orders:read")

	call := func(agent, method, path, body string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, method, path, body)
	}
	type entry struct {
		NotificationID string          `json:"notification_id"`
		Sender         string          `json:"sender_agent_id"`
		Content        json.RawMessage `json:"content"`
		Urgency        string          `json:"urgency"`
	}
	inbox := func(agent, query string) ([]entry, string) {
		t.Helper()
		resp := c.roundTrip(t, request(t, "QUERY", "/inbox"+query, agtp.HeaderAgentID, agent))
		if resp.Status != agtp.StatusOK {
			t.Fatalf("QUERY /inbox%s as %s = %d %s", query, agent[:8], resp.Status, resp.Body)
		}
		var out struct {
			Entries []entry `json:"entries"`
			Next    string  `json:"next_cursor"`
		}
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			t.Fatalf("inbox body %s: %v", resp.Body, err)
		}
		return out.Entries, out.Next
	}

	var sent []string
	for i, msg := range []string{`{"msg":"first"}`, `{"msg":"second"}`, `{"msg":"third"}`} {
		urgency := []string{"background", "informational", "critical"}[i]
		resp, body := call(sender, "NOTIFY", "/", `{"recipient":"`+recipient+`","urgency":"`+urgency+`","content":`+msg+`}`)
		if resp.Status != agtp.StatusAccepted || body["status"] != "delivered" {
			t.Fatalf("NOTIFY %d = %d %v", i, resp.Status, body)
		}
		sent = append(sent, body["notification_id"].(string))
	}

	t.Run("the recipient reads its notifications oldest first, in pages", func(t *testing.T) {
		page, next := inbox(recipient, "?limit=2")
		if len(page) != 2 || next == "" {
			t.Fatalf("first page = %+v next %q, want 2 entries and a cursor", page, next)
		}
		rest, _ := inbox(recipient, "?cursor="+next)
		all := append(page, rest...)
		if len(all) != len(sent) {
			t.Fatalf("inbox has %d entries, want %d: %+v", len(all), len(sent), all)
		}
		for i, e := range all {
			if e.NotificationID != sent[i] || e.Sender != sender {
				t.Errorf("entry %d = %+v, want notification %s from %s", i, e, sent[i], sender[:8])
			}
		}
		if string(all[2].Content) != `{"msg":"third"}` || all[2].Urgency != "critical" {
			t.Errorf("third entry content %s urgency %q", all[2].Content, all[2].Urgency)
		}
	})

	t.Run("another agent sees none of them", func(t *testing.T) {
		if got, _ := inbox(sender, ""); len(got) != 0 {
			t.Fatalf("the sender's inbox = %+v, want empty", got)
		}
	})

	t.Run("a bad cursor or limit is 422 and an unknown caller 401", func(t *testing.T) {
		if resp, body := call(recipient, "QUERY", "/inbox?limit=1000", ""); resp.Status != agtp.StatusUnprocessable || body["reason"] != "input-invalid" {
			t.Errorf("limit=1000 = %d %v, want 422 input-invalid", resp.Status, body)
		}
		if resp, body := call(recipient, "QUERY", "/inbox?cursor=drop%20table", ""); resp.Status != agtp.StatusUnprocessable {
			t.Errorf("bad cursor = %d %v, want 422", resp.Status, body)
		}
		if resp := c.roundTrip(t, request(t, "QUERY", "/inbox")); resp.Status != agtp.StatusUnauthorized {
			t.Errorf("QUERY /inbox without Agent-ID = %d %s, want 401", resp.Status, resp.Body)
		}
	})

	t.Run("an expired notification is left out", func(t *testing.T) {
		expiry := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		resp, body := call(sender, "NOTIFY", "/", `{"recipient":"`+recipient+`","expiry":"`+expiry+`","content":{"msg":"soon stale"}}`)
		if resp.Status != agtp.StatusAccepted {
			t.Fatalf("NOTIFY with expiry = %d %v", resp.Status, body)
		}
		id := body["notification_id"].(string)
		has := func() bool {
			entries, _ := inbox(recipient, "")
			for _, e := range entries {
				if e.NotificationID == id {
					return true
				}
			}
			return false
		}
		if !has() {
			t.Fatal("the notification is not in the inbox before its expiry")
		}
		testkit.WaitFor(t, 10*time.Second, "the expired notification to leave the inbox", func() bool { return !has() })
	})
}
