package carried_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/carried"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/upstream"
)

// docs/decisions.md#D-carried-dispatch: dispatch on payload_type if present,
// else on the Content-Type; a bare JSON-RPC body is recognised by its
// method.
func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name, ct string
		input    string
		kind     carried.Kind
		pt       string
	}{
		{"plain AGTP", "application/vnd.agtp+json", `{"report_id":"r"}`, carried.None, ""},
		{"payload_type MCP", "application/vnd.agtp+json", `{"action":"tools/call","payload_type":"application/vnd.mcp.tools+json"}`, carried.MCP, carried.MediaTypeMCPTools},
		{"payload_type wins", carried.MediaTypeMCPTools, `{"payload_type":"application/vnd.a2a+json"}`, carried.Unsupported, carried.MediaTypeA2A},
		{"MCP content type", "application/vnd.mcp.tools+json; charset=utf-8", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, carried.MCP, carried.MediaTypeMCPTools},
		{"ACP content type", carried.MediaTypeACP, `{}`, carried.Unsupported, carried.MediaTypeACP},
		{"bare JSON-RPC MCP", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, carried.MCP, carried.MediaTypeMCPTools},
		{"bare JSON-RPC A2A", "", `{"jsonrpc":"2.0","id":1,"method":"message/send"}`, carried.Unsupported, carried.MediaTypeA2A},
		{"bare JSON-RPC other", "", `{"jsonrpc":"2.0","id":1,"method":"eth_call"}`, carried.Unsupported, "application/json-rpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in map[string]any
			_ = json.Unmarshal([]byte(tc.input), &in)
			kind, pt := carried.Detect(tc.ct, in)
			if kind != tc.kind || pt != tc.pt {
				t.Fatalf("Detect = %v %q, want %v %q", kind, pt, tc.kind, tc.pt)
			}
		})
	}
}

// The MCP message is the body itself, the payload, or built from action
// and payload (core §8 example: parameters.{action, payload_type,
// payload}); a missing id becomes the Task-ID.
func TestMCPMessage(t *testing.T) {
	for _, tc := range []struct {
		name, input        string
		method, id, params string
		mismatch           bool
		err                bool
	}{
		{"message itself", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x"}}`, "tools/call", "5", `{"name":"x"}`, false, false},
		{"payload is message", `{"action":"tools/call","payload":{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{}}}`, "tools/call", `"a"`, `{}`, false, false},
		{"payload is params", `{"action":"tools/call","payload":{"name":"x","arguments":{"a":1}}}`, "tools/call", `"task-9"`, `{"arguments":{"a":1},"name":"x"}`, false, false},
		{"action disagrees", `{"action":"tools/list","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call"}}`, "tools/call", "1", ``, true, false},
		{"no method", `{"payload":{"name":"x"}}`, "", "", "", false, true},
		{"payload not object", `{"action":"tools/call","payload":"x"}`, "", "", "", false, true},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, "", "", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in map[string]any
			_ = json.Unmarshal([]byte(tc.input), &in)
			msg, mismatch, err := carried.MCPMessage(in, "task-9")
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if tc.err {
				return
			}
			if msg.Method != tc.method || string(msg.ID) != tc.id || (tc.params != "" && string(msg.Params) != tc.params) || (mismatch != "") != tc.mismatch {
				t.Fatalf("got %s %s %s mismatch=%q", msg.Method, msg.ID, msg.Params, mismatch)
			}
		})
	}
}

// core §8.3: carried identity fields that contradict the headers are
// reported (and the headers win).
func TestDisagreements(t *testing.T) {
	var body map[string]any
	_ = json.Unmarshal([]byte(`{"method":"EXECUTE","task_id":"t-2","parameters":{"payload":{"session_id":"s-1","params":{"_meta":{"agent_id":"evil"}}}}}`), &body)
	h := map[string]string{"Task-ID": "t-1", "Session-ID": "s-1", "Agent-ID": "good"}
	got := carried.Disagreements(body, func(n string) string { return h[n] })
	if len(got) != 2 || !strings.Contains(strings.Join(got, ";"), "task_id") || !strings.Contains(strings.Join(got, ";"), "_meta.agent_id") {
		t.Fatalf("%v", got)
	}
}

