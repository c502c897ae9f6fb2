package pipeline

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

func TestTaskRunIndexesOnlyOperatorRequestsWithTaskID(t *testing.T) {
	const agent = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
	operator := &catalogv1.Endpoint{HandlerName: "demo.orders.create"}
	builtin := &catalogv1.Endpoint{HandlerName: builtinPrefix + "retry"}
	for _, tc := range []struct {
		name    string
		agent   string
		taskID  string
		ep      *catalogv1.Endpoint
		body    []byte
		query   string
		indexed bool
	}{
		{"operator endpoint with Task-ID", agent, "t-1", operator, []byte(`{"a":1}`), "x=1", true},
		{"no Task-ID", agent, "", operator, nil, "", false},
		{"anonymous", "", "t-1", operator, nil, "", false},
		{"built-in", agent, "t-1", builtin, nil, "", false},
		{"body over the bound", agent, "t-1", operator, make([]byte, maxTaskRunBody+1), "", false},
		{"overlong Task-ID", agent, strings.Repeat("t", maxTaskIDLen+1), operator, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &agtp.Request{Method: "CREATE", Path: "/orders", RawQuery: tc.query, Body: tc.body}
			if tc.taskID != "" {
				req.Header.Set(agtp.HeaderTaskID, tc.taskID)
			}
			x := &exchange{req: req, agentID: tc.agent, idemKey: "k-1"}
			run := taskRun(x, tc.ep)
			if (run != nil) != tc.indexed {
				t.Fatalf("taskRun = %v, want indexed %v", run, tc.indexed)
			}
			if run != nil && (run.GetTarget() != "/orders?x=1" || run.GetIdempotencyKey() != "k-1" || string(run.GetBody()) != `{"a":1}`) {
				t.Fatalf("taskRun = %v", run)
			}
		})
	}
}

func TestRetryRecordLinksTheOriginalTask(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    *exchange
		want string
	}{
		{"the RETRY's own record", &exchange{inputMethod: "RETRY", input: []byte(`{"original_task_id":"t-0"}`)}, "t-0"},
		{"the re-run's record", &exchange{ctx: context.WithValue(context.Background(), retryKey{}, retryLink{originalTaskID: "t-9"}), inputMethod: "CREATE", input: []byte(`{}`)}, "t-9"},
		{"another request", &exchange{ctx: context.Background(), inputMethod: "CREATE", input: []byte(`{"original_task_id":"t-0"}`)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p attribution.Payload
			retryRecord(tc.x, &p)
			var got string
			if raw, ok := p.Extra[recordOriginalTaskID]; ok {
				_ = json.Unmarshal(raw, &got)
			}
			if got != tc.want {
				t.Fatalf("original_task_id = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRetryAnswerAddsTheLink(t *testing.T) {
	x := &exchange{req: &agtp.Request{}}
	for _, tc := range []struct {
		name  string
		inner *agtp.Response
		want  map[string]any
	}{
		{"success envelope", agtp.NewResponse(200, agtp.MediaTypeJSON, []byte(`{"status":200,"task_id":"t-1","result":{"order_id":"o"}}`)),
			map[string]any{"status": float64(200), "task_id": "t-2", "original_task_id": "t-1", "attempt": float64(2), "result": map[string]any{"order_id": "o"}}},
		{"error body", agtp.NewResponse(422, agtp.MediaTypeJSON, []byte(`{"status":422,"reason":"out_of_stock"}`)),
			map[string]any{"status": float64(422), "reason": "out_of_stock", "task_id": "t-2", "original_task_id": "t-1", "attempt": float64(2)}},
		{"non-JSON body", agtp.NewResponse(200, "text/plain", []byte("hi")),
			map[string]any{"status": float64(200), "result": "hi", "task_id": "t-2", "original_task_id": "t-1", "attempt": float64(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := retryAnswer(x, tc.inner, "t-1", "t-2", 2)
			var got map[string]any
			if err := json.Unmarshal(resp.Body, &got); err != nil || resp.Status != tc.inner.Status {
				t.Fatalf("answer = %d %s", resp.Status, resp.Body)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Fatalf("answer = %s, want %s", gb, wb)
			}
		})
	}
}

func TestIntParam(t *testing.T) {
	for _, tc := range []struct {
		v      any
		want   int
		wantOK bool
	}{
		{nil, 0, true}, {float64(3), 3, true}, {float64(0), 0, false}, {float64(1.5), 0, false},
		{"3", 0, false}, {float64(1001), 0, false},
	} {
		params := map[string]any{}
		if tc.v != nil {
			params["max_attempts"] = tc.v
		}
		got, ok := intParam(params, "max_attempts", 1, 1000)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("intParam(%v) = %d %v, want %d %v", tc.v, got, ok, tc.want, tc.wantOK)
		}
	}
}
