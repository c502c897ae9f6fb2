package server

import (
	"strings"
	"testing"
)

// api assertions 80-83 and AGTP-API §10.6 steps 1-4, each failing alone.
func TestProposeStructuralFailuresInEvaluationOrder(t *testing.T) {
	e := newEnv(t, envConfig{})
	mutate := func(f func(map[string]any)) map[string]any {
		ep := orderSummaryEndpoint()
		f(ep)
		return map[string]any{"endpoint": ep}
	}
	sem := func(ep map[string]any) map[string]any { return ep["semantic"].(map[string]any) }
	cases := []struct {
		name    string
		params  map[string]any
		status  int32
		reason  string
		segment string
	}{
		{"method not in catalog is 459", mutate(func(ep map[string]any) { ep["method"] = "FROBNICATE" }), 459, "method-not-in-catalog", ""},
		{"malformed method is 459", mutate(func(ep map[string]any) { ep["method"] = "Summarize_2" }), 459, "method-invalid", ""},
		{"verb in path is 460", mutate(func(ep map[string]any) { ep["path"] = "/book/reserve" }), 460, "method-name-in-path", "book"},
		{"trailing slash is 460", mutate(func(ep map[string]any) { ep["path"] = "/orders/" }), 460, "trailing-slash", ""},
		{"bad method beats bad path", mutate(func(ep map[string]any) { ep["method"] = "FROBNICATE"; ep["path"] = "/book/reserve" }), 459, "method-not-in-catalog", ""},
		{"impact maybe is 400", mutate(func(ep map[string]any) { sem(ep)["impact"] = "maybe" }), 400, "semantic-invalid", ""},
		{"confidence 1.5 is 400", mutate(func(ep map[string]any) { sem(ep)["confidence"] = 1.5 }), 400, "semantic-invalid", ""},
		{"missing outcome is 400", mutate(func(ep map[string]any) { delete(sem(ep), "outcome") }), 400, "semantic-invalid", ""},
		{"input schema type 7 is 400", mutate(func(ep map[string]any) { ep["input_schema"] = map[string]any{"type": 7} }), 400, "schema-invalid", ""},
		{"open input schema is 400", mutate(func(ep map[string]any) {
			ep["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}
		}), 400, "schema-invalid", ""},
		{"semantic fails before schema", mutate(func(ep map[string]any) { sem(ep)["impact"] = "maybe"; ep["input_schema"] = map[string]any{"type": 7} }), 400, "semantic-invalid", ""},
		{"missing path is 400", mutate(func(ep map[string]any) { delete(ep, "path") }), 400, "proposal-incomplete", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.propose(reader(), tc.params, "")
			if resp.GetStatus() != tc.status || b["reason"] != tc.reason {
				t.Fatalf("got %d %v, want %d %s", resp.GetStatus(), b, tc.status, tc.reason)
			}
			if tc.status == 459 && (b["method"] == nil || b["catalog_version"] != "1.0.0") {
				t.Errorf("459 body lacks method or catalog_version: %v", b)
			}
			if tc.segment != "" && b["segment"] != tc.segment {
				t.Errorf("460 segment = %v, want %s", b["segment"], tc.segment)
			}
			if resp.GetContract() != nil {
				t.Error("a refused proposal carries a contract")
			}
		})
	}
}

// api assertion 84 (AGTP-API §10.6, §10.7): the scopes of every composed
// step.
func TestProposeWithoutStepScopesIs262ScopeRequired(t *testing.T) {
	e := newEnv(t, envConfig{})
	resp, b := e.propose(caller(agentX, sessionA, 1, "documents:read"), orderSummary(), "")
	if resp.GetStatus() != 262 || b["reason"] != "scope-required" || b["type"] != "scope-required" || b["scope"] != "orders:read" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	if resp.GetNegotiationId() == "" || b["negotiation_id"] != resp.GetNegotiationId() {
		t.Errorf("262 does not carry the Negotiation-ID: %q %v", resp.GetNegotiationId(), b["negotiation_id"])
	}
	// A wildcard grant covers the step.
	if resp, _ := e.propose(caller(agentX, sessionA, 1, "orders:*"), orderSummary(), ""); resp.GetStatus() != 263 {
		t.Fatalf("orders:* did not cover orders:read: %d", resp.GetStatus())
	}
}

