package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

// TestReusedDecisions runs the suite as processes with a policy whose
// decisions may be reused for five minutes (docs/policy.md, "Reused
// decisions"). A repeated request is answered without asking policysvc:
// with policysvc stopped it still gets its 200 and a signed record, while
// any request that differs in a field policy reads (an Authority-Scope,
// another agent) must ask and gets 503. Another agent never gets the
// first agent's decision, and a refusal is never reused.
func TestReusedDecisions(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policy, []byte(`{"decision_reuse": 300000000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Start(t, Options{ServiceEnv: map[string][]string{"policysvc": {"AGTP_POLICY_FILE=" + policy}}})
	reader := c.registerAgent(t, "reuse-reader", "orders:read")
	outsider := c.registerAgent(t, "reuse-outsider", "catalog:read")

	query := func(agent string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "QUERY", "/orders/ord-1001", "", headers...)
	}
	for i := range 3 {
		if resp, body := query(reader); resp.Status != agtp.StatusOK || resp.Header.Get(agtp.HeaderAttributionRecord) == "" {
			t.Fatalf("reader's QUERY %d = %d %v, want 200 with an Attribution-Record", i, resp.Status, body)
		}
	}
	for i := range 2 {
		if resp, body := query(outsider); resp.Status != agtp.StatusAuthorizationRequired || body["reason"] != "scope-required" {
			t.Fatalf("outsider's QUERY %d = %d %v, want 262 scope-required: the reader's decision is not the outsider's", i, resp.Status, body)
		}
	}

	c.Stop("policysvc", syscall.SIGKILL)
	if resp, body := query(reader); resp.Status != agtp.StatusOK || resp.Header.Get(agtp.HeaderAttributionRecord) == "" {
		t.Fatalf("the repeated QUERY with policysvc stopped = %d %v, want 200 from the reused decision", resp.Status, body)
	}
	for name, send := range map[string]func() (*agtp.Response, map[string]any){
		"the reader with an Authority-Scope": func() (*agtp.Response, map[string]any) {
			return query(reader, agtp.HeaderAuthorityScope, "orders:read")
		},
		"the outsider, refused before": func() (*agtp.Response, map[string]any) { return query(outsider) },
	} {
		if resp, body := send(); resp.Status != agtp.StatusUnavailable || body["reason"] != "policysvc-unavailable" {
			t.Errorf("%s with policysvc stopped = %d %v, want 503 policysvc-unavailable: only an identical, allowed request is answered without policysvc", name, resp.Status, body)
		}
	}
}
