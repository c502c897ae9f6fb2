package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/outbound"
	"github.com/agtpsuite/agtp/services/testkit"
)

// delegationToken signs the DELEGATE token of docs/mechanics.md.
func delegationToken(t *testing.T, key ed25519.PrivateKey, delegator, delegatee string, scope []string, task string, exp time.Time) string {
	t.Helper()
	canon, err := jcs.Canonicalize([]byte(task))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	payload, _ := json.Marshal(map[string]any{"delegator": delegator, "delegatee": delegatee, "scope": scope,
		"task_hash": hex.EncodeToString(sum[:]), "exp": exp.Unix()})
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMechanics(t *testing.T) {
	// The in-process suite reads the outbound lists from its environment:
	// the NOTIFY below names this webhook (loopback AGTP hosts are on the
	// suite's own list).
	c := Start(t, Options{InProcess: true, Env: []string{outbound.EnvWebhooks + "=https://hooks.invalid/agtp"}})
	worker, workerKey := c.registerAgentKey(t, "e2e-worker", "orders:read", "orders:write", "documents:read")
	reviewer := c.registerAgent(t, "e2e-reviewer", "orders:read")
	// The sub-agent takes delegated work: its Genesis says
	// delegation_permitted (docs/decisions.md#D-delegation-consent).
	sub := c.registerDelegatee(t, "e2e-sub", "orders:read")

	call := func(agent, method, path, body string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, method, path, body)
	}

	t.Run("an escalation pauses its task and a CONFIRM by the recipient resumes it", func(t *testing.T) {
		resp, esc := call(worker, "ESCALATE", "/", `{"task_id":"refund-77","reason":"ethical_flag","context":{"amount":9000},"priority":"urgent","recipient":"`+reviewer+`"}`)
		if resp.Status != agtp.StatusAccepted || esc["status"] != "pending_review" || esc["task_paused"] != true || esc["routed_to"] != reviewer {
			t.Fatalf("ESCALATE = %d %v", resp.Status, esc)
		}
		escID, _ := esc["escalation_id"].(string)
		if resp, task := call(worker, "QUERY", "/tasks/refund-77", ""); resp.Status != 200 || task["status"] != "escalated" || task["paused"] != true {
			t.Fatalf("task after ESCALATE = %d %v", resp.Status, task)
		}
		if resp, _ := call(reviewer, "QUERY", "/tasks/refund-77", ""); resp.Status != agtp.StatusNotFound {
			t.Fatalf("another agent's task = %d, want 404", resp.Status)
		}
		if resp, body := call(worker, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`); resp.Status != agtp.StatusForbidden {
			t.Fatalf("self-CONFIRM = %d %v, want 403", resp.Status, body)
		}
		resp, conf := call(reviewer, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`)
		att, _ := conf["attestation_id"].(string)
		if resp.Status != 200 || len(att) != 64 || conf["timestamp"] == "" || conf["task_status"] != "running" {
			t.Fatalf("CONFIRM = %d %v", resp.Status, conf)
		}
		if resp, task := call(worker, "QUERY", "/tasks/refund-77", ""); task["status"] != "running" || task["paused"] != false {
			t.Fatalf("task after CONFIRM = %d %v", resp.Status, task)
		}
		resp, again := call(reviewer, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`)
		if resp.Status != 200 || again["attestation_id"] != att || again["replayed"] != true {
			t.Fatalf("second CONFIRM = %d %v, want the same attestation %s", resp.Status, again, att)
		}
		// The attestation is a signed record in the reviewer's confirm stream.
		resp, rec := call(reviewer, "INSPECT", "/?target=audit&audit_id="+att, "")
		if resp.Status != 200 || !strings.Contains(string(resp.Body), escID) {
			t.Fatalf("INSPECT attestation = %d %v", resp.Status, rec)
		}
	})

	t.Run("CONFIRM of an unknown target is 404 and a rejection needs a reason", func(t *testing.T) {
		if resp, body := call(reviewer, "CONFIRM", "/", `{"target_id":"esc-00000000-0000-0000-0000-000000000000","status":"accepted"}`); resp.Status != agtp.StatusNotFound {
			t.Fatalf("unknown target = %d %v", resp.Status, body)
		}
		if resp, body := call(reviewer, "CONFIRM", "/", `{"target_id":"whatever","status":"rejected"}`); resp.Status != agtp.StatusBadRequest || body["reason"] == nil && body["code"] == nil {
			t.Fatalf("rejected without reason = %d %v", resp.Status, body)
		}
	})

	t.Run("NOTIFY answers a delivery receipt", func(t *testing.T) {
		resp, body := call(worker, "NOTIFY", "/", `{"recipient":"https://hooks.invalid/agtp","content":{"msg":"done"},"urgency":"informational","delivery_guarantee":"at_least_once"}`)
		id, _ := body["notification_id"].(string)
		if resp.Status != agtp.StatusAccepted || !strings.HasPrefix(id, "ntf-") {
			t.Fatalf("NOTIFY = %d %v", resp.Status, body)
		}
		if resp, n := call(worker, "QUERY", "/notifications/"+id, ""); resp.Status != 200 || n["notification_id"] != id {
			t.Fatalf("QUERY notification = %d %v", resp.Status, n)
		}
		if resp, _ := call(reviewer, "QUERY", "/notifications/"+id, ""); resp.Status != agtp.StatusNotFound {
			t.Fatalf("another agent's notification = %d, want 404", resp.Status)
		}
	})

	task := `{"method":"QUERY","path":"/orders"}`
	delegate := func(scope []string, token string) (*agtp.Response, map[string]any) {
		s, _ := json.Marshal(scope)
		return call(worker, "DELEGATE", "/", `{"target_agent_id":"`+sub+`","task":`+task+`,"authority_scope":`+string(s)+`,"delegation_token":"`+token+`","task_id":"batch-1"}`)
	}
	exp := time.Now().Add(time.Hour)

	t.Run("DELEGATE with a scope wider than the delegator's is 262 scope-required", func(t *testing.T) {
		scope := []string{"orders:read", "payments:write"}
		resp, body := delegate(scope, delegationToken(t, workerKey, worker, sub, scope, task, exp))
		if resp.Status != agtp.StatusAuthorizationRequired || !strings.Contains(string(resp.Body), "scope-required") {
			t.Fatalf("wide DELEGATE = %d %v", resp.Status, body)
		}
	})

	t.Run("DELEGATE with a forged token is 551 authority-chain-broken", func(t *testing.T) {
		_, forger, _ := ed25519.GenerateKey(rand.Reader)
		scope := []string{"orders:read"}
		resp, body := delegate(scope, delegationToken(t, forger, worker, sub, scope, task, exp))
		if resp.Status != agtp.StatusAuthorityChainBroken || !strings.Contains(string(resp.Body), "authority-chain-broken") {
			t.Fatalf("forged DELEGATE = %d %v", resp.Status, body)
		}
	})

	t.Run("a valid DELEGATE runs on the sub-agent with the narrowed scope and the hops can be rebuilt from INSPECT", func(t *testing.T) {
		scope := []string{"orders:read"}
		resp, body := delegate(scope, delegationToken(t, workerKey, worker, sub, scope, task, exp))
		if resp.Status != agtp.StatusOK || body["status"] != "delegated" || body["executed"] != true {
			t.Fatalf("DELEGATE = %d %v", resp.Status, body)
		}
		results, _ := body["results"].([]any)
		if len(results) != 1 || results[0].(map[string]any)["status"] != float64(200) {
			t.Fatalf("sub-agent results = %v", body["results"])
		}
		// Hop 1: the delegator's signed hop record names the sub-agent and the scope.
		auditID, _ := body["audit_id"].(string)
		resp, _ = call(worker, "INSPECT", "/?target=audit&audit_id="+auditID, "")
		if resp.Status != 200 || !strings.Contains(string(resp.Body), sub) || !strings.Contains(string(resp.Body), "orders:read") {
			t.Fatalf("INSPECT hop = %d %s", resp.Status, resp.Body)
		}
		// Hop 2: the sub-agent's own Attribution-Record of the call it ran.
		subAudit, _ := results[0].(map[string]any)["audit_id"].(string)
		resp, rec := call(sub, "INSPECT", "/?target=audit&audit_id="+subAudit, "")
		if resp.Status != 200 || rec["chain_agent_id"] != sub {
			t.Fatalf("INSPECT sub-agent record = %d %v", resp.Status, rec)
		}
		if resp, tk := call(worker, "QUERY", "/tasks/batch-1", ""); tk["status"] != "delegated" {
			t.Fatalf("task after DELEGATE = %d %v", resp.Status, tk)
		}
	})

	t.Run("a DELEGATE the sub-agent cannot carry out is 550 with its error", func(t *testing.T) {
		// documents:read is within the delegator's scopes but the sub-agent
		// does not hold it, so its call is refused.
		scope := []string{"documents:read"}
		resp, body := delegate(scope, delegationToken(t, workerKey, worker, sub, scope, task, exp))
		if resp.Status != agtp.StatusDelegationFailure || !strings.Contains(string(resp.Body), "delegation-failure") || !strings.Contains(string(resp.Body), "results") {
			t.Fatalf("failing DELEGATE = %d %v", resp.Status, body)
		}
	})

	t.Run("a DELEGATE to a sub-agent on a host that cannot be reached is 550 and the hop stays recorded", func(t *testing.T) {
		dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(testkit.FreePort(t))) // nobody listens
		scope := []string{"orders:read"}
		target := "agtp://" + sub + "@" + dead
		s, _ := json.Marshal(scope)
		resp, body := call(worker, "DELEGATE", "/", `{"target_agent_id":"`+target+`","task":`+task+`,"authority_scope":`+string(s)+`,"task_id":"batch-dead","delegation_token":"`+
			delegationToken(t, workerKey, worker, sub, scope, task, exp)+`"}`)
		if resp.Status != agtp.StatusDelegationFailure || body["delegation_id"] == nil || body["audit_id"] == nil {
			t.Fatalf("DELEGATE to a dead host = %d %v", resp.Status, body)
		}
		if resp, tk := call(worker, "QUERY", "/tasks/batch-dead", ""); tk["status"] != "failed" {
			t.Fatalf("task after a failed remote hop = %d %v", resp.Status, tk)
		}
	})

	t.Run("CONFIRM with status maybe is refused", func(t *testing.T) {
		if resp, body := call(reviewer, "CONFIRM", "/", `{"target_id":"anything","status":"maybe"}`); resp.Status != agtp.StatusBadRequest && resp.Status != agtp.StatusUnprocessable {
			t.Fatalf("CONFIRM maybe = %d %v, want 400 or 422", resp.Status, body)
		}
	})

	t.Run("a NOTIFY to an agent hosted here lands in its inbox; an unknown one is 404", func(t *testing.T) {
		resp, body := call(worker, "NOTIFY", "/", `{"recipient":"agtp://`+reviewer+`","content":{"msg":"look"}}`)
		if resp.Status != agtp.StatusAccepted || body["status"] != "delivered" || body["recipient_kind"] != "agent" {
			t.Fatalf("NOTIFY to a local agent = %d %v", resp.Status, body)
		}
		unknown := strings.Repeat("d", 64)
		if resp, body := call(worker, "NOTIFY", "/", `{"recipient":"`+unknown+`","content":1}`); resp.Status != agtp.StatusNotFound || body["reason"] != "recipient-not-found" {
			t.Fatalf("NOTIFY to an unknown agent = %d %v", resp.Status, body)
		}
		if resp, body := call(worker, "NOTIFY", "/", `{"recipient":"group:nobody","content":1}`); resp.Status != agtp.StatusNotFound {
			t.Fatalf("NOTIFY to an unknown group = %d %v", resp.Status, body)
		}
	})
}
