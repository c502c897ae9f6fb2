package pipeline

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The envelope is written without reflection for the common case; every
// case must come out byte for byte as json.Marshal writes envelopeBody,
// and a result that is not JSON must fail as it does there.
func TestAppendEnvelopeMatchesMarshal(t *testing.T) {
	for _, tt := range []struct {
		name, taskID, result string
		status               int
	}{
		{"object", "task-1", `{"order_id":"o-1","status":"shipped"}`, 200},
		{"no task ID", "", `{"a":1}`, 200},
		{"null", "task-1", `null`, 404},
		{"whitespace compacted", "t", " {\n  \"a\" : [ 1, 2 ]\n}\n", 200},
		{"HTML escaped in the result", "t", `{"q":"a<b && c>d"}`, 200},
		{"U+2028 in the result", "t", "{\"q\":\"a\u2028b\u2029\"}", 200},
		{"other non-ASCII in the result", "t", `{"q":"café ✓"}`, 200},
		{"quote in the task ID", `t"1`, `{}`, 200},
		{"backslash in the task ID", `t\1`, `{}`, 200},
		{"HTML in the task ID", `<t&>`, `{}`, 200},
		{"non-ASCII task ID", "tâche", `{}`, 200},
		{"control byte in the task ID", "t\x01", `{}`, 200},
		{"not JSON", "t", `{"a":`, 200},
		{"trailing garbage", "t", `{} x`, 200},
		{"status 3 digits", "t", `[]`, 503},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := json.Marshal(envelopeBody{tt.status, tt.taskID, json.RawMessage(tt.result)})
			got, err := appendEnvelope(nil, tt.status, tt.taskID, json.RawMessage(tt.result))
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("err = %v, json.Marshal's = %v", err, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			prefixed, err := appendEnvelope([]byte("x"), tt.status, tt.taskID, json.RawMessage(tt.result))
			if wantErr == nil && (err != nil || !bytes.Equal(prefixed, append([]byte("x"), want...))) {
				t.Errorf("appended to a prefix: %s, %v", prefixed, err)
			}
		})
	}
}

func BenchmarkEnvelope(b *testing.B) {
	result := json.RawMessage(`{"order_id":"o-1","status":"shipped","items":[{"sku":"A-100","qty":2}],"total":"59.90"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := appendEnvelope(nil, 200, "task-0042", result); err != nil {
			b.Fatal(err)
		}
	}
}
