package builtin

import (
	"encoding/json"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

func TestRetryAnswerAddsTheLink(t *testing.T) {
	call := &Call{Header: &agtp.Header{}}
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
			resp := retryAnswer(call, tc.inner, "t-1", "t-2", 2)
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
