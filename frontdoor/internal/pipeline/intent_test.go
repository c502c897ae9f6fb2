package pipeline_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
)

// rootBuiltins are the floor methods on / as the catalog defines them
// (catalogsvc/internal/builtin/builtins.json), reduced to what the
// pipeline reads.
var rootBuiltins = func() string {
	var out string
	for _, b := range []struct{ method, function, props, required string }{
		{"QUERY", "agtp.builtin.query.intent", `{intent: {type: string, minLength: 1, maxLength: 2048}, scope: {type: [string, array]}, confidence_threshold: {type: number, minimum: 0, maximum: 1}, max_results: {type: integer, minimum: 1, maximum: 50}}`, `[intent]`},
		{"PLAN", "agtp.builtin.plan", `{goal: {type: string}, intent: {type: string}, constraints: {type: [object, string]}, available_methods: {type: array}}`, `[]`},
		{"SUMMARIZE", "agtp.builtin.summarize.list", `{source: {type: string}, focus: {type: string}}`, `[]`},
		{"EXECUTE", "agtp.builtin.execute.list", `{action: {type: string}}`, `[]`},
	} {
		out += fmt.Sprintf(`
  - method: %s
    path: /
    description: Answers from the caller's endpoints.
    semantic: {intent: Answer from the caller's endpoints., actor: agent, outcome: The caller knows its endpoints., capability: discovery, confidence: 1.0, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: %s, required: %s, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: %s}
    anonymous: true
`, b.method, b.props, b.required, b.function)
	}
	return out
}()

// keysOf lists "METHOD /path" of the entries of a result member.
func keysOf(r bndResult, member string) []string {
	list, _ := r.path("result", member).([]any)
	var out []string
	for _, e := range list {
		m, _ := e.(map[string]any)
		out = append(out, fmt.Sprint(m["method"], " ", m["path"]))
	}
	return out
}

func entry(r bndResult, member string, i int) map[string]any {
	list, _ := r.path("result", member).([]any)
	if i >= len(list) {
		return nil
	}
	m, _ := list[i].(map[string]any)
	return m
}

