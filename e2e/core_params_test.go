package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

// TestCoreParametersOverTheWire checks, over AGTP, that a client written
// to the core draft is served by the suite's endpoints: the per-method
// parameters of core §7.2 are accepted on every endpoint of their method
// and refused only by their own rules (docs/decisions.md#D-core-parameters),
// and QUOTE quotes a call in both its forms (standard methods §5.1).
func TestCoreParametersOverTheWire(t *testing.T) {
	c := Start(t, Options{InProcess: true})
	agent := c.registerAgent(t, "core-params", "orders:read", "orders:write", "documents:read", "reports:run")

	result := func(t *testing.T, resp *agtp.Response) string {
		t.Helper()
		var env struct{ Result json.RawMessage }
		if resp.Status != agtp.StatusOK || json.Unmarshal(resp.Body, &env) != nil {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
		return string(env.Result)
	}

	t.Run("core §7.2: QUERY's intent, scope, format and confidence_threshold get the endpoint's answer", func(t *testing.T) {
		plain, _ := c.call(t, agent, "QUERY", "/orders", `{"status":"open"}`)
		want := result(t, plain)
		for _, tc := range []struct{ target, body string }{
			{"/orders", `{"status":"open","intent":"my open orders","scope":["orders:read"],"format":"structured","confidence_threshold":0.75}`},
			{"/orders", `{"method":"QUERY","task_id":"t-core","parameters":{"status":"open","intent":"my open orders"},"context":{"turn":1}}`},
			{"/orders?status=open&format=raw&confidence_threshold=0.5", `{"intent":{"topic":"orders"}}`},
		} {
			resp, _ := c.call(t, agent, "QUERY", tc.target, tc.body)
			if got := result(t, resp); got != want {
				t.Errorf("QUERY %s %s = %s, want the plain answer %s", tc.target, tc.body, got, want)
			}
		}
	})

	t.Run("core §7.2: SUMMARIZE's and EXECUTE's parameters are accepted beside the endpoint's own", func(t *testing.T) {
		resp, _ := c.call(t, agent, "SUMMARIZE", "/documents", `{"text":"One. Two. Three.","max_sentences":1,"length":"brief","focus":"numbers","format":"prose","audience":"agents"}`)
		var summary struct{ Summary string }
		if err := json.Unmarshal([]byte(result(t, resp)), &summary); err != nil || summary.Summary == "" {
			t.Fatalf("SUMMARIZE = %s", resp.Body)
		}
		resp, _ = c.call(t, agent, "EXECUTE", "/reports/open-orders", `{"action":"run-report","period":"day"}`)
		var report struct {
			ReportID string `json:"report_id"`
			Period   string `json:"period"`
		}
		if err := json.Unmarshal([]byte(result(t, resp)), &report); err != nil || report.ReportID != "open-orders" || report.Period != "day" {
			t.Fatalf("EXECUTE = %s", resp.Body)
		}
	})

	t.Run("core §7.2: a core parameter that breaks its rule is 422 core-parameter-invalid naming it", func(t *testing.T) {
		for _, tc := range []struct{ method, target, body, location string }{
			{"QUERY", "/orders", `{"confidence_threshold":1.5}`, "/confidence_threshold"},
			{"QUERY", "/orders?confidence_threshold=high", ``, "/confidence_threshold"},
			{"QUERY", "/orders", `{"format":"bullets"}`, "/format"},
			{"QUERY", "/orders", `{"intent":""}`, "/intent"},
			{"SUMMARIZE", "/documents", `{"text":"One.","length":"short"}`, "/length"},
			{"EXECUTE", "/reports/open-orders", `{"action":{"name":"run"}}`, "/action"},
		} {
			resp, body := c.call(t, agent, tc.method, tc.target, tc.body)
			violations, _ := body["violations"].([]any)
			first, _ := func() (map[string]any, bool) {
				if len(violations) == 0 {
					return nil, false
				}
				m, ok := violations[0].(map[string]any)
				return m, ok
			}()
			if resp.Status != agtp.StatusUnprocessable || body["reason"] != "core-parameter-invalid" || first["location"] != tc.location {
				t.Errorf("%s %s %s = %d %s, want 422 core-parameter-invalid at %s", tc.method, tc.target, tc.body, resp.Status, resp.Body, tc.location)
			}
		}
		// Another method's parameter is not QUERY's: the endpoint's schema
		// refuses it as before.
		if resp, body := c.call(t, agent, "QUERY", "/orders", `{"action":"list"}`); resp.Status != agtp.StatusUnprocessable || body["reason"] != "input-invalid" {
			t.Errorf("QUERY with EXECUTE's action = %d %s, want 422 input-invalid", resp.Status, resp.Body)
		}
	})

	t.Run("companions 23-24: QUOTE /path quotes a call on that path; a method the path does not serve is 404", func(t *testing.T) {
		for _, tc := range []struct{ target, body string }{
			{"/orders", `{"method":"QUERY","parameters":{"status":"open","intent":"open orders"}}`},
			{"/orders?status=open", `{"method":"QUERY","parameters":{}}`},
			{"/", `{"method":"QUERY","path":"/orders","parameters":{"status":"open","confidence_threshold":0.9}}`},
		} {
			resp, _ := c.call(t, agent, "QUOTE", tc.target, tc.body)
			var q struct {
				Method, Path  string
				EstimatedCost map[string]map[string]float64 `json:"estimated_cost"`
			}
			if err := json.Unmarshal([]byte(result(t, resp)), &q); err != nil || q.Method != "QUERY" || q.Path != "/orders" ||
				len(q.EstimatedCost) == 0 || !resp.Header.Has(agtp.HeaderCostEstimate) {
				t.Errorf("QUOTE %s %s = %s", tc.target, tc.body, resp.Body)
			}
		}
		for _, tc := range []struct {
			target, body, reason string
			status               int
		}{
			{"/orders", `{"method":"PURCHASE","parameters":{}}`, "quote-method-unsupported", agtp.StatusNotFound},
			{"/", `{"method":"CANCEL","path":"/orders","parameters":{}}`, "quote-method-unsupported", agtp.StatusNotFound},
			{"/orders", `{"method":"FROBNICATE","parameters":{}}`, "quote-method-unsupported", agtp.StatusNotFound},
			{"/nothing-here", `{"method":"QUERY","parameters":{}}`, "not-found", agtp.StatusNotFound},
			{"/orders", `{"parameters":{}}`, "method-required", agtp.StatusBadRequest},
			{"/orders", `{"method":"QUERY"}`, "parameters-required", agtp.StatusBadRequest},
			{"/orders", `{"method":"QUERY","parameters":{"status":"lost"}}`, "quote-parameters-invalid", agtp.StatusUnprocessable},
			{"/orders", `{"method":"QUERY","parameters":{"confidence_threshold":2}}`, "quote-parameters-invalid", agtp.StatusUnprocessable},
		} {
			resp, body := c.call(t, agent, "QUOTE", tc.target, tc.body)
			if resp.Status != tc.status || body["reason"] != tc.reason {
				t.Errorf("QUOTE %s %s = %d %s, want %d %s", tc.target, tc.body, resp.Status, resp.Body, tc.status, tc.reason)
			}
		}
		// The 404 for a method the path does not serve says what it does.
		_, body := c.call(t, agent, "QUOTE", "/orders", `{"method":"PURCHASE","parameters":{}}`)
		if allowed, _ := body["allowed_methods_for_path"].([]any); !slices.Contains(allowed, any("QUERY")) {
			t.Errorf("404 body %v lacks allowed_methods_for_path with QUERY", body)
		}
	})
}
