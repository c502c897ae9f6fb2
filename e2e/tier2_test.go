package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
)

// tier2Service declares RUN, which catalog 1.0.0 does not list, as a
// custom method of the server (AGTP-API §3.3), so an operator can register
// procedures.
const tier2Service = "policies:\n  methods:\n    allow: \"*\"\n    custom: [RUN]\n"

// tier2Procedure is a registered procedure: RUN /procedures/reindex-orders,
// bound to the demo desk's reindex function. Its options member is an
// open object, so the schema alone would let a free-form member through.
const tier2Procedure = `method: RUN
path: /procedures/reindex-orders
description: Reindexes the order desk and reports how many orders it indexed.
namespace: orders
semantic:
  intent: Reindex the orders, optionally only those in one status.
  actor: agent
  outcome: The order index is rebuilt and the number of indexed orders is returned.
  capability: mechanics
  confidence: 0.9
  impact: reversible
  is_idempotent: false
input_schema:
  $schema: https://json-schema.org/draft/2020-12/schema
  type: object
  properties:
    status: {type: string, enum: [open, paid, shipped, cancelled]}
    options: {type: object, maxProperties: 8}
  additionalProperties: false
output_schema:
  type: object
  properties:
    procedure_id: {type: string}
    orders_indexed: {type: integer}
    runs: {type: integer}
  required: [procedure_id, orders_indexed, runs]
errors: [reindex_failed]
handler:
  type: registered_function
  function: demo.procedures.reindex
required_scopes: ["reports:run"]
`