func compile(t *testing.T, docs ...string) []*endpoint.Endpoint {
	t.Helper()
	var out []*endpoint.Endpoint
	for i, d := range docs {
		eps, err := endpoint.ParseAndCompile(fmt.Sprintf("e%d.yaml", i), []byte(d), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, eps...)
	}
	return out
}

// definition is a minimal valid endpoint definition.
func definition(method, path, handlerYAML, extra string) string {
	return fmt.Sprintf(`method: %s
path: "%s"
description: An endpoint for tests.
semantic: {intent: Do the thing., actor: agent, outcome: The thing is done., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
input_schema: {type: object, properties: {order_id: {type: string}}, additionalProperties: false}
output_schema: {type: object}
errors: []
handler: %s
%s`, method, path, handlerYAML, extra)
}

type invoker struct {
	check func(method, template string) *bindings.Outcome
	calls []bindings.Invocation
}

func (v *invoker) Check(method, template string) *bindings.Outcome { return v.check(method, template) }
func (v *invoker) Invoke(_ context.Context, in bindings.Invocation) (*bindings.Outcome, error) {
	v.calls = append(v.calls, in)
	if in.Method == "QUERY" {
		return &bindings.Outcome{Status: 200, Output: json.RawMessage(`{"order_id":"o 1","status":"open"}`), AuditID: "x"}, nil
	}
	return &bindings.Outcome{Status: 422, Reason: "text_too_long", Explanation: "too long"}, nil
}

func rpc(t *testing.T, method, params string) upstream.RPCMessage {
	t.Helper()
	return upstream.RPCMessage{JSONRPC: "2.0", ID: json.RawMessage(`"r1"`), Method: method, Params: json.RawMessage(params)}
}

// The local gateway lists this server's endpoints as MCP tools (only
// those the caller may call; never built-ins or itself), and a tools/call
// is an invocation of the endpoint after the caller's authority over it
// is checked.
func TestGateway(t *testing.T) {
	eps := compile(t,
		definition("QUERY", "/orders/{order_id}", `{type: registered_function, function: demo.orders.get}`, "required_scopes: [\"orders:read\"]"),
		definition("SUMMARIZE", "/documents", `{type: registered_function, function: demo.documents.summarize}`, ""),
		definition("CONFIRM", "/payments", `{type: registered_function, function: demo.pay}`, "required_scopes: [\"payments:write\"]"),
		definition("EXECUTE", "/mcp", `{type: registered_function, function: agtp.mcp.tools}`, ""),
		definition("DESCRIBE", "/things", `{type: registered_function, function: agtp.builtin.describe}`, ""),
	)
	inv := &invoker{check: func(method, _ string) *bindings.Outcome {
		if method == "CONFIRM" {
			return &bindings.Outcome{Status: 262, Reason: "scope-required", Explanation: "needs payments:write"}
		}
		return nil
	}}
	g := &carried.Gateway{Endpoints: eps, Invoker: inv, ServerName: "agtp.test",
		Skip: func(e *endpoint.Endpoint) bool { return strings.HasPrefix(e.HandlerName(), "agtp.builtin.") }}
	ctx := context.Background()

	resp, err := g.Serve(ctx, rpc(t, "tools/list", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tools []carried.Tool `json:"tools"`
	}
	_ = json.Unmarshal(resp.Result, &list)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if fmt.Sprint(names) != "[query_orders summarize_documents]" {
		t.Fatalf("tools %v", names)
	}
	if a := list.Tools[0].Annotations; a == nil || !a.ReadOnlyHint || !a.IdempotentHint {
		t.Errorf("annotations %+v", a)
	}

	resp, err = g.Serve(ctx, rpc(t, "tools/call", `{"name":"query_orders","arguments":{"order_id":"o 1"}}`))
	if err != nil || string(resp.ID) != `"r1"` {
		t.Fatal(err, string(resp.ID))
	}
	var result struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
	}
	_ = json.Unmarshal(resp.Result, &result)
	if result.IsError || result.StructuredContent["status"] != "open" {
		t.Fatalf("result %s", resp.Result)
	}
	if len(inv.calls) != 1 || inv.calls[0].Path != "/orders/o%201" || inv.calls[0].Method != "QUERY" {
		t.Fatalf("invocations %+v", inv.calls)
	}

	// A tool error is a CallToolResult with isError, not an AGTP failure.
	resp, _ = g.Serve(ctx, rpc(t, "tools/call", `{"name":"summarize_documents","arguments":{}}`))
	_ = json.Unmarshal(resp.Result, &result)
	if !result.IsError || !strings.Contains(string(resp.Result), "text_too_long") {
		t.Fatalf("result %s", resp.Result)
	}

	// Authority is AGTP's: a refused tool is the AGTP refusal, before the
	// call is handed over.
	calls := len(inv.calls)
	_, err = g.Serve(ctx, rpc(t, "tools/call", `{"name":"confirm_payments"}`))
	var he *handler.Error
	if !errors.As(err, &he) || he.Status != 262 || he.Name != "scope-required" || len(inv.calls) != calls {
		t.Fatalf("refused tool: %v", err)
	}

	for method, code := range map[string]string{"tools/call": "-32602", "resources/read": "-32601"} {
		resp, err = g.Serve(ctx, rpc(t, method, `{"name":"nope"}`))
		if err != nil || !strings.Contains(string(resp.Error), code) {
			t.Errorf("%s: %s %v", method, resp.Error, err)
		}
	}
	resp, _ = g.Serve(ctx, rpc(t, "initialize", `{"protocolVersion":"2025-03-26"}`))
	if !strings.Contains(string(resp.Result), `"protocolVersion":"2025-03-26"`) || !strings.Contains(string(resp.Result), "agtp.test") {
		t.Errorf("initialize %s", resp.Result)
	}
}

