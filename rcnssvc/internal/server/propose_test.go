package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// proposeStatuses are the only statuses PROPOSE may answer with (core
// §7.2.7; core assertion 88), plus 429 for the negotiation limit.
var proposeStatuses = []int32{261, 262, 263, 400, 429, 459, 460, 463}

func reader() *rcnsv1.Caller { return caller(agentX, sessionA, 1, "orders:read") }

// api assertion 78 (AGTP-API §8.7).
func TestProposeWithSynthesisDisabledIs463SynthesisDisabled(t *testing.T) {
	pol := defaultPolicies()
	pol.SynthesisEnabled = false
	e := newEnv(t, envConfig{policies: pol})
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 463 || b["reason"] != "synthesis-disabled" || b["explanation"] == "" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}

// api assertion 79 (AGTP-API §10.4.2) and the core parameter sets
// (docs/decisions.md#D-propose-forms): more than one body form is 400
// ambiguous-body.
func TestProposeWithTwoBodyFormsIs400AmbiguousBody(t *testing.T) {
	e := newEnv(t, envConfig{})
	ep := orderSummaryEndpoint()
	for name, params := range map[string]map[string]any{
		"endpoint and name":             {"endpoint": ep, "name": "summary"},
		"endpoint and proposal":         {"endpoint": ep, "proposal": ep},
		"proposal and proposed_method":  {"proposal": ep, "proposed_method": "SUMMARIZE", "signature": map[string]any{}, "intent": "x"},
		"legacy fields and proposal":    {"method": "SUMMARIZE", "path": "/orders/{order_id}", "proposal": ep},
		"endpoint and proposed_method ": {"endpoint": ep, "proposed_method": "SUMMARIZE"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := e.propose(reader(), params, "")
			if resp.GetStatus() != 400 || b["reason"] != "ambiguous-body" {
				t.Fatalf("got %d %v", resp.GetStatus(), b)
			}
		})
	}
}

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

