package pipeline_test

import (
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

func TestDispatchStage(t *testing.T) {
	for _, tc := range []struct {
		name, method, target, body string
		status                     int
		reason                     string
		member                     string
	}{
		{"a registered function answers in the envelope", "QUERY", "/notes/n-7", "", agtp.StatusOK, "", `"result":{"note_id":"n-7"}`},
		{"a built-in is found in the table by method", "DISCOVER", "/archives", "", agtp.StatusNotFound, "not-found", ""},
		{"a built-in the table lacks is 501", "EXECUTE", "/builtin-nothing", "", agtp.StatusNotImplemented, "builtin-unsupported", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, nil)
			resp, body := f.do(t, stageRequest(tc.method, tc.target, tc.body))
			if tc.reason != "" {
				wantAnswer(t, resp, body, tc.status, tc.reason)
				return
			}
			if resp.Status != tc.status || !contains(string(resp.Body), tc.member) {
				t.Fatalf("answer = %d %s, want %d with %s", resp.Status, resp.Body, tc.status, tc.member)
			}
		})
	}
}