// TestToolNames: AGIS App. C.2 names (declared, else method and first
// path segment), a fallback to the whole path where that is not unique so
// no endpoint is hidden, and inputSchema.required as the endpoint declares.
// An endpoint with a state_transition converts like any other (C.2(d)).
func TestToolNames(t *testing.T) {
	for _, tc := range []struct {
		method, path, declared, want string
	}{
		{"BOOK", "/reservation", "", "book_reservation"},
		{"QUERY", "/orders/{order_id}", "", "query_orders"},
		{"QUERY", "/", "", "query"},
		{"QUERY", "/a-b/c.d", "", "query_a_b"},
		{"QUERY", "/x", "get_x", "get_x"},
	} {
		def := &endpoint.Definition{Method: tc.method, Path: tc.path, Semantic: endpoint.Semantic{MCPToolName: tc.declared}}
		if got := carried.ToolName(def); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.path, got, tc.want)
		}
	}

	handler := `{type: registered_function, function: demo.orders.get}`
	eps := compile(t,
		definition("QUERY", "/orders/{order_id}", handler, ""),
		definition("QUERY", "/orders", handler, ""),
		definition("BOOK", "/reservation/{order_id}", handler, ""),
		definition("QUERY", "/rooms", handler, ""),
		`method: RESERVE
path: /rooms/{room_id}
description: Reserves a room.
semantic: {intent: Reserve a room., actor: agent, outcome: The room is held., capability: transaction, confidence: 0.9, impact: reversible, is_idempotent: false, mcp_tool_name: hold_room, state_transition: ["room.status: free -> held"]}
input_schema: {type: object, properties: {room_id: {type: string}, nights: {type: integer}}, required: [room_id, nights], additionalProperties: false}
output_schema: {type: object}
errors: []
handler: {type: registered_function, function: demo.rooms.reserve}
`)
	g := &carried.Gateway{Endpoints: eps, Invoker: &invoker{check: func(string, string) *bindings.Outcome { return nil }}}
	byName := map[string]carried.Tool{}
	for _, tl := range g.Tools() {
		byName[tl.Name] = tl
	}
	want := map[string]string{
		"query_orders":          "QUERY /orders",
		"query_orders_order_id": "QUERY /orders/{order_id}",
		"book_reservation":      "BOOK /reservation/{order_id}",
		"query_rooms":           "QUERY /rooms",
		"hold_room":             "RESERVE /rooms/{room_id}",
	}
	if len(byName) != len(want) {
		t.Fatalf("tools %v, want %v", slices.Sorted(maps.Keys(byName)), slices.Sorted(maps.Keys(want)))
	}
	for name, title := range want {
		if byName[name].Title != title {
			t.Errorf("%s is %q, want %q", name, byName[name].Title, title)
		}
	}
	var schema struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(byName["hold_room"].InputSchema, &schema); err != nil || !slices.Equal(schema.Required, []string{"room_id", "nights"}) {
		t.Errorf("hold_room inputSchema.required = %v (%v), want [room_id nights]", schema.Required, err)
	}
}
