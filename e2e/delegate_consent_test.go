package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/identitysvc/genesis"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// delegateeTemplate is agentTemplate for an agent whose Genesis permits
// delegation (delegation_permitted: true), plus extra members.
func delegateeTemplate(name string, extra map[string]any, scopes ...string) genesis.Template {
	tmpl := agentTemplate(name, scopes...)
	tmpl.Extra = map[string]any{genesis.FieldDelegationPermitted: true}
	for k, v := range extra {
		tmpl.Extra[k] = v
	}
	return tmpl
}

// registerDelegatee registers an agent that takes delegated work.
func (c *Cluster) registerDelegatee(t *testing.T, name string, scopes ...string) string {
	t.Helper()
	return c.registerTemplate(t, name, delegateeTemplate(name, nil, scopes...))
}

func (c *Cluster) registerTemplate(t *testing.T, name string, tmpl genesis.Template) string {
	t.Helper()
	g, priv := signGenesis(t, tmpl)
	return c.registerGenesis(t, name, g, priv)
}

// newPortableDelegatee is newPortableAgent for an agent that takes
// delegated work.
func newPortableDelegatee(t *testing.T, name string, scopes ...string) *portableAgent {
	t.Helper()
	g, priv := signGenesis(t, delegateeTemplate(name, nil, scopes...))
	return &portableAgent{key: priv, genesis: g, name: name}
}

