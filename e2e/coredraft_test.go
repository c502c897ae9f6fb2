package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// coreDraftClient speaks the core draft and nothing else: request lines of
// two tokens (no target, docs/decisions.md#D-request-target), the §5.7
// request envelope with the method's parameters under "parameters", and
// the headers of §5.5.3.
type coreDraftClient struct {
	conn  *agtpConn
	agent string
	tasks int
}

// send writes "AGTP/1.0 METHOD" with params as the envelope's parameters
// and reads the answer.
func (cl *coreDraftClient) send(t *testing.T, method string, params map[string]any) (*agtp.Response, map[string]any) {
	t.Helper()
	cl.tasks++
	task := "task-" + strconv.Itoa(cl.tasks)
	body, err := json.Marshal(map[string]any{"task_id": task, "parameters": params})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "AGTP/1.0 %s\r\nAgent-ID: %s\r\nTask-ID: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		method, cl.agent, task, agtp.MediaTypeJSON, len(body))
	b.Write(body)
	_ = cl.conn.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := cl.conn.conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	resp, err := agtp.ReadResponse(cl.conn.br, agtp.Limits{MaxBody: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	out := errorBody(t, resp)
	if resp.Status == 200 && (out["status"] != float64(200) || out["task_id"] != task) {
		t.Errorf("%s: not the §5.7 envelope for %s: %s", method, task, resp.Body)
	}
	return resp, out
}

// listed reads result.<member> as objects.
func listed(body map[string]any, member string) []map[string]any {
	result, _ := body["result"].(map[string]any)
	list, _ := result[member].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		m, _ := e.(map[string]any)
		out = append(out, m)
	}
	return out
}

func methodPath(m map[string]any) string { return fmt.Sprint(m["method"], " ", m["path"]) }

// TestCoreDraftClient: a client that knows only the core draft reaches
// the demo business through the floor methods on / (core §7.2.1, §7.2.5,
// §7.2.6; docs/intent.md), as processes: QUERY resolves an intent to the
// endpoints this agent may use, with their semantic blocks and inputs;
// PLAN turns a goal into calls, a registered RCNS pattern among them, and
// runs none; SUMMARIZE with a source names what can summarize it.
func TestCoreDraftClient(t *testing.T) {
	c := Start(t, Options{})
	buyer := c.registerAgent(t, "coredraft-buyer", "orders:read", "orders:write")
	guest := c.registerAgent(t, "coredraft-guest", "documents:read")
	cl := &coreDraftClient{conn: c.dialAs(t, buyer), agent: buyer}

	// The first response of the connection lists PLAN among the methods
	// this server supports, and PLAN has an answer.
	resp, body := cl.send(t, "QUERY", map[string]any{"intent": "cancel my order ord-1002"})
	if resp.Status != 200 {
		t.Fatalf("QUERY = %d %s", resp.Status, resp.Body)
	}
	if sm := resp.Header.Get(agtp.HeaderSupportedMethods); !strings.Contains(sm, "PLAN") {
		t.Errorf("Supported-Methods %q", sm)
	}
	if resp.Header.Get(agtp.HeaderAttributionRecord) == "" {
		t.Error("QUERY answered without an Attribution-Record")
	}
	results := listed(body, "results")
	if len(results) == 0 || methodPath(results[0]) != "CANCEL /orders/{order_id}" {
		t.Fatalf("QUERY results %s", resp.Body)
	}
	top := results[0]
	sem, _ := top["semantic"].(map[string]any)
	schema, _ := top["input_schema"].(map[string]any)
	if sem["impact"] == nil || sem["intent"] == "" || schema["properties"] == nil ||
		!strings.Contains(fmt.Sprint(top["required_scopes"]), "orders:write") ||
		fmt.Sprint(top["matched_terms"]) != "[cancel order]" || top["score"].(float64) <= 0 {
		t.Errorf("top result %v", top)
	}

	// An agent without the orders scopes is not offered what it may not
	// call: the order brief (orders:read) gives way to the plain summary.
	guestClient := &coreDraftClient{conn: c.dialAs(t, guest), agent: guest}
	intent := map[string]any{"intent": "summarize order ord-1001"}
	_, body = cl.send(t, "QUERY", intent)
	if r := listed(body, "results"); len(r) == 0 || methodPath(r[0]) != "SUMMARIZE /order-briefs/{order_id}" {
		t.Fatalf("buyer's summary results %v", body["result"])
	}
	resp, body = guestClient.send(t, "QUERY", intent)
	results = listed(body, "results")
	if resp.Status != 200 || len(results) == 0 || methodPath(results[0]) != "SUMMARIZE /documents" {
		t.Fatalf("guest QUERY = %d %s", resp.Status, resp.Body)
	}
	for _, r := range results {
		if scopes := fmt.Sprint(r["required_scopes"]); strings.Contains(scopes, "orders:") {
			t.Errorf("guest offered %s requiring %s", methodPath(r), scopes)
		}
	}

	// QUERY without intent (core assertion 79).
	if resp, _ := cl.send(t, "QUERY", map[string]any{}); resp.Status != 422 {
		t.Errorf("QUERY without intent = %d %s", resp.Status, resp.Body)
	}

	// PLAN: a goal becomes calls; nothing runs (no order is created).
	before := c.orderCount(t, buyer)
	resp, body = cl.send(t, "PLAN", map[string]any{"goal": "create an order for two widgets, then cancel it"})
	if resp.Status != 200 {
		t.Fatalf("PLAN = %d %s", resp.Status, resp.Body)
	}
	var steps []string
	for _, s := range listed(body, "ordered_steps") {
		steps = append(steps, methodPath(s))
	}
	if !slices.Equal(steps, []string{"CREATE /orders", "CANCEL /orders/{order_id}"}) {
		t.Fatalf("PLAN steps %v: %s", steps, resp.Body)
	}
	if first := listed(body, "ordered_steps")[0]; first["step"] != float64(1) || first["required_inputs"] == nil {
		t.Errorf("first step %v", first)
	}
	result, _ := body["result"].(map[string]any)
	if result["estimated_cost"] == nil || result["confidence"] == nil || result["assumptions"] == nil {
		t.Errorf("PLAN result lacks estimated_cost, confidence or assumptions: %s", resp.Body)
	}
	if after := c.orderCount(t, buyer); after != before {
		t.Fatalf("PLAN created %d orders", after-before)
	}

	// Calls an RCNS pattern makes in that order are that one call.
	resp, body = cl.send(t, "PLAN", map[string]any{"goal": "list my open orders and then summarize the text"})
	steps = steps[:0]
	for _, s := range listed(body, "ordered_steps") {
		steps = append(steps, methodPath(s))
	}
	if resp.Status != 200 || !slices.Equal(steps, []string{"SUMMARIZE /order-digest"}) || listed(body, "ordered_steps")[0]["kind"] != "pattern" {
		t.Fatalf("PLAN over a pattern = %d %v: %s", resp.Status, steps, resp.Body)
	}

	// SUMMARIZE with a source: what can summarize it, best suited first.
	resp, body = cl.send(t, "SUMMARIZE", map[string]any{"source": "order ord-1001", "length": "brief"})
	eps := listed(body, "endpoints")
	if resp.Status != 200 || len(eps) < 2 || methodPath(eps[0]) != "SUMMARIZE /order-briefs/{order_id}" {
		t.Fatalf("SUMMARIZE = %d %s", resp.Status, resp.Body)
	}
	for _, e := range eps {
		if e["method"] != "SUMMARIZE" || e["semantic"] == nil {
			t.Errorf("SUMMARIZE listed %v", e)
		}
	}
}