// api assertion 86 (AGTP-API §8.7).
func TestProposeDeeperThanMaxSynthesisDepthNever263(t *testing.T) {
	pol := defaultPolicies()
	pol.MaxSynthesisDepth = 1
	e := newEnv(t, envConfig{policies: pol})
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" || !strings.Contains(b["explanation"].(string), "max_synthesis_depth") {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}

// companions assertion 19: the data_manifest is the ceiling (AGIS §8.3).
func TestProposeOutsideDataManifestIs463OutOfScope(t *testing.T) {
	dm := map[string]any{"available_data": []any{map[string]any{"class": "documents", "sensitivity": "low"}}}
	e := newEnv(t, envConfig{dataManifest: dm})
	for name, params := range map[string]map[string]any{
		"recipe reads orders": orderSummary(),
		"named class":         {"endpoint": orderSummaryEndpoint(), "data_class": "payroll"},
		"inferred from path": {"endpoint": func() map[string]any {
			ep := orderSummaryEndpoint()
			ep["path"] = "/payroll/{order_id}"
			return ep
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := e.propose(reader(), params, "")
			if resp.GetStatus() != 463 || b["reason"] != "out-of-scope" {
				t.Fatalf("got %d %v", resp.GetStatus(), b)
			}
		})
	}
	// With orders in the manifest, the same proposal is approved.
	dm = map[string]any{"available_data": []any{map[string]any{"class": "orders", "sensitivity": "medium"}}}
	e2 := newEnv(t, envConfig{dataManifest: dm})
	if resp, b := e2.propose(reader(), orderSummary(), ""); resp.GetStatus() != 263 {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}

// core §7.5.4: a data class that requires authorization is negotiated only
// with credentials for it (262 credentials-missing).
func TestProposeSensitiveDataClassWithoutCredentialsIs262(t *testing.T) {
	dm := map[string]any{"available_data": []any{map[string]any{"class": "orders", "sensitivity": "high", "requires_authorization": true}}}
	e := newEnv(t, envConfig{dataManifest: dm})
	// The scope covers the steps through *:read but is not in the orders domain.
	resp, b := e.propose(caller(agentX, sessionA, 1, "*:read"), orderSummary(), "")
	if resp.GetStatus() != 263 {
		t.Fatalf("a *:read caller: %d %v", resp.GetStatus(), b)
	}
	resp, b = e.propose(caller(agentX, sessionA, 1, "documents:read"), orderSummary(), "")
	if resp.GetStatus() != 262 || b["reason"] != "credentials-missing" || b["data_class"] != "orders" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}

// AGTP-API §10.6 step 7: a pair the server already registers is refused
// by policy, with the registered endpoint as counter-proposal.
func TestProposeRegisteredPairIs463PolicyRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	ep := orderSummaryEndpoint()
	ep["method"] = "QUERY"
	ep["path"] = "/orders/{id}"
	ep["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}, "additionalProperties": false}
	resp, b := e.propose(reader(), map[string]any{"endpoint": ep}, "")
	// No recipe offers QUERY /orders/{id}: composition fails first (step 6).
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	// A pattern over a registered pair reaches step 7.
	e.srv.SetPatterns(append(e.srv.Patterns(), mustPattern(t, `{"recipe_name":"dup","recipe_version":"1","method":"QUERY","path_exact":"/orders","data_classes":["orders"],
	  "endpoint":{"description":"d","semantic":{"intent":"List.","actor":"agent","outcome":"Listed.","capability":"retrieval","confidence":0.9,"impact":"informational","is_idempotent":true},
	  "input_schema":{"type":"object","additionalProperties":false},"output_schema":{"type":"object"}},
	  "steps":[{"method":"QUERY","path":"/orders"}]}`)))
	ep = orderSummaryEndpoint()
	ep["method"], ep["path"] = "QUERY", "/orders"
	ep["input_schema"] = map[string]any{"type": "object", "additionalProperties": false}
	resp, b = e.propose(reader(), map[string]any{"endpoint": ep}, "")
	if resp.GetStatus() != 463 || b["reason"] != "policy-refused" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	if c, _ := b["counter_proposal"].(map[string]any); c["registered"] != true {
		t.Errorf("counter_proposal %v", b["counter_proposal"])
	}
}
