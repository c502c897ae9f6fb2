package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestAGTPOverTheWire checks, over real TLS, the rules a running server
// shows (the core and api assertions of e2e/README.md). The scenarios are
// written once and run two ways: with the services as separate processes,
// and in one process (the same constructors make run uses).
func TestAGTPOverTheWire(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts Options
	}{{"processes", Options{}}, {"in-process", Options{InProcess: true}}} {
		t.Run(mode.name, func(t *testing.T) { conformance(t, Start(t, mode.opts)) })
	}
}

func conformance(t *testing.T, c *Cluster) {
	agent := c.registerAgent(t, "e2e-buyer", "orders:read", "orders:write", "documents:read")
	keys := c.signingKeys(t)

	verify := func(t *testing.T, resp *agtp.Response) *attribution.Record {
		t.Helper()
		jws := resp.Header.Get(agtp.HeaderAttributionRecord)
		rec, err := attribution.Verify(jws, attribution.VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatalf("Attribution-Record does not verify: %v", err)
		}
		if got := resp.Header.Get(agtp.HeaderAuditID); got != attribution.AuditID(jws) {
			t.Fatalf("Audit-ID %s is not sha256 of the record (%s)", got, attribution.AuditID(jws))
		}
		return rec
	}

	t.Run("every response carries Server-ID, Response-ID and a verifiable Attribution-Record", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DISCOVER", "/"))
		if resp.Status != agtp.StatusOK {
			t.Fatalf("status %d %s", resp.Status, resp.Body)
		}
		if resp.Header.Get(agtp.HeaderServerID) == "" || resp.Header.Get(agtp.HeaderResponseID) == "" {
			t.Fatalf("missing Server-ID or Response-ID: %v", resp.Header)
		}
		rec := verify(t, resp)
		if rec.Payload.Status != 200 || rec.Payload.Method != "DISCOVER" {
			t.Fatalf("record payload %+v does not describe the response", rec.Payload)
		}
	})

	t.Run("DISCOVER / without Agent-ID is the manifest", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DISCOVER", "/"))
		if ct := resp.Header.Get(agtp.HeaderContentType); ct != agtp.MediaTypeManifestJSON {
			t.Fatalf("Content-Type %q, want %s", ct, agtp.MediaTypeManifestJSON)
		}
		var m map[string]any
		if err := json.Unmarshal(resp.Body, &m); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"catalog_version", "catalog_versions_supported", "endpoints"} {
			if _, ok := m[field]; !ok {
				t.Errorf("manifest lacks %s", field)
			}
		}
		if !strings.Contains(string(resp.Body), "/orders/{order_id}") {
			t.Error("manifest does not list the demo endpoints")
		}
	})

	t.Run("DISCOVER / with Agent-ID is the directory", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "DISCOVER", "/", agtp.HeaderAgentID, agent))
		if resp.Status != agtp.StatusOK || !strings.Contains(string(resp.Body), `"directory"`) || !strings.Contains(string(resp.Body), `"/methods"`) {
			t.Fatalf("DISCOVER / with Agent-ID = %d %s", resp.Status, resp.Body)
		}
	})

	structural := []struct {
		name        string
		req         *agtp.Request
		status      int
		reason      string
		bodyMembers []string
		// wire marks errors the transport answers itself; their record is
		// unsigned and marked wire_error (docs/frontdoor.md).
		wire bool
	}{
		{"459 names the method and the catalog version", request(t, "FROBNICATE", "/orders"), 459, "method-not-in-catalog", []string{"method", "catalog_version"}, false},
		{"459 for a malformed method token", request(t, "query", "/orders"), 459, "method-invalid", []string{"method"}, true},
		{"460 names the segment that is a verb", request(t, "QUERY", "/orders/list/fetch"), 460, "", []string{"segment"}, false},
		{"460 for a trailing slash", request(t, "QUERY", "/orders/"), 460, "", []string{"segment"}, false},
		{"404 for an unknown path", request(t, "QUERY", "/nothing-here"), 404, "not-found", nil, false},
		{"405 lists the allowed methods", request(t, "SUMMARIZE", "/orders"), 405, "", []string{"allowed_methods_for_path", "redirects_for_path"}, false},
		{"401 without Agent-ID on a non-anonymous endpoint", request(t, "QUERY", "/orders/ord-1001"), 401, "agent-unauthenticated", nil, false},
		{"401 for an unknown Agent-ID", request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, strings.Repeat("ab", 32)), 401, "agent-unauthenticated", nil, false},
		{"262 for a scope claim beyond the identity document", request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, agent, agtp.HeaderAuthorityScope, "payments:purchase"), 262, "scope-claim-invalid", nil, false},
		{"262 when the claim does not cover required_scopes", request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, agent, agtp.HeaderAuthorityScope, "documents:read"), 262, "scope-required", nil, false},
		{"422 for input that breaks the schema", request(t, "QUERY", "/orders?limit=1000", agtp.HeaderAgentID, agent), 422, "input-invalid", []string{"violations"}, false},
		{"501 for Delegation-Chain", request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderDelegationChain, "x"), 501, "delegation-unsupported", nil, false},
	}
	for _, tc := range structural {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Header.Set(agtp.HeaderTaskID, "task-42")
			resp := c.roundTrip(t, tc.req)
			if resp.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.Status, tc.status, resp.Body)
			}
			body := errorBody(t, resp)
			if tc.reason != "" && body["reason"] != tc.reason {
				t.Errorf("reason %v, want %s", body["reason"], tc.reason)
			}
			if body["task_id"] != "task-42" || resp.Header.Get(agtp.HeaderTaskID) != "task-42" {
				t.Errorf("Task-ID not echoed: header %q body %v", resp.Header.Get(agtp.HeaderTaskID), body["task_id"])
			}
			for _, m := range tc.bodyMembers {
				if _, ok := body[m]; !ok {
					t.Errorf("error body lacks %s: %s", m, resp.Body)
				}
			}
			if tc.wire {
				rec, err := attribution.Parse(resp.Header.Get(agtp.HeaderAttributionRecord))
				if err != nil || rec.Alg != "none" || string(rec.Payload.Extra["wire_error"]) != "true" {
					t.Fatalf("wire error record = %+v, %v; want an unsigned wire_error record", rec, err)
				}
				return
			}
			verify(t, resp)
		})
	}

	t.Run("400 for # on the request line, with a reason", func(t *testing.T) {
		conn := c.dialAGTP(t)
		_ = conn.conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.conn.Write([]byte("AGTP/1.0 QUERY /orders#x\r\nContent-Length: 0\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := agtp.ReadResponse(conn.br, agtp.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 400 || errorBody(t, resp)["reason"] != "invalid-request-line" || resp.Header.Get(agtp.HeaderServerID) == "" {
			t.Fatalf("got %d %s %v", resp.Status, resp.Body, resp.Header)
		}
	})

	t.Run("Supported-Methods on the first response of a connection only, with the 18 floor methods", func(t *testing.T) {
		conn := c.dialAGTP(t)
		first := conn.do(request(t, "DISCOVER", "/"))
		second := conn.do(request(t, "DISCOVER", "/"))
		supported := map[string]bool{}
		for _, m := range strings.Split(first.Header.Get(agtp.HeaderSupportedMethods), ",") {
			supported[strings.TrimSpace(m)] = true
		}
		// core 32 (all 18 floor methods), companions 22 (QUOTE, implemented here).
		for _, m := range append(agtp.FloorMethods(), "QUOTE") {
			if !supported[m] {
				t.Errorf("first response Supported-Methods %q lacks %s", first.Header.Get(agtp.HeaderSupportedMethods), m)
			}
		}
		if second.Header.Has(agtp.HeaderSupportedMethods) {
			t.Error("second response carries Supported-Methods")
		}
	})

	t.Run("DISCOVER /genesis with no agent named is 404", func(t *testing.T) {
		// api 45: this server has no server-level Genesis; an anonymous
		// caller names no agent, so none is loaded for it.
		resp := c.roundTrip(t, request(t, "DISCOVER", "/genesis"))
		if resp.Status != 404 || errorBody(t, resp)["reason"] != "genesis-not-found" {
			t.Fatalf("DISCOVER /genesis without Agent-ID = %d %s", resp.Status, resp.Body)
		}
		verify(t, resp)
	})

	t.Run("a call runs its handler and chains the caller's records", func(t *testing.T) {
		conn := c.dialAs(t, agent)
		first := conn.do(request(t, "QUERY", "/orders/ord-1001", agtp.HeaderAgentID, agent, agtp.HeaderRequestID, "01J0000000000000000000000A"))
		if first.Status != 200 || !strings.Contains(string(first.Body), `"ord-1001"`) {
			t.Fatalf("QUERY = %d %s", first.Status, first.Body)
		}
		if first.Header.Get(agtp.HeaderAgentID) != agent || first.Header.Get(agtp.HeaderRequestID) != "01J0000000000000000000000A" {
			t.Errorf("Agent-ID / Request-ID not echoed: %v", first.Header)
		}
		second := conn.do(request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent))
		rec1, rec2 := verify(t, first), verify(t, second)
		if rec1.Payload.AgentID != agent || rec2.Payload.PreviousAuditID != rec1.AuditID {
			t.Fatalf("second record's previous_audit_id %s, want %s", rec2.Payload.PreviousAuditID, rec1.AuditID)
		}
		head := conn.do(request(t, "INSPECT", "/?target=chain_head&agent_id="+agent))
		if head.Status != 200 || !strings.Contains(string(head.Body), rec2.AuditID) {
			t.Fatalf("INSPECT chain_head = %d %s, want %s", head.Status, head.Body, rec2.AuditID)
		}
		got := conn.do(request(t, "INSPECT", "/?target=audit&audit_id="+rec1.AuditID))
		if got.Status != 200 || !strings.Contains(string(got.Body), first.Header.Get(agtp.HeaderAttributionRecord)) {
			t.Fatalf("INSPECT audit = %d %s", got.Status, got.Body)
		}
		missing := conn.do(request(t, "INSPECT", "/?target=audit&audit_id="+strings.Repeat("0", 64)))
		if missing.Status != 404 {
			t.Fatalf("INSPECT of an unknown record = %d %s", missing.Status, missing.Body)
		}
	})

	t.Run("idempotent replay is byte-identical and a reused key with another body is 409", func(t *testing.T) {
		body := `{"lines":[{"sku":"gadget","quantity":2}]}`
		create := func(b string) *agtp.Response {
			return c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, "e2e-key-1"), b))
		}
		first := create(body)
		if first.Status != 200 {
			t.Fatalf("CREATE = %d %s", first.Status, first.Body)
		}
		again := create(body)
		if again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" || string(again.Body) != string(first.Body) {
			t.Fatalf("replay: replayed=%q body %s, want %s", again.Header.Get(agtp.HeaderIdempotentReplayed), again.Body, first.Body)
		}
		if again.Header.Get(agtp.HeaderResponseID) == first.Header.Get(agtp.HeaderResponseID) {
			t.Error("replay reused the Response-ID")
		}
		other := create(`{"lines":[{"sku":"gadget","quantity":3}]}`)
		if other.Status != 409 || errorBody(t, other)["reason"] != "idempotency-key-reused" {
			t.Fatalf("reused key with another body = %d %s", other.Status, other.Body)
		}
	})

	t.Run("QUOTE estimates without running the call", func(t *testing.T) {
		resp := c.roundTrip(t, withJSON(request(t, "QUOTE", "/"), `{"method":"QUERY","path":"/orders/ord-1001","parameters":{}}`))
		if resp.Status != 200 || !strings.Contains(resp.Header.Get(agtp.HeaderCostEstimate), "compute-seconds=") ||
			!strings.Contains(string(resp.Body), `"estimated_cost"`) {
			t.Fatalf("QUOTE = %d %q %s", resp.Status, resp.Header.Get(agtp.HeaderCostEstimate), resp.Body)
		}
		if _, err := agtp.ParseBudget(resp.Header.Get(agtp.HeaderCostEstimate)); err != nil {
			t.Errorf("Cost-Estimate is not in Budget-Limit format: %v", err)
		}
		unknown := c.roundTrip(t, withJSON(request(t, "QUOTE", "/"), `{"method":"QUERY","path":"/nowhere","parameters":{}}`))
		if unknown.Status != 404 {
			t.Fatalf("QUOTE of an unknown target = %d %s", unknown.Status, unknown.Body)
		}
		// companions 24: method and parameters are required (400).
		for body, reason := range map[string]string{
			`{"path":"/orders/ord-1001","parameters":{}}`:  "method-required",
			`{"method":"QUERY","path":"/orders/ord-1001"}`: "parameters-required",
		} {
			if resp := c.roundTrip(t, withJSON(request(t, "QUOTE", "/"), body)); resp.Status != 400 || errorBody(t, resp)["reason"] != reason {
				t.Fatalf("QUOTE %s = %d %s, want 400 %s", body, resp.Status, resp.Body, reason)
			}
		}
	})

	t.Run("a Session-ID is bound to its first agent", func(t *testing.T) {
		other := c.registerAgent(t, "e2e-other", "orders:read")
		sid := "sess-" + strings.Repeat("7f", 12)
		if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid)); resp.Status != 200 {
			t.Fatalf("first use = %d %s", resp.Status, resp.Body)
		}
		resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, other, agtp.HeaderSessionID, sid))
		if resp.Status != 401 {
			t.Fatalf("same Session-ID from another agent = %d %s, want 401", resp.Status, resp.Body)
		}
	})

	t.Run("SUSPEND pauses a session until RESUME presents the single-use nonce", func(t *testing.T) {
		sid := "sess-" + strings.Repeat("5c", 12)
		call := func(method, body string) *agtp.Response {
			req := request(t, method, "/", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid)
			if body != "" {
				withJSON(req, body)
			}
			return c.roundTrip(t, req)
		}
		query := func() *agtp.Response {
			return c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderSessionID, sid))
		}
		if resp := query(); resp.Status != 200 {
			t.Fatalf("before SUSPEND: %d %s", resp.Status, resp.Body)
		}
		susp := call("SUSPEND", `{"session_id":"`+sid+`","reason":"awaiting_input","checkpoint":{"step":3}}`)
		body := errorBody(t, susp)
		nonce, _ := body["resumption_nonce"].(string)
		if susp.Status != 200 || len(nonce) != 22 || body["status"] != "suspended" {
			t.Fatalf("SUSPEND = %d %s", susp.Status, susp.Body)
		}
		if resp := query(); resp.Status != 409 || errorBody(t, resp)["reason"] != "session-suspended" {
			t.Fatalf("request in a suspended session = %d %s", resp.Status, resp.Body)
		}
		if resp := call("RESUME", `{"session_id":"`+sid+`","resumption_nonce":"`+strings.Repeat("A", 22)+`"}`); resp.Status != 403 {
			t.Fatalf("RESUME with a wrong nonce = %d %s", resp.Status, resp.Body)
		}
		resumed := call("RESUME", `{"session_id":"`+sid+`","resumption_nonce":"`+nonce+`"}`)
		if resumed.Status != 200 || !strings.Contains(string(resumed.Body), `"step":3`) {
			t.Fatalf("RESUME = %d %s", resumed.Status, resumed.Body)
		}
		if resp := query(); resp.Status != 200 {
			t.Fatalf("after RESUME: %d %s", resp.Status, resp.Body)
		}
		if resp := call("RESUME", `{"session_id":"`+sid+`","resumption_nonce":"`+nonce+`"}`); resp.Status != 409 {
			t.Fatalf("second RESUME with the used nonce = %d %s, want 409", resp.Status, resp.Body)
		}
	})

	t.Run("RCNS: confirm-first gate, then the presented contract runs its composition", func(t *testing.T) {
		negotiator := c.registerAgent(t, "e2e-negotiator", "orders:read", "documents:read", "rcns:negotiate")
		gate := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, negotiator, agtp.HeaderAllowRCNS, "true"))
		if gate.Status != agtp.StatusRCNSContractAvailable {
			t.Fatalf("gate = %d %s, want 461", gate.Status, gate.Body)
		}
		preview := errorBody(t, gate)
		id, _ := preview["synthesis_id"].(string)
		if id == "" || preview["contract_hash"] == nil {
			t.Fatalf("461 preview lacks synthesis_id or contract_hash: %s", gate.Body)
		}
		run := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, negotiator, agtp.HeaderContractSynthesized, id))
		if run.Status != 200 || !strings.Contains(string(run.Body), `"summary"`) {
			t.Fatalf("presented contract = %d %s", run.Status, run.Body)
		}
		rec := verify(t, run)
		if rec.Payload.SynthesisID != id || rec.Payload.ContractHash == "" {
			t.Fatalf("record does not name the contract: %+v", rec.Payload)
		}
		// Another agent cannot use it.
		thief := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, agent, agtp.HeaderContractSynthesized, id))
		if thief.Status != agtp.StatusRCNSNoContract || errorBody(t, thief)["reason"] != "contract-not-yours" || !thief.Header.Has(agtp.HeaderRCNSAttemptID) {
			t.Fatalf("another agent presenting the contract = %d %s", thief.Status, thief.Body)
		}
		// Without Allow-RCNS the pair stays structurally refused for others.
		if resp := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1001", agtp.HeaderAgentID, agent)); resp.Status != 405 {
			t.Fatalf("without a contract = %d %s, want 405", resp.Status, resp.Body)
		}
	})

	t.Run("REVOKE target=contract makes the contract 464 contract-revoked; a bogus stale-contracts mode is 400", func(t *testing.T) {
		negotiator := c.registerAgent(t, "e2e-revoker", "orders:read", "documents:read", "rcns:negotiate")
		gate := c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1002", agtp.HeaderAgentID, negotiator, agtp.HeaderAllowRCNS, "true"))
		id, _ := errorBody(t, gate)["synthesis_id"].(string)
		if gate.Status != agtp.StatusRCNSContractAvailable || id == "" {
			t.Fatalf("gate = %d %s, want 461 with a synthesis_id", gate.Status, gate.Body)
		}
		present := func() *agtp.Response {
			return c.roundTrip(t, request(t, "SUMMARIZE", "/orders/ord-1002", agtp.HeaderAgentID, negotiator, agtp.HeaderContractSynthesized, id))
		}
		if run := present(); run.Status != 200 {
			t.Fatalf("presented contract before REVOKE = %d %s", run.Status, run.Body)
		}
		revoke := c.roundTrip(t, withJSON(request(t, "REVOKE", "/", agtp.HeaderAgentID, negotiator),
			`{"target":"contract","synthesis_id":"`+id+`","reason":"no longer needed"}`))
		if revoke.Status != 200 || errorBody(t, revoke)["synthesis_id"] != id {
			t.Fatalf("REVOKE target=contract = %d %s", revoke.Status, revoke.Body)
		}
		verify(t, revoke)
		// api 97, companions 21: presenting it afterwards is 464 contract-revoked.
		after := present()
		if after.Status != agtp.StatusRCNSNoContract || errorBody(t, after)["reason"] != "contract-revoked" || !after.Header.Has(agtp.HeaderRCNSAttemptID) {
			t.Fatalf("presented after REVOKE = %d %s %v", after.Status, after.Body, after.Header)
		}
		// core 109: the stale-contract sweep refuses an unknown mode.
		operator := c.registerAgent(t, "e2e-contract-operator", "inspect:all")
		bogus := c.roundTrip(t, withJSON(request(t, "REVOKE", "/", agtp.HeaderAgentID, operator), `{"target":"stale-contracts","mode":"bogus"}`))
		if bogus.Status != 400 || errorBody(t, bogus)["reason"] != "mode-invalid" {
			t.Fatalf("REVOKE target=stale-contracts mode=bogus = %d %s", bogus.Status, bogus.Body)
		}
	})

	t.Run("PROPOSE synthesizes an endpoint callable at once in the session", func(t *testing.T) {
		proposer := c.registerAgent(t, "e2e-proposer", "orders:read", "documents:read", "rcns:negotiate")
		sid := "sess-" + strings.Repeat("3a", 12)
		body := `{"endpoint":{"method":"SUMMARIZE","path":"/order-digest","description":"Digest of my orders",
			"semantic":{"intent":"Summarize my recent orders.","actor":"agent","outcome":"A short digest of the orders.","capability":"analysis","confidence":0.8,"impact":"informational","is_idempotent":true},
			"input_schema":{"type":"object","properties":{"status":{"type":"string","enum":["open","shipped","cancelled"]}},"additionalProperties":false},
			"output_schema":{"type":"object","additionalProperties":true},"errors":[]}}`
		resp := c.roundTrip(t, withJSON(request(t, "PROPOSE", "/", agtp.HeaderAgentID, proposer, agtp.HeaderSessionID, sid), body))
		if resp.Status != agtp.StatusProposalApproved {
			t.Fatalf("PROPOSE = %d %s, want 263", resp.Status, resp.Body)
		}
		approved := errorBody(t, resp)
		if approved["synthesis_id"] == nil || approved["expires_at"] == nil {
			t.Fatalf("263 lacks synthesis_id or expires_at: %s", resp.Body)
		}
		call := c.roundTrip(t, request(t, "SUMMARIZE", "/order-digest", agtp.HeaderAgentID, proposer, agtp.HeaderSessionID, sid))
		if call.Status != 200 || !strings.Contains(string(call.Body), `"result"`) {
			t.Fatalf("calling the synthesized endpoint = %d %s", call.Status, call.Body)
		}
		// The contract is listed for its owner.
		list := c.roundTrip(t, request(t, "DISCOVER", "/contracts", agtp.HeaderAgentID, proposer))
		if list.Status != 200 || !strings.Contains(string(list.Body), fmt.Sprint(approved["synthesis_id"])) {
			t.Fatalf("DISCOVER /contracts = %d %s", list.Status, list.Body)
		}
	})

	t.Run("a composition endpoint runs its steps and names them in prior_actions", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "SUMMARIZE", "/order-briefs/ord-1002", agtp.HeaderAgentID, agent))
		if resp.Status != 200 || !strings.Contains(string(resp.Body), `"brief"`) {
			t.Fatalf("composition = %d %s", resp.Status, resp.Body)
		}
		rec := verify(t, resp)
		if len(rec.Payload.PriorActions) != 2 {
			t.Fatalf("prior_actions = %+v, want the two steps", rec.Payload.PriorActions)
		}
		for _, pa := range rec.Payload.PriorActions {
			got := c.roundTrip(t, request(t, "INSPECT", "/?target=audit&audit_id="+pa.AuditID, agtp.HeaderAgentID, agent))
			if got.Status != 200 {
				t.Fatalf("step record %s: INSPECT = %d %s", pa.AuditID, got.Status, got.Body)
			}
		}
	})

	t.Run("DESCRIBE serves the namespace, the status sub-resource, and refuses a malformed ID", func(t *testing.T) {
		ns := c.roundTrip(t, request(t, "DESCRIBE", "/agents"))
		if ns.Status != 200 || !strings.Contains(string(ns.Body), `"agtp-namespace"`) || !strings.Contains(string(ns.Body), agent) {
			t.Fatalf("DESCRIBE /agents = %d %s", ns.Status, ns.Body)
		}
		st := c.roundTrip(t, request(t, "DESCRIBE", "/agents/e2e-buyer/status"))
		if st.Status != 200 || !strings.Contains(string(st.Body), `"agtp-status"`) {
			t.Fatalf("DESCRIBE /agents/e2e-buyer/status = %d %s", st.Status, st.Body)
		}
		bad := c.roundTrip(t, request(t, "DESCRIBE", "/agents/"+strings.ToUpper(agent)))
		if bad.Status != 400 || errorBody(t, bad)["reason"] != "invalid-canonical-id" {
			t.Fatalf("DESCRIBE with an upper-case ID = %d %s", bad.Status, bad.Body)
		}
	})

	t.Run("cancelling a cancelled order is a 409 conflict", func(t *testing.T) {
		created := c.roundTrip(t, withJSON(request(t, "CREATE", "/orders", agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, "e2e-cancel-1"), `{"lines":[{"sku":"gizmo","quantity":1}]}`))
		var out struct {
			Result struct {
				OrderID string `json:"order_id"`
			} `json:"result"`
		}
		if err := json.Unmarshal(created.Body, &out); err != nil || out.Result.OrderID == "" {
			t.Fatalf("CREATE = %d %s", created.Status, created.Body)
		}
		cancel := func(key string) *agtp.Response {
			return c.roundTrip(t, request(t, "CANCEL", "/orders/"+out.Result.OrderID, agtp.HeaderAgentID, agent, agtp.HeaderIdempotencyKey, key))
		}
		if first := cancel("e2e-cancel-a"); first.Status != 200 {
			t.Fatalf("first CANCEL = %d %s", first.Status, first.Body)
		}
		if again := cancel("e2e-cancel-b"); again.Status != 409 || errorBody(t, again)["reason"] != "order_already_cancelled" {
			t.Fatalf("second CANCEL = %d %s", again.Status, again.Body)
		}
	})

	t.Run("a declared handler error is 422 naming it", func(t *testing.T) {
		resp := c.roundTrip(t, request(t, "QUERY", "/orders/ord-9999", agtp.HeaderAgentID, agent))
		if resp.Status != 422 || errorBody(t, resp)["reason"] != "order_not_found" {
			t.Fatalf("got %d %s", resp.Status, resp.Body)
		}
	})

	t.Run("a revoked caller gets 410 within a second", func(t *testing.T) {
		victim, issuer := c.registerAgentKey(t, "e2e-victim", "orders:read")
		if resp := c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)); resp.Status != 200 {
			t.Fatalf("before REVOKE: %d %s", resp.Status, resp.Body)
		}
		if resp := c.asIssuer(t, issuer).do(withJSON(request(t, "REVOKE", "/"), `{"agent_id":"`+victim+`","reason":"e2e"}`)); resp.Status != 200 {
			t.Fatalf("REVOKE = %d %s", resp.Status, resp.Body)
		}
		testkit.WaitFor(t, time.Second, "410 for the revoked agent", func() bool {
			return c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, victim)).Status == 410
		})
	})

	t.Run("lifecycle methods over AGTP report noop on a repeat", func(t *testing.T) {
		target, issuer := c.registerAgentKey(t, "e2e-sleeper", "orders:read")
		deactivate := func() map[string]any {
			resp := c.asIssuer(t, issuer).do(withJSON(request(t, "DEACTIVATE", "/"), `{"agent_id":"`+target+`","reason":"maintenance"}`))
			if resp.Status != 200 {
				t.Fatalf("DEACTIVATE = %d %s", resp.Status, resp.Body)
			}
			return errorBody(t, resp)
		}
		if first := deactivate(); first["status"] != "suspended" || first["noop"] != nil {
			t.Fatalf("first DEACTIVATE = %v", first)
		}
		if second := deactivate(); second["noop"] != true {
			t.Fatalf("second DEACTIVATE = %v, want noop", second)
		}
		testkit.WaitFor(t, time.Second, "503 for the suspended agent", func() bool {
			return c.roundTrip(t, request(t, "QUERY", "/orders", agtp.HeaderAgentID, target)).Status == 503
		})
	})
}