// api assertion 85 (AGTP-API §10.6) and core §5.6: 463
// composition-impossible with an explanation and a counter-proposal
// referencing a composable endpoint; the counter-proposal, proposed as it
// is, is approved.
func TestProposeUncomposableIs463WithCounterProposal(t *testing.T) {
	e := newEnv(t, envConfig{})
	ep := orderSummaryEndpoint()
	ep["method"] = "SUMMARIZE"
	ep["path"] = "/orders/{order_id}/history"
	resp, b := e.propose(reader(), map[string]any{"endpoint": ep}, "")
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" || b["explanation"] == "" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	counter, ok := b["counter_proposal"].(map[string]any)
	if !ok || counter["method"] != "SUMMARIZE" || counter["path"] != "/orders/{order_id}" {
		t.Fatalf("counter_proposal = %v", b["counter_proposal"])
	}
	if sim, _ := b["similar_endpoints"].([]any); len(sim) == 0 {
		t.Errorf("no similar_endpoints from the manifest: %v", b)
	}
	resp2, b2 := e.propose(reader(), map[string]any{"endpoint": counter["endpoint"]}, resp.GetNegotiationId())
	if resp2.GetStatus() != 263 {
		t.Fatalf("the counter-proposal itself was refused: %d %v", resp2.GetStatus(), b2)
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

// api assertion 87, core assertion 90 (263 has synthesis_id and
// expires_at) and the core 263 example's shape
// (docs/decisions.md#D-propose-forms: emit both).
func TestProposeComposableIs263WithBothShapes(t *testing.T) {
	e := newEnv(t, envConfig{})
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 263 || resp.GetOutcome() != rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_APPROVED {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	if b["status"] != 263.0 || b["method"] != "SUMMARIZE" || b["path"] != "/orders/{order_id}" {
		t.Errorf("method/path/status: %v", b)
	}
	id, _ := b["synthesis_id"].(string)
	if !validID(prefixSynthesis, id) || resp.GetContract().GetSynthesisId() != id {
		t.Errorf("synthesis_id %q, contract %q", id, resp.GetContract().GetSynthesisId())
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(b["expires_at"])); err != nil {
		t.Errorf("expires_at %v: %v", b["expires_at"], err)
	}
	lin, _ := b["recipe_lineage"].(map[string]any)
	if lin["recipe_name"] != "order-summary" || lin["recipe_version"] != "1" {
		t.Errorf("recipe_lineage %v", lin)
	}
	epm, _ := b["endpoint"].(map[string]any)
	handler, _ := epm["handler"].(map[string]any)
	if epm["method"] != "SUMMARIZE" || handler["type"] != "composition" || !slices.Contains(toStrings(epm["errors"]), "composition_failed") {
		t.Errorf("endpoint %v", epm)
	}
	if !slices.Contains(toStrings(epm["required_scopes"]), "orders:read") {
		t.Errorf("the composite does not require its steps' scopes: %v", epm["required_scopes"])
	}
	// The front door compiles the contract's endpoint like any snapshot endpoint.
	if ep, err := endpoint.FromJSON(resp.GetContract().GetEndpointJson()); err != nil || ep.Def.Handler.Recipe != "order-summary" {
		t.Errorf("endpoint.FromJSON(endpoint_json): %v", err)
	}
	inst, _ := b["instantiated_endpoint"].(map[string]any)
	if inst["proposed"] != true || inst["expires"] != "session" || inst["input"] == nil || inst["output"] == nil || inst["semantic"] == nil {
		t.Errorf("instantiated_endpoint %v", inst)
	}
	if b["negotiation_id"] == "" || b["negotiation_origin"] != "propose" || !hex64.MatchString(fmt.Sprint(b["contract_hash"])) {
		t.Errorf("negotiation_id/origin/hash: %v", b)
	}
	if b["persistent"] != false || b["granted_duration"] != "1h" {
		t.Errorf("persistent/granted_duration: %v %v", b["persistent"], b["granted_duration"])
	}
	// Accepted synthesis is on the originator's lifecycle stream (core §7.2.7).
	if e.audit.count(agentX, eventAccepted, id) != 1 {
		t.Errorf("rcns_propose_accepted events: %v", e.audit.of(agentX))
	}
}

func toStrings(v any) []string {
	var out []string
	arr, _ := v.([]any)
	for _, x := range arr {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// api assertion 88 and companions assertion 20: the synthesized
// endpoint resolves at once for its agent in its session, by the bare
// (method, path) and by its synthesis_id; not in another session, and not
// for another agent.
func TestProposedEndpointIsCallableAtOnceInTheSameSessionOnly(t *testing.T) {
	e := newEnv(t, envConfig{})
	resp, _ := e.propose(reader(), orderSummary(), "")
	id := resp.GetContract().GetSynthesisId()
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 0 || r.GetContract().GetSynthesisId() != id {
		t.Fatalf("same session: %d %v", r.GetStatus(), r.GetContract())
	}
	if r := e.present(reader(), id); r.GetStatus() != 0 || r.GetContract().GetState() != stateActive {
		t.Fatalf("presented: %d %s", r.GetStatus(), r.GetReason())
	}
	other := caller(agentX, sessionB, 1, "orders:read")
	if r := e.resolve(other, "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 404 || r.GetContract() != nil {
		t.Fatalf("another session resolved it: %d", r.GetStatus())
	}
	if r := e.present(other, id); r.GetStatus() != 404 {
		t.Fatalf("another session presented it: %d %s", r.GetStatus(), r.GetReason())
	}
	if r := e.resolve(caller(agentY, sessionA, 1, "orders:read"), "SUMMARIZE", "/orders/o-17"); r.GetStatus() != 404 {
		t.Fatalf("another agent resolved it: %d", r.GetStatus())
	}
	if r := e.resolve(reader(), "SUMMARIZE", "/orders/o-17/extra"); r.GetStatus() != 404 {
		t.Fatalf("a longer path resolved: %d", r.GetStatus())
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

// Core §7.2.7 and §7.5.3 parameter sets (docs/decisions.md#D-propose-forms):
// both are served.
func TestProposeCoreParameterSets(t *testing.T) {
	e := newEnv(t, envConfig{})
	t.Run("7.5.3 proposal", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposal": orderSummaryEndpoint(), "session_id": sessionA, "requested_duration": "30m", "scope_requested": []string{"orders:read"}}, "")
		if resp.GetStatus() != 263 || b["granted_duration"] != "30m" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
	})
	t.Run("7.2.7 signature with path", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{
			"proposed_method": "SUMMARIZE", "intent": "Summarize an order for me.", "contract_version": "AGTP-API/1.0",
			"signature": map[string]any{"path": "/orders/{order_id}", "params": map[string]any{"order_id": map[string]any{"type": "string"}}, "outcome": "I hold a summary."},
		}, "")
		if resp.GetStatus() != 263 || b["path"] != "/orders/{order_id}" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		sem := b["instantiated_endpoint"].(map[string]any)["semantic"].(map[string]any)
		if sem["intent"] != "Summarize an order for me." || sem["outcome"] != "I hold a summary." {
			t.Errorf("semantic %v", sem)
		}
	})
	t.Run("7.2.7 signature without path is ambiguous", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposed_method": "SUMMARIZE", "intent": "Summarize something.", "signature": map[string]any{}}, "")
		if resp.GetStatus() != 463 || b["reason"] != "ambiguous" {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		if c, _ := b["candidates"].([]any); len(c) != 2 || b["counter_proposal"] == nil {
			t.Errorf("candidates %v", b["candidates"])
		}
	})
	t.Run("7.2.7 unsupported contract version", func(t *testing.T) {
		resp, b := e.propose(reader(), map[string]any{"proposed_method": "SUMMARIZE", "intent": "x", "signature": map[string]any{}, "contract_version": "AGTP-API/2.0"}, "")
		if resp.GetStatus() != 400 {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
	})
	t.Run("legacy form", func(t *testing.T) {
		params := orderSummaryEndpoint()
		params["name"] = "order summary"
		params["handler"] = map[string]any{"type": "external_service", "url": "https://evil.example"}
		resp, b := e.propose(reader(), params, "")
		if resp.GetStatus() != 263 {
			t.Fatalf("got %d %v", resp.GetStatus(), b)
		}
		if h := b["endpoint"].(map[string]any)["handler"].(map[string]any); h["type"] != "composition" {
			t.Errorf("a proposed handler was honoured: %v", h)
		}
	})
}

// core §7.4.1: at most three turns per Negotiation-ID; then ESCALATE.
func TestProposeFourthTurnIs463Escalate(t *testing.T) {
	e := newEnv(t, envConfig{})
	bad := orderSummaryEndpoint()
	bad["path"] = "/nothing/{order_id}"
	resp, _ := e.propose(reader(), map[string]any{"endpoint": bad}, "")
	negID := resp.GetNegotiationId()
	if canonicalUUID(negID) == "" {
		t.Fatalf("minted Negotiation-ID %q is not a UUID", negID)
	}
	for turn := 2; turn <= 3; turn++ {
		r, b := e.propose(reader(), map[string]any{"endpoint": bad}, negID)
		if r.GetStatus() != 463 || b["reason"] != "composition-impossible" || r.GetNegotiationId() != negID || b["turn"] != float64(turn) {
			t.Fatalf("turn %d: %d %v", turn, r.GetStatus(), b)
		}
	}
	r, b := e.propose(reader(), orderSummary(), negID)
	if r.GetStatus() != 463 || b["reason"] != "policy-refused" || b["escalate"] != true {
		t.Fatalf("turn 4: %d %v", r.GetStatus(), b)
	}
	// Another agent's negotiation with the same ID is its own.
	if r, _ := e.propose(caller(agentY, sessionA, 1, "orders:read"), orderSummary(), negID); r.GetStatus() != 263 {
		t.Fatalf("agent Y: %d", r.GetStatus())
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

// core §7.5.5: persistence needs higher authorization; granted, the
// endpoint is promoted into the catalog as Tier C (so AGTP-API-Version
// bumps) and leaves it when revoked.
func TestProposePersistent(t *testing.T) {
	e := newEnv(t, envConfig{})
	params := orderSummary()
	params["persistent"] = true
	resp, b := e.propose(reader(), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != false || b["persistent_refused"] == nil {
		t.Fatalf("ungranted: %d %v", resp.GetStatus(), b)
	}
	if len(e.catalog.puts) != 0 {
		t.Fatal("an ungranted persistent proposal reached the catalog")
	}
	resp, b = e.propose(caller(agentX, sessionA, 1, "orders:read", "rcns:persist"), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != true || b["agtp_api_version"] != "1.0.2" {
		t.Fatalf("granted: %d %v", resp.GetStatus(), b)
	}
	if len(e.catalog.puts) != 1 || e.catalog.puts[0].GetTier() != catalogv1.EndpointTier_ENDPOINT_TIER_C {
		t.Fatalf("catalog puts %v", e.catalog.puts)
	}
	var put map[string]any
	_ = json.Unmarshal(e.catalog.puts[0].GetDefinitionJson(), &put)
	if put["method"] != "SUMMARIZE" || put["path"] != "/orders/{order_id}" {
		t.Errorf("promoted definition %v", put)
	}
	// Persistent contracts are not bound to the session.
	if r := e.resolve(caller(agentX, sessionB, 1, "orders:read"), "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 0 || !r.GetContract().GetPersistent() {
		t.Fatalf("persistent contract in another session: %d", r.GetStatus())
	}
	id := resp.GetContract().GetSynthesisId()
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: reader(), SynthesisId: id}); err != nil {
		t.Fatal(err)
	}
	if len(e.catalog.delete) != 1 || e.catalog.delete[0].GetPath() != "/orders/{order_id}" {
		t.Fatalf("catalog deletes %v", e.catalog.delete)
	}
	// A refused promotion keeps the synthesis (AGTP-API §10.8).
	e.catalog.put = func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "endpoint-conflict")
	}
	resp, b = e.propose(caller(agentX, sessionA, 1, "orders:read", "rcns:persist"), params, "")
	if resp.GetStatus() != 263 || b["persistent"] != false || b["persistent_refused"] == nil {
		t.Fatalf("refused promotion: %d %v", resp.GetStatus(), b)
	}
}

// core §5.6 261 and §11.3: a slow evaluation answers 261 with a
// proposal_id and the Negotiation-ID; polling gives the 263.
func TestProposeSlowEvaluationIs261ThenPollable(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Propose.AsyncAfter = 50 * time.Millisecond }})
	e.catalog.put = func(*catalogv1.PutEndpointRequest) (*catalogv1.PutEndpointResponse, error) {
		<-release
		return &catalogv1.PutEndpointResponse{ApiVersion: "1.0.9"}, nil
	}
	params := orderSummary()
	params["persistent"] = true
	c := caller(agentX, sessionA, 1, "orders:read", "rcns:persist")
	resp, b := e.propose(c, params, "")
	if resp.GetStatus() != 261 || resp.GetOutcome() != rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_IN_PROGRESS {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	pid, _ := b["proposal_id"].(string)
	if pid == "" || resp.GetProposalId() != pid || b["estimated_seconds"] == nil || resp.GetNegotiationId() == "" {
		t.Fatalf("261 body %v", b)
	}
	poll := func(agent string) (*rcnsv1.GetProposalResponse, error) {
		return e.client.GetProposal(context.Background(), &rcnsv1.GetProposalRequest{ProposalId: pid, AgentId: agent})
	}
	if r, err := poll(agentX); err != nil || r.GetResult().GetStatus() != 261 {
		t.Fatalf("pending poll: %v %v", r, err)
	}
	if _, err := poll(agentY); status.Code(err) != codes.NotFound {
		t.Fatalf("another agent polled it: %v", err)
	}
	close(release)
	var final *rcnsv1.ProposeResponse
	testkit.WaitFor(t, 5*time.Second, "the proposal result", func() bool {
		r, err := poll(agentX)
		if err == nil && r.GetResult().GetStatus() != 261 {
			final = r.GetResult()
			return true
		}
		return false
	})
	fb := body(t, final.GetBodyJson())
	if final.GetStatus() != 263 || fb["persistent"] != true || fb["negotiation_id"] != resp.GetNegotiationId() {
		t.Fatalf("final %d %v", final.GetStatus(), fb)
	}
	if r := e.resolve(c, "SUMMARIZE", "/orders/o-1"); r.GetStatus() != 0 {
		t.Fatalf("the asynchronously approved endpoint does not resolve: %d", r.GetStatus())
	}
}

// The negotiation limit applies to PROPOSE too (policysvc's "rcns" scope).
func TestProposeOverTheNegotiationLimitIs429(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.policy.check = countingLimit(2)
	for i := 0; i < 2; i++ {
		if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
			t.Fatalf("proposal %d: %d", i, r.GetStatus())
		}
	}
	r, b := e.propose(reader(), orderSummary(), "")
	if r.GetStatus() != 429 || b["scope"] != "rcns" || b["retry_after_seconds"] != 42.0 {
		t.Fatalf("got %d %v", r.GetStatus(), b)
	}
	if r, _ := e.propose(caller(agentY, sessionA, 1, "orders:read"), orderSummary(), ""); r.GetStatus() != 263 {
		t.Fatalf("another agent was limited: %d", r.GetStatus())
	}
}

// core assertions 88-91: whatever the proposal, PROPOSE answers
// with a PROPOSE status (never 200), 463 with a five-value reason and an
// explanation, 263 with synthesis_id and expires_at, 261 with proposal_id.
func TestProposeAnswersOnlyProposeStatuses(t *testing.T) {
	e := newEnv(t, envConfig{})
	inputs := []string{
		`{}`, `[]`, `null`, `"x"`, `{"endpoint":7}`, `{"endpoint":{}}`, `{"proposal":{"method":"SUMMARIZE"}}`,
		`{"proposed_method":"SUMMARIZE","intent":"x","signature":{"path":"/orders/{order_id}"}}`,
		`{"endpoint":{"method":"SUMMARIZE","path":"/orders/{order_id}","semantic":"x"}}`,
		`{"persistent":"yes","endpoint":{}}`, `{"requested_duration":"forever","endpoint":{}}`,
	}
	for _, in := range inputs {
		resp, b := e.propose(reader(), in, "")
		if !slices.Contains(proposeStatuses, resp.GetStatus()) || b["status"] != float64(resp.GetStatus()) {
			t.Errorf("%s: status %d body %v", in, resp.GetStatus(), b)
		}
		switch resp.GetStatus() {
		case 463:
			if !slices.Contains([]string{"out-of-scope", "policy-refused", "composition-impossible", "ambiguous", "synthesis-disabled"}, fmt.Sprint(b["reason"])) || b["explanation"] == "" {
				t.Errorf("%s: 463 body %v", in, b)
			}
		case 263:
			if b["synthesis_id"] == nil || b["expires_at"] == nil {
				t.Errorf("%s: 263 body %v", in, b)
			}
		}
	}
}

// Many agents negotiate at once: every proposal is approved with its own
// synthesis_id, and each agent lists exactly its own contracts.
func TestConcurrentProposalsFromManyAgents(t *testing.T) {
	e := newEnv(t, envConfig{})
	const agents, each = 40, 4
	var mu sync.Mutex
	ids := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, agents*each)
	for a := 0; a < agents; a++ {
		for k := 0; k < each; k++ {
			wg.Go(func() {
				agent := agentN(a)
				resp, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: caller(agent, sessionA, 1, "orders:read"), ParametersJson: mustJSON(orderSummary())})
				if err != nil || resp.GetStatus() != 263 {
					errs <- fmt.Errorf("agent %d: %v %v", a, err, resp.GetStatus())
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if _, dup := ids[resp.GetContract().GetSynthesisId()]; dup {
					errs <- fmt.Errorf("synthesis_id reused")
				}
				ids[resp.GetContract().GetSynthesisId()] = agent
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(ids) != agents*each {
		t.Fatalf("%d contracts, want %d", len(ids), agents*each)
	}
	for a := 0; a < agents; a++ {
		r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: caller(agentN(a), sessionA, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetContracts()) != each {
			t.Fatalf("agent %d lists %d contracts", a, len(r.GetContracts()))
		}
		for _, c := range r.GetContracts() {
			if ids[c.GetSynthesisId()] != agentN(a) {
				t.Fatalf("agent %d lists another agent's contract", a)
			}
		}
	}
}

// An agent's live contracts are capped; releasing one frees a slot.
func TestContractCapPerAgent(t *testing.T) {
	e := newEnv(t, envConfig{opts: func(o *Options) { o.Contracts.MaxPerAgent = 2 }})
	var first string
	for i := 0; i < 2; i++ {
		r, _ := e.propose(reader(), orderSummary(), "")
		if r.GetStatus() != 263 {
			t.Fatalf("proposal %d: %d", i, r.GetStatus())
		}
		if first == "" {
			first = r.GetContract().GetSynthesisId()
		}
	}
	r, b := e.propose(reader(), orderSummary(), "")
	if r.GetStatus() != 463 || b["reason"] != "policy-refused" {
		t.Fatalf("over the cap: %d %v", r.GetStatus(), b)
	}
	if _, err := e.client.RevokeContract(context.Background(), &rcnsv1.RevokeContractRequest{Caller: reader(), SynthesisId: first, Release: true}); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.propose(reader(), orderSummary(), ""); r.GetStatus() != 263 {
		t.Fatalf("after a release: %d", r.GetStatus())
	}
}

// No unaudited contract: when the audit service refuses the accepted
// event, the contract is taken back and the caller gets an error.
func TestProposeWithAuditDownLeavesNoContract(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.audit.fail = func(*auditv1AppendReq) error { return status.Error(codes.Unavailable, "down") }
	_, err := e.client.Propose(context.Background(), &rcnsv1.ProposeRequest{Caller: reader(), ParametersJson: mustJSON(orderSummary())})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v", err)
	}
	r, err := e.client.ListContracts(context.Background(), &rcnsv1.ListContractsRequest{Caller: reader()})
	if err != nil || len(r.GetContracts()) != 0 {
		t.Fatalf("contracts after a refused audit: %v %v", r.GetContracts(), err)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// The registered capability surface is the catalog's current snapshot:
// when a composed step leaves the catalog, its composition is refused, and
// the synthesis_enabled switch follows the manifest.
func TestCatalogChangesAreFollowed(t *testing.T) {
	e := newEnv(t, envConfig{})
	snap := demoSnapshot(t, defaultPolicies(), nil)
	snap.Revision = 2
	var kept []*catalogv1.Endpoint
	for _, ep := range snap.GetEndpoints() {
		if !(ep.GetMethod() == "QUERY" && ep.GetPath() == "/orders/{order_id}") {
			kept = append(kept, ep)
		}
	}
	snap.Endpoints = kept
	e.catalog.setSnapshot(snap)
	testkit.WaitFor(t, 5*time.Second, "snapshot 2", func() bool { return e.srv.cat.Load().snap.GetRevision() == 2 })
	resp, b := e.propose(reader(), orderSummary(), "")
	if resp.GetStatus() != 463 || b["reason"] != "composition-impossible" || !strings.Contains(fmt.Sprint(b["explanation"]), "QUERY /orders/{order_id}") {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
	snap3 := demoSnapshot(t, &catalogv1.ManifestPolicies{SynthesisEnabled: false}, nil)
	snap3.Revision = 3
	e.catalog.setSnapshot(snap3)
	testkit.WaitFor(t, 5*time.Second, "snapshot 3", func() bool { return e.srv.cat.Load().snap.GetRevision() == 3 })
	if resp, b := e.propose(reader(), orderSummary(), ""); resp.GetStatus() != 463 || b["reason"] != "synthesis-disabled" {
		t.Fatalf("got %d %v", resp.GetStatus(), b)
	}
}