// TestQueryRootResolvesAgainstWhatTheCallerMayUse: QUERY / ranks only the
// endpoints the caller may use (its scopes cover theirs, and a
// composition's every step), never the protocol built-ins, and answers
// each with its semantic block, input schema, required scopes, score and
// the words that matched.
func TestQueryRootResolvesAgainstWhatTheCallerMayUse(t *testing.T) {
	f := newBndFixtureWith(t, rootBuiltins)
	const body = `{"task_id":"task-1","parameters":{"intent":"summarize order o-1"}}`

	full := f.do(t, agentFull, "QUERY", "/", nil, body)
	if full.status != 200 {
		t.Fatalf("QUERY / %d %v", full.status, full.body)
	}
	got := keysOf(full, "results")
	if len(got) == 0 || got[0] != "SUMMARIZE /order-briefs/{order_id}" {
		t.Fatalf("ranking %v, want the order brief first", got)
	}
	for _, k := range got {
		if k == "QUERY /" || k == "PLAN /" {
			t.Errorf("a protocol built-in was ranked: %v", got)
		}
	}
	top := entry(full, "results", 0)
	sem, _ := top["semantic"].(map[string]any)
	schema, _ := top["input_schema"].(map[string]any)
	if top["kind"] != "composition" || top["recipe"] != "order-brief" || sem["intent"] != "Summarize the order." || schema["type"] != "object" ||
		fmt.Sprint(top["required_scopes"]) != "[briefs:read]" || fmt.Sprint(top["required_inputs"]) != "[order_id]" ||
		fmt.Sprint(top["steps"]) != "[QUERY /orders/{order_id} SUMMARIZE /documents]" || fmt.Sprint(top["matched_terms"]) != "[summarize order]" {
		t.Errorf("top result %v", top)
	}
	if s, _ := top["score"].(float64); s <= 0 {
		t.Errorf("score %v", top["score"])
	}
	if full.path("result", "result_count") != float64(len(got)) {
		t.Errorf("result_count %v for %d results", full.path("result", "result_count"), len(got))
	}

	// briefs:read without orders:read: the brief's first step is out of
	// reach, so the brief is too, and so is QUERY /orders/{order_id}.
	partial := f.do(t, agentNoOrder, "QUERY", "/", nil, body)
	got = keysOf(partial, "results")
	if partial.status != 200 || len(got) == 0 || got[0] != "SUMMARIZE /documents" ||
		slices.Contains(got, "SUMMARIZE /order-briefs/{order_id}") || slices.Contains(got, "QUERY /orders/{order_id}") {
		t.Fatalf("without orders:read: %d %v", partial.status, got)
	}

	// QUERY / tells what the server's endpoints do: with
	// anonymous_discovery off, an anonymous caller gets 262 as DISCOVER
	// would; with it on, it reaches anonymous endpoints only (here none).
	anon := f.do(t, "", "QUERY", "/", nil, body)
	if anon.status != 262 || anon.body["reason"] != "anonymous-discovery-disabled" {
		t.Fatalf("anonymous, discovery closed: %d %v", anon.status, anon.body)
	}
	f.setPolicies(t, &catalogv1.ManifestPolicies{AnonymousDiscovery: true})
	anon = f.do(t, "", "QUERY", "/", nil, body)
	if anon.status != 200 || anon.path("result", "result_count") != float64(0) {
		t.Fatalf("anonymous %d %v", anon.status, anon.body)
	}

	// A threshold above every match's confidence leaves none.
	high := f.do(t, agentFull, "QUERY", "/", nil, `{"intent":"summarize order o-1 quickly please","confidence_threshold":1}`)
	if high.status != 200 || high.path("result", "result_count") != float64(0) {
		t.Fatalf("threshold 1: %d %v", high.status, keysOf(high, "results"))
	}
	// scope narrows to a data domain.
	rooms := f.do(t, agentFull, "QUERY", "/", nil, `{"intent":"return the room","scope":["rooms:read"]}`)
	if got := keysOf(rooms, "results"); rooms.status != 200 || !slices.Equal(got, []string{"QUERY /rooms/{room_id}"}) {
		t.Fatalf("scope rooms: %d %v", rooms.status, got)
	}

	for name, tc := range map[string]struct {
		body   string
		status int
		reason string
	}{
		"no intent":         {`{}`, 422, "input-invalid"},
		"a blank intent":    {`{"intent":"   "}`, 422, "intent-required"},
		"max_results of 51": {`{"intent":"order","max_results":51}`, 422, "input-invalid"},
	} {
		r := f.do(t, agentFull, "QUERY", "/", nil, tc.body)
		if r.status != tc.status || r.body["reason"] != tc.reason {
			t.Errorf("%s: %d %v", name, r.status, r.body)
		}
	}
}

// TestPlanRootRunsNothing: PLAN / resolves a goal into calls the caller
// may make, replaces the calls a composition makes by the composition, and
// runs nothing: policysvc is asked about the PLAN request alone.
func TestPlanRootRunsNothing(t *testing.T) {
	f := newBndFixtureWith(t, rootBuiltins)
	f.setPolicies(t, &catalogv1.ManifestPolicies{AnonymousDiscovery: true})
	asked := len(f.policy.requests())
	r := f.do(t, agentFull, "PLAN", "/", nil, `{"parameters":{"goal":"return the order o-1, then summarize the text"},"task_id":"task-1"}`)
	if r.status != 200 {
		t.Fatalf("PLAN / %d %v", r.status, r.body)
	}
	if n := len(f.policy.requests()) - asked; n != 1 {
		t.Errorf("policysvc was asked %d times; a plan runs nothing", n)
	}
	steps := keysOf(r, "ordered_steps")
	step := entry(r, "ordered_steps", 0)
	if !slices.Equal(steps, []string{"SUMMARIZE /order-briefs/{order_id}"}) || step["recipe"] != "order-brief" || step["step"] != float64(1) ||
		fmt.Sprint(step["required_inputs"]) != "[order_id]" {
		t.Fatalf("steps %v, first %v", steps, step)
	}
	cost, _ := r.path("result", "estimated_cost", "calls").(map[string]any)
	if cost["expected"] != float64(2) {
		t.Errorf("estimated calls %v, want the composition's two", cost)
	}
	if c, _ := r.path("result", "confidence").(float64); c <= 0 || c > 1 {
		t.Errorf("confidence %v", r.path("result", "confidence"))
	}
	if a, _ := r.path("result", "assumptions").([]any); len(a) == 0 {
		t.Error("no assumptions")
	}

	// Without orders:read the composition is out of reach, and so is the
	// order: only the summary is planned, the rest is unmatched or
	// answered by what the caller may use.
	r = f.do(t, agentNoOrder, "PLAN", "/", nil, `{"goal":"summarize the text"}`)
	if steps := keysOf(r, "ordered_steps"); r.status != 200 || !slices.Equal(steps, []string{"SUMMARIZE /documents"}) {
		t.Fatalf("no orders:read: %d %v", r.status, steps)
	}
	// available_methods narrows the calls.
	r = f.do(t, agentFull, "PLAN", "/", nil, `{"intent":"summarize the order o-1","available_methods":["QUERY"]}`)
	if steps := keysOf(r, "ordered_steps"); r.status != 200 || !slices.Equal(steps, []string{"QUERY /orders/{order_id}"}) {
		t.Fatalf("QUERY only: %d %v", r.status, steps)
	}

	for name, tc := range map[string]struct {
		body   string
		reason string
	}{
		"no goal":          {`{}`, "goal-required"},
		"nothing answers":  {`{"goal":"fly me to the moon"}`, "goal-unplannable"},
		"anonymous caller": {`{"goal":"summarize the text"}`, "goal-unplannable"},
	} {
		agent := agentFull
		if name == "anonymous caller" {
			agent = ""
		}
		r := f.do(t, agent, "PLAN", "/", nil, tc.body)
		if r.status != 422 || r.body["reason"] != tc.reason {
			t.Errorf("%s: %d %v", name, r.status, r.body)
		}
	}
}

