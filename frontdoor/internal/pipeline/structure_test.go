package pipeline_test

import (
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/services/agtp"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// The structural decision is made from the local snapshot: no caller is
// looked up and policy is not asked, and each code's body names what
// AGTP-API §11 requires.
func TestStructureStage(t *testing.T) {
	for _, tc := range []struct {
		name, method, target string
		status               int
		reason               string
		members              []string
	}{
		{"unknown path is 404", "QUERY", "/nowhere", agtp.StatusNotFound, "not-found", []string{`"path":"/nowhere"`}},
		{"known path under another method is 405", "SUMMARIZE", "/notes", agtp.StatusMethodNotAllowed, "method-not-allowed",
			[]string{`"allowed_methods_for_path":["EXECUTE"]`, `"redirects_for_path":{}`}},
		{"a trailing slash is 460", "QUERY", "/notes/n-1/", agtp.StatusEndpointViolation, "", []string{`"path":"/notes/n-1/"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, nil)
			resp, body := f.do(t, stageRequest(tc.method, tc.target, "", agtp.HeaderAgentID, ""))
			if resp.Status != tc.status || (tc.reason != "" && body["reason"] != tc.reason) {
				t.Fatalf("answer = %d %s, want %d %s", resp.Status, resp.Body, tc.status, tc.reason)
			}
			for _, m := range tc.members {
				if !contains(string(resp.Body), m) {
					t.Errorf("body %s lacks %s", resp.Body, m)
				}
			}
		})
	}
}