// TestTier2 drives the suite-level rules of the Tier 2 methods over AGTP
// against the suite as processes (standard methods §5.2, §5.4, §5.6, §8.8,
// §10.2-§10.6; companions assertions 27, 28, 29 and 33). Scope violations
// are 262 (docs/decisions.md#D-scope-262), not the drafts' 451/455. Every
// refusal is checked for "nothing happened": no grant, no owner change, no
// run, no second customer.
func TestTier2(t *testing.T) {
	dir := demoEndpointsDir(t, map[string]string{"_service.yaml": tier2Service, "procedures-reindex.yaml": tier2Procedure})
	c := Start(t, Options{ServiceEnv: map[string][]string{"catalogsvc": {"AGTP_ENDPOINTS_DIR=" + dir}}})
	granter := c.registerAgent(t, "tier2-granter", "orders:read", "orders:write", "authorization:grant")
	clerk := c.registerAgent(t, "tier2-clerk", "orders:read", "orders:write", "reports:run")
	reader := c.registerAgent(t, "tier2-reader", "orders:read")
	runner := c.registerAgent(t, "tier2-runner", "orders:read", "reports:run", "activation:run")
	keys := c.signingKeys(t)

	n := 0
	key := func() string { n++; return fmt.Sprintf("tier2-%d", n) }
	newOrder := func(t *testing.T, customer string) string {
		t.Helper()
		resp, body := c.call(t, granter, "CREATE", "/orders", fmt.Sprintf(`{"customer_ref":%q,"lines":[{"sku":"widget","quantity":1}]}`, customer),
			agtp.HeaderIdempotencyKey, key())
		result, _ := body["result"].(map[string]any)
		id, _ := result["order_id"].(string)
		if resp.Status != 200 || id == "" {
			t.Fatalf("CREATE /orders = %d %s", resp.Status, resp.Body)
		}
		return id
	}
	order := func(t *testing.T, id string) map[string]any {
		t.Helper()
		resp, body := c.call(t, granter, "QUERY", "/orders/"+id, "")
		if resp.Status != 200 {
			t.Fatalf("QUERY /orders/%s = %d %s", id, resp.Status, resp.Body)
		}
		result, _ := body["result"].(map[string]any)
		return result
	}
	// record verifies a response's Attribution-Record and checks that the
	// audit store holds it (INSPECT), so refusals are on the record too.
	record := func(t *testing.T, resp *agtp.Response, agent string) attribution.Payload {
		t.Helper()
		jws := resp.Header.Get(agtp.HeaderAttributionRecord)
		rec, err := attribution.Verify(jws, attribution.VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatalf("Attribution-Record does not verify: %v", err)
		}
		if rec.Payload.AgentID != agent || rec.Payload.Status != resp.Status {
			t.Fatalf("record = %+v, want agent %s status %d", rec.Payload, agent, resp.Status)
		}
		if agent == "" {
			// A record that names no agent is on no agent's chain, so
			// no agent may INSPECT it (read ACL agent_only): its
			// signature is what there is to check.
			return rec.Payload
		}
		got := c.roundTrip(t, request(t, "INSPECT", "/?target=audit&audit_id="+rec.AuditID, agtp.HeaderAgentID, agent))
		if got.Status != 200 || !strings.Contains(string(got.Body), jws) {
			t.Fatalf("INSPECT audit %s = %d %s", rec.AuditID, got.Status, got.Body)
		}
		return rec.Payload
	}
	refused := func(t *testing.T, resp *agtp.Response, eb map[string]any, status int, reason, scope string) {
		t.Helper()
		if resp.Status != status || eb["reason"] != reason || (scope != "" && eb["scope"] != scope) {
			t.Fatalf("= %d %s, want %d %s (scope %q)", resp.Status, resp.Body, status, reason, scope)
		}
	}

	t.Run("the manifest shows the method scopes the suite adds to AUTHORIZE, RUN and PURCHASE endpoints", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DISCOVER", "/"))
		if resp.Status != 200 {
			t.Fatalf("DISCOVER / = %d %s", resp.Status, resp.Body)
		}
		var m struct {
			Endpoints []struct {
				Method         string   `json:"method"`
				Path           string   `json:"path"`
				RequiredScopes []string `json:"required_scopes"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(resp.Body, &m); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"AUTHORIZE /orders/{order_id}/grants": "authorization:grant", "RUN /procedures/reindex-orders": "activation:run", "PURCHASE /orders/{order_id}/payment": "payments:purchase"}
		for _, ep := range m.Endpoints {
			if s, ok := want[ep.Method+" "+ep.Path]; ok {
				if len(ep.RequiredScopes) == 0 || ep.RequiredScopes[0] != s {
					t.Errorf("%s %s required_scopes = %v, want %s first", ep.Method, ep.Path, ep.RequiredScopes, s)
				}
				delete(want, ep.Method+" "+ep.Path)
			}
		}
		if len(want) != 0 {
			t.Errorf("manifest lacks %v", want)
		}
	})

	// Companions 27: AUTHORIZE needs authorization:grant, and the grant
	// may not exceed the caller's own Authority-Scope (anti-laundering).
	grant := func(t *testing.T, agent, id, scope string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "AUTHORIZE", "/orders/"+id+"/grants",
			fmt.Sprintf(`{"subject":"contractor@example.test","resource":"order","scope":%s,"ttl":600}`, scope),
			append([]string{agtp.HeaderIdempotencyKey, key()}, headers...)...)
	}
	for _, tc := range []struct {
		name, agent, scope   string
		headers              []string
		status               int
		reason, refusedScope string
	}{
		{"companions 27: AUTHORIZE without authorization:grant is 262 naming it", clerk, `["orders:read"]`, nil, 262, "scope-required", "authorization:grant"},
		{"companions 27: an Authority-Scope claim without authorization:grant is 262", granter, `["orders:read"]`, []string{agtp.HeaderAuthorityScope, "orders:read, orders:write"}, 262, "scope-required", "authorization:grant"},
		{"companions 27: a grant beyond the caller's own scopes is 262 naming the scope", granter, `["orders:read","payments:purchase"]`, nil, 262, "scope-required", "payments:purchase"},
		{"companions 27: a wildcard grant over narrower own scopes is 262", granter, `["orders:*"]`, nil, 262, "scope-required", "orders:*"},
		{"companions 27: a grant beyond a narrowed Authority-Scope claim is 262", granter, `["orders:read"]`,
			[]string{agtp.HeaderAuthorityScope, "orders:write, authorization:grant"}, 262, "scope-required", "orders:read"},
		{"a grant that is not scope tokens is 400", granter, `["Orders Read"]`, nil, 400, "authority-scope-invalid", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newOrder(t, "alice@example.test")
			resp, eb := grant(t, tc.agent, id, tc.scope, tc.headers...)
			refused(t, resp, eb, tc.status, tc.reason, tc.refusedScope)
			if p := record(t, resp, tc.agent); p.Method != "AUTHORIZE" {
				t.Fatalf("record method = %s", p.Method)
			}
			if g := order(t, id)["grants"]; g != nil {
				t.Fatalf("order %s has grants %v after a refused AUTHORIZE", id, g)
			}
		})
	}
	t.Run("an AUTHORIZE within the caller's scopes grants", func(t *testing.T) {
		id := newOrder(t, "alice@example.test")
		resp, body := grant(t, granter, id, `["orders:read"]`)
		result, _ := body["result"].(map[string]any)
		if resp.Status != 200 || result["subject"] != "contractor@example.test" || result["granted_by"] != granter {
			t.Fatalf("AUTHORIZE = %d %s", resp.Status, resp.Body)
		}
		grants, _ := order(t, id)["grants"].([]any)
		if len(grants) != 1 {
			t.Fatalf("order grants = %v, want one", grants)
		}
	})

	// Companions 28: TRANSFER needs the resource type's scope, and its
	// record names both principals.
	transfer := func(t *testing.T, agent, id, from, to string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "TRANSFER", "/orders/"+id,
			fmt.Sprintf(`{"from_principal":%q,"to_principal":%q,"reason":"account merge"}`, from, to), agtp.HeaderIdempotencyKey, key())
	}
	t.Run("companions 28: TRANSFER without the resource type's scope is 262 and the owner stays", func(t *testing.T) {
		id := newOrder(t, "alice@example.test")
		resp, eb := transfer(t, reader, id, "alice@example.test", "bob@example.test")
		refused(t, resp, eb, 262, "scope-required", "orders:write")
		record(t, resp, reader)
		if o := order(t, id); o["owner"] != "alice@example.test" || o["custody"] != nil {
			t.Fatalf("order after a refused TRANSFER = %v", o)
		}
	})
	t.Run("companions 28: a TRANSFER's Attribution-Record names from_principal and to_principal", func(t *testing.T) {
		id := newOrder(t, "alice@example.test")
		resp, _ := transfer(t, clerk, id, "alice@example.test", "bob@example.test")
		if resp.Status != 200 {
			t.Fatalf("TRANSFER = %d %s", resp.Status, resp.Body)
		}
		if p := record(t, resp, clerk); p.Method != "TRANSFER" || p.FromPrincipal != "alice@example.test" || p.ToPrincipal != "bob@example.test" {
			t.Fatalf("record = %+v, want from alice to bob", p)
		}
		if o := order(t, id); o["owner"] != "bob@example.test" {
			t.Fatalf("order after TRANSFER = %v", o)
		}
		// A stale owner is the resource's conflict, and its record names
		// both principals too.
		again, eb := transfer(t, clerk, id, "alice@example.test", "carol@example.test")
		refused(t, again, eb, 409, "owner_mismatch", "")
		if p := record(t, again, clerk); p.FromPrincipal != "alice@example.test" || p.ToPrincipal != "carol@example.test" {
			t.Fatalf("record of the refusal = %+v", p)
		}
		if o := order(t, id); o["owner"] != "bob@example.test" {
			t.Fatalf("order after a refused TRANSFER = %v", o)
		}
	})

	// Companions 29: RUN runs registered procedures only, needs
	// activation:run, and never takes a free-form execution string.
	runs := 0
	run := func(t *testing.T, agent, target, body string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		return c.call(t, agent, "RUN", target, body, append([]string{agtp.HeaderIdempotencyKey, key()}, headers...)...)
	}
	for _, tc := range []struct {
		name, agent, target, body string
		headers                   []string
		status                    int
		reason, scope             string
	}{
		{"companions 29: RUN of an unregistered procedure is 404", runner, "/procedures/drop-tables", `{}`, nil, 404, "not-found", ""},
		{"companions 29: a free-form command is 422", runner, "/procedures/reindex-orders", `{"command":"rm -rf /"}`, nil, 422, "free-form-execution-refused", ""},
		{"companions 29: a free-form member the schema would admit is 422", runner, "/procedures/reindex-orders", `{"status":"open","options":{"shell":"sh -c id"}}`, nil, 422, "free-form-execution-refused", ""},
		{"companions 29: a free-form member in the query is 422", runner, "/procedures/reindex-orders?cmd=id", `{}`, nil, 422, "free-form-execution-refused", ""},
		{"companions 29: RUN without activation:run is 262 naming it", clerk, "/procedures/reindex-orders", `{"status":"open"}`, nil, 262, "scope-required", "activation:run"},
		{"companions 29: an Authority-Scope claim without activation:run is 262", runner, "/procedures/reindex-orders", `{"status":"open"}`,
			[]string{agtp.HeaderAuthorityScope, "orders:read, reports:run"}, 262, "scope-required", "activation:run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, eb := run(t, tc.agent, tc.target, tc.body, tc.headers...)
			refused(t, resp, eb, tc.status, tc.reason, tc.scope)
			// A refusal after input validation records the attempt with its
			// procedure and input (standard methods §10.3); one before it
			// has no validated input to record.
			// An unregistered procedure is an unmatched path: its 404 is
			// answered before the caller is resolved, so its record names
			// no agent (docs/decisions.md#D-decision-order).
			recorded := tc.agent
			if tc.status == 404 {
				recorded = ""
			}
			p := record(t, resp, recorded)
			if tc.status == 262 && (p.ProcedureID != "/procedures/reindex-orders" || string(p.RunInput) != `{"status":"open"}`) ||
				tc.status != 262 && p.RunInput != nil {
				t.Fatalf("record of the refused RUN = %+v (run_input %s)", p, p.RunInput)
			}
		})
	}
	t.Run("companions 29: a registered RUN runs once and its record names the procedure, input and agent", func(t *testing.T) {
		resp, body := run(t, runner, "/procedures/reindex-orders", `{"status":"open"}`)
		result, _ := body["result"].(map[string]any)
		runs++
		// The refusals above ran nothing: this is the procedure's first run.
		if resp.Status != 200 || result["runs"] != float64(runs) {
			t.Fatalf("RUN = %d %s, want runs %d", resp.Status, resp.Body, runs)
		}
		p := record(t, resp, runner)
		if p.Method != "RUN" || p.ProcedureID != "/procedures/reindex-orders" || string(p.RunInput) != `{"status":"open"}` {
			t.Fatalf("record = %+v (run_input %s)", p, p.RunInput)
		}
	})

	// Companions 33: REGISTER's idempotency_key is the Idempotency-Key.
	register := func(t *testing.T, name, bodyKey string, headers ...string) (*agtp.Response, map[string]any) {
		t.Helper()
		payload := fmt.Sprintf(`{"entity_type":"customer","data":{"name":%q}`, name)
		if bodyKey != "" {
			payload += fmt.Sprintf(`,"idempotency_key":%q`, bodyKey)
		}
		return c.call(t, clerk, "REGISTER", "/customers", payload+"}", headers...)
	}
	customerID := func(body map[string]any) string {
		result, _ := body["result"].(map[string]any)
		id, _ := result["customer_id"].(string)
		return id
	}
	t.Run("companions 33: REGISTER twice with one idempotency_key creates one customer", func(t *testing.T) {
		first, b1 := register(t, "Ada", "reg-ada")
		second, b2 := register(t, "Ada", "reg-ada")
		if first.Status != 200 || customerID(b1) == "" || second.Status != 200 || customerID(b2) != customerID(b1) ||
			second.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(second.Body) != string(first.Body) {
			t.Fatalf("REGISTER twice = %d %s / %d %v %s", first.Status, first.Body, second.Status, second.Header, second.Body)
		}
		// The same key in the header names the same request.
		third, b3 := register(t, "Ada", "reg-ada", agtp.HeaderIdempotencyKey, "reg-ada")
		if third.Status != 200 || customerID(b3) != customerID(b1) || third.Header.Get(agtp.HeaderIdempotentReplayed) != "true" {
			t.Fatalf("REGISTER with the key in both = %d %s", third.Status, third.Body)
		}
		// Another key is another customer.
		other, b4 := register(t, "Ada", "reg-ada-2")
		if other.Status != 200 || customerID(b4) == customerID(b1) || other.Header.Get(agtp.HeaderIdempotentReplayed) != "" {
			t.Fatalf("REGISTER with another key = %d %v %s", other.Status, other.Header, other.Body)
		}
	})
	for _, tc := range []struct {
		name, data, bodyKey string
		headers             []string
		status              int
		reason              string
	}{
		{"a header and a different idempotency_key is 400", "Bea", "reg-bea", []string{agtp.HeaderIdempotencyKey, "reg-other"}, 400, "idempotency-key-mismatch"},
		{"an idempotency_key reused with other data is 409", "Cy", "reg-ada", nil, 409, "idempotency-key-reused"},
		{"an idempotency_key that is not a valid key is 400", "Di", "reg-\u00e9", nil, 400, "invalid-idempotency-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, eb := register(t, tc.data, tc.bodyKey, tc.headers...)
			refused(t, resp, eb, tc.status, tc.reason, "")
			record(t, resp, clerk)
		})
	}
	t.Run("a refused REGISTER created nothing and claimed no key", func(t *testing.T) {
		// The mismatch was refused before any key was claimed: its
		// idempotency_key now registers afresh.
		resp, body := register(t, "Bea", "reg-bea")
		if resp.Status != 200 || customerID(body) == "" || resp.Header.Get(agtp.HeaderIdempotentReplayed) != "" {
			t.Fatalf("REGISTER after the refusal = %d %v %s", resp.Status, resp.Header, resp.Body)
		}
	})
}