// TestSummarizeAndExecuteRootList: SUMMARIZE / and EXECUTE / list the
// endpoints of their method the caller may use; a source (or an action)
// puts the best suited first.
func TestSummarizeAndExecuteRootList(t *testing.T) {
	f := newBndFixtureWith(t, rootBuiltins)
	r := f.do(t, agentFull, "SUMMARIZE", "/", nil, `{"source":"order o-1"}`)
	got := keysOf(r, "endpoints")
	if r.status != 200 || len(got) == 0 || got[0] != "SUMMARIZE /order-briefs/{order_id}" || !slices.Contains(got, "SUMMARIZE /documents") {
		t.Fatalf("SUMMARIZE / %d %v", r.status, got)
	}
	for _, k := range got {
		if k[:len("SUMMARIZE ")] != "SUMMARIZE " || k == "SUMMARIZE /" {
			t.Errorf("listed %s", k)
		}
	}
	if sem, _ := entry(r, "endpoints", 0)["semantic"].(map[string]any); sem["intent"] != "Summarize the order." {
		t.Errorf("semantic block %v", entry(r, "endpoints", 0))
	}
	r = f.do(t, agentNoOrder, "SUMMARIZE", "/", nil, ``)
	if got := keysOf(r, "endpoints"); r.status != 200 || slices.Contains(got, "SUMMARIZE /order-briefs/{order_id}") || !slices.Contains(got, "SUMMARIZE /documents") {
		t.Fatalf("SUMMARIZE / without orders:read %d %v", r.status, got)
	}
	r = f.do(t, agentNoOrder, "EXECUTE", "/", nil, `{"action":"call a remote tool"}`)
	if got := keysOf(r, "endpoints"); r.status != 200 || !slices.Equal(got, []string{"EXECUTE /mcp-remote", "EXECUTE /mcp"}) {
		t.Fatalf("EXECUTE / %d %v", r.status, got)
	}
	b, _ := json.Marshal(r.body)
	if r.path("task_id") != "task-1" || r.path("status") != float64(200) {
		t.Errorf("not in the response envelope: %s", b)
	}
}

// BenchmarkQueryRoot is one QUERY / through the pipeline: the caller's
// endpoints collected and indexed, the intent ranked, the answer signed.
func BenchmarkQueryRoot(b *testing.B) {
	f := newBndFixtureWith(b, rootBuiltins)
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do(b, agentFull, "QUERY", "/", nil, `{"intent":"summarize order o-1"}`); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}

// BenchmarkPlanRoot is one PLAN / of a two-part goal through the pipeline.
func BenchmarkPlanRoot(b *testing.B) {
	f := newBndFixtureWith(b, rootBuiltins)
	b.ReportAllocs()
	for b.Loop() {
		if r := f.do(b, agentFull, "PLAN", "/", nil, `{"goal":"return the order o-1, then summarize the text"}`); r.status != 200 {
			b.Fatal(r.status)
		}
	}
}