// TestDelegateConsentAndRefusals: a DELEGATE hands work only to a
// sub-agent whose own identity document permits it, never reaches the
// built-ins that act as the sub-agent in person, never runs on a paused
// or ended task, and writes a bounded detail into the task's history
// (docs/mechanics.md, DELEGATE; docs/decisions.md#D-delegation-consent).
func TestDelegateConsentAndRefusals(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	worker, workerKey := c.registerAgentKey(t, "dc-worker", "orders:read", "orders:write", "documents:read")
	reviewer := c.registerDelegatee(t, "dc-reviewer", "orders:read", "orders:write")
	closed := c.registerAgent(t, "dc-closed", "orders:read", "orders:write")
	refusing := c.registerTemplate(t, "dc-refusing", func() genesis.Template {
		tmpl := agentTemplate("dc-refusing", "orders:read", "orders:write")
		tmpl.Extra = map[string]any{genesis.FieldDelegationPermitted: false}
		return tmpl
	}())
	depth0 := c.registerTemplate(t, "dc-depth0", delegateeTemplate("dc-depth0", map[string]any{genesis.FieldMaxDelegationDepth: 0.0}, "orders:read", "orders:write"))
	depth1 := c.registerTemplate(t, "dc-depth1", delegateeTemplate("dc-depth1", map[string]any{genesis.FieldMaxDelegationDepth: 1.0}, "orders:read", "orders:write"))

	call := func(agent, method, path, body string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, method, path, body)
	}
	scope := []string{"orders:read", "orders:write"}
	exp := time.Now().Add(time.Hour)
	delegate := func(t *testing.T, target, taskID, task string) (*agtp.Response, map[string]any) {
		t.Helper()
		s, _ := json.Marshal(scope)
		body := `{"target_agent_id":"` + target + `","task":` + task + `,"authority_scope":` + string(s) +
			`,"delegation_token":"` + delegationToken(t, workerKey, worker, target, scope, task, exp) + `"`
		if taskID != "" {
			body += `,"task_id":"` + taskID + `"`
		}
		return c.call(t, worker, "DELEGATE", "/", body+"}")
	}
	createOrder := `{"method":"CREATE","path":"/orders","body":{"lines":[{"sku":"widget","quantity":1}]}}`
	taskOf := func(t *testing.T, id string) (int, map[string]any) {
		t.Helper()
		resp, body := call(worker, "QUERY", "/tasks/"+id, "")
		return resp.Status, body
	}
	noTask := func(t *testing.T, id string) {
		t.Helper()
		if st, body := taskOf(t, id); st != agtp.StatusNotFound {
			t.Fatalf("a refused DELEGATE recorded task %s: %d %v", id, st, body)
		}
	}
	escalate := func(t *testing.T, taskID string) string {
		t.Helper()
		resp, esc := call(worker, "ESCALATE", "/", `{"task_id":"`+taskID+`","reason":"ethical_flag","context":{"n":1},"recipient":"`+reviewer+`"}`)
		id, _ := esc["escalation_id"].(string)
		if resp.Status != agtp.StatusAccepted || id == "" {
			t.Fatalf("ESCALATE = %d %v", resp.Status, esc)
		}
		return id
	}

	t.Run("the delegator cannot CONFIRM its own escalation through the reviewer", func(t *testing.T) {
		escID := escalate(t, "dc-deputy-esc")
		if resp, body := call(worker, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`); resp.Status != agtp.StatusForbidden {
			t.Fatalf("self-CONFIRM = %d %v, want 403", resp.Status, body)
		}
		task := `{"method":"CONFIRM","path":"/","body":{"target_id":"` + escID + `","status":"accepted"}}`
		resp, body := delegate(t, reviewer, "dc-deputy", task)
		if resp.Status != agtp.StatusForbidden || body["reason"] != "delegated-call-refused" {
			t.Fatalf("DELEGATE of the reviewer's CONFIRM = %d %v, want 403 delegated-call-refused", resp.Status, body)
		}
		if st, tk := taskOf(t, "dc-deputy-esc"); st != 200 || tk["status"] != "escalated" {
			t.Fatalf("the escalated task after the refused DELEGATE = %d %v", st, tk)
		}
		noTask(t, "dc-deputy")
		// The reviewer's own CONFIRM is its first: no attestation was made
		// in its name.
		resp, conf := call(reviewer, "CONFIRM", "/", `{"target_id":"`+escID+`","status":"accepted"}`)
		if resp.Status != 200 || conf["replayed"] == true || conf["task_status"] != "running" {
			t.Fatalf("the reviewer's CONFIRM = %d %v, want its first attestation", resp.Status, conf)
		}
	})

	t.Run("a sub-agent whose identity does not permit delegation takes no work and nothing runs", func(t *testing.T) {
		for _, tc := range []struct{ name, agent string }{
			{"delegation_permitted absent", closed},
			{"delegation_permitted false", refusing},
			{"max_delegation_depth 0", depth0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := c.orderCount(t, tc.agent)
				taskID := "dc-closed-" + strings.ReplaceAll(tc.name, " ", "-")
				resp, body := delegate(t, tc.agent, taskID, createOrder)
				link, _ := body["failing_link"].(string)
				if resp.Status != agtp.StatusAuthorityChainBroken || body["reason"] != "authority-chain-broken" || !strings.Contains(link, "delegatee consent") {
					t.Fatalf("DELEGATE = %d %v, want 551 with the delegatee's consent as the failing link", resp.Status, body)
				}
				if after := c.orderCount(t, tc.agent); after != before {
					t.Fatalf("the refused DELEGATE made %d orders", after-before)
				}
				noTask(t, taskID)
			})
		}
	})

	t.Run("a sub-agent that permits delegation runs an ordinary call", func(t *testing.T) {
		for _, agent := range []string{reviewer, depth1} {
			before := c.orderCount(t, agent)
			resp, body := delegate(t, agent, "", createOrder)
			if resp.Status != agtp.StatusOK || body["status"] != "delegated" {
				t.Fatalf("DELEGATE = %d %v", resp.Status, body)
			}
			if after := c.orderCount(t, agent); after != before+1 {
				t.Fatalf("orders %d -> %d, want one more", before, after)
			}
		}
	})

	t.Run("a delegated call to a built-in that acts as the sub-agent is refused", func(t *testing.T) {
		before := c.orderCount(t, reviewer)
		for i, tc := range []struct{ method, path, body string }{
			{"CONFIRM", "/", `{"target_id":"esc-x","status":"accepted"}`},
			{"ESCALATE", "/", `{"task_id":"t","reason":"ethical_flag","context":{}}`},
			{"SUSPEND", "/", `{}`},
			{"RESUME", "/", `{}`},
			{"ACTIVATE", "/", `{"agent_id":"` + reviewer + `"}`},
			{"DEACTIVATE", "/", `{"agent_id":"` + reviewer + `"}`},
			{"REVOKE", "/", `{"agent_id":"` + reviewer + `","reason":"x"}`},
			{"REINSTATE", "/", `{"agent_id":"` + reviewer + `"}`},
			{"DEPRECATE", "/", `{"agent_id":"` + reviewer + `"}`},
			{"RETRY", "/", `{"original_task_id":"t"}`},
			{"DELEGATE", "/", `{}`},
			{"QUERY", "/inbox", ""},
			{"QUERY", "/inbox?limit=5", ""},
			{"QUERY", "/tasks/dc-anything", ""},
			{"QUERY", "/notifications/ntf-x", ""},
		} {
			t.Run(tc.method+" "+tc.path, func(t *testing.T) {
				one := `{"method":"` + tc.method + `","path":"` + tc.path + `"`
				if tc.body != "" {
					one += `,"body":` + tc.body
				}
				one += "}"
				taskID := "dc-refused-" + string(rune('a'+i))
				// Alone, and after an ordinary call: nothing of the
				// sequence runs.
				for _, task := range []string{one, "[" + createOrder + "," + one + "]"} {
					resp, body := delegate(t, reviewer, taskID, task)
					if resp.Status != agtp.StatusForbidden || body["reason"] != "delegated-call-refused" || body["method"] != tc.method {
						t.Fatalf("DELEGATE of %s = %d %v, want 403 delegated-call-refused", task, resp.Status, body)
					}
				}
				noTask(t, taskID)
			})
		}
		if after := c.orderCount(t, reviewer); after != before {
			t.Fatalf("refused DELEGATEs made %d orders", after-before)
		}
	})

	t.Run("a paused or ended task refuses DELEGATE and runs nothing", func(t *testing.T) {
		escalate(t, "dc-paused")
		rejected := escalate(t, "dc-rejected")
		if resp, body := call(reviewer, "CONFIRM", "/", `{"target_id":"`+rejected+`","status":"rejected","reason":"no"}`); resp.Status != 200 {
			t.Fatalf("CONFIRM rejected = %d %v", resp.Status, body)
		}
		// A DELEGATE that fails ends its task too.
		if resp, body := delegate(t, reviewer, "dc-failed", `{"method":"QUERY","path":"/orders/ord-does-not-exist"}`); resp.Status != agtp.StatusDelegationFailure {
			t.Fatalf("failing DELEGATE = %d %v", resp.Status, body)
		}
		for _, tc := range []struct{ taskID, status, reason string }{
			{"dc-paused", "escalated", "task-paused"},
			{"dc-rejected", "rejected", "task-ended"},
			{"dc-failed", "failed", "task-ended"},
		} {
			t.Run(tc.status, func(t *testing.T) {
				_, before := taskOf(t, tc.taskID)
				orders := c.orderCount(t, reviewer)
				resp, body := delegate(t, reviewer, tc.taskID, createOrder)
				if resp.Status != agtp.StatusConflict || body["reason"] != tc.reason {
					t.Fatalf("DELEGATE on a %s task = %d %v, want 409 %s", tc.status, resp.Status, body, tc.reason)
				}
				if after := c.orderCount(t, reviewer); after != orders {
					t.Fatalf("the refused DELEGATE made %d orders", after-orders)
				}
				_, after := taskOf(t, tc.taskID)
				if after["status"] != tc.status || len(after["history"].([]any)) != len(before["history"].([]any)) {
					t.Fatalf("task after the refused DELEGATE = %v, was %v", after, before)
				}
			})
		}
	})

	t.Run("a long path yields a bounded history detail", func(t *testing.T) {
		long := "/orders/" + strings.Repeat("x", 256<<10)
		resp, body := delegate(t, reviewer, "dc-long", `{"method":"QUERY","path":"`+long+`"}`)
		if resp.Status != agtp.StatusDelegationFailure {
			t.Fatalf("DELEGATE with a long path = %d %.300v", resp.Status, body)
		}
		if expl, _ := body["explanation"].(string); len(expl) > 2048 {
			t.Fatalf("the 550's explanation is %d bytes", len(expl))
		}
		st, tk := taskOf(t, "dc-long")
		history, _ := tk["history"].([]any)
		if st != 200 || len(history) == 0 {
			t.Fatalf("task = %d %v", st, tk)
		}
		last, _ := history[len(history)-1].(map[string]any)
		detail, _ := last["detail"].(string)
		if last["event"] != "delegated" || last["status"] != "failed" || len(detail) > 2048 {
			t.Fatalf("history detail is %d bytes (event %v): %.200s", len(detail), last["event"], detail)
		}
	})

	t.Run("RecordDelegation refuses a paused or ended task and bounds the detail", func(t *testing.T) {
		tasks := taskv1.NewTaskServiceClient(c.DialAs(t, "policysvc", "frontdoor"))
		record := func(taskID, detail string) (*taskv1.RecordDelegationResponse, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return tasks.RecordDelegation(ctx, &taskv1.RecordDelegationRequest{DelegatorAgentId: worker, DelegateeAgentId: reviewer,
				TaskId: taskID, AuthorityScope: scope, TaskHash: strings.Repeat("a", 64), AuditId: strings.Repeat("b", 64), Detail: detail})
		}
		for _, tc := range []struct{ taskID, reason string }{
			{"dc-paused", "task-paused"},
			{"dc-rejected", "task-ended"},
			{"dc-failed", "task-ended"},
		} {
			_, err := record(tc.taskID, "")
			if code, reason, _, _ := grpcerr.Reason(err); code != codes.Aborted || reason != tc.reason {
				t.Fatalf("RecordDelegation on %s = %v, want Aborted %s", tc.taskID, err, tc.reason)
			}
		}
		r, err := record("dc-detail", strings.Repeat("é", 100<<10))
		if err != nil {
			t.Fatal(err)
		}
		h := r.GetTask().GetHistory()
		if d := h[len(h)-1].GetDetail(); len(d) > 1024+512 || !strings.Contains(d, "(truncated)") {
			t.Fatalf("recorded detail is %d bytes: %.100s", len(d), d)
		}
	})
}
