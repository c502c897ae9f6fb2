package pipeline

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
)

func TestRefuseFreeForm(t *testing.T) {
	run := &endpoint.Endpoint{Def: &endpoint.Definition{Method: "RUN"}}
	execute := &endpoint.Endpoint{Def: &endpoint.Definition{Method: "EXECUTE"}}
	for _, tc := range []struct {
		name   string
		ep     *endpoint.Endpoint
		query  string
		body   string
		member string
	}{
		{"a RUN with named parameters passes", run, "", `{"status":"open","options":{"dry_run":true}}`, ""},
		{"a top-level command", run, "", `{"command":"rm -rf /"}`, "command"},
		{"a nested script", run, "", `{"input":{"steps":[{"Script":"x"}]}}`, "Script"},
		{"an exec in the query", run, "exec=ls", `{}`, "exec"},
		{"a free-form member on another method is not RUN's rule", execute, "", `{"code":"x"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &exchange{req: &agtp.Request{}}
			var body map[string]any
			if err := json.Unmarshal([]byte(tc.body), &body); err != nil {
				t.Fatal(err)
			}
			q, _ := url.ParseQuery(tc.query)
			resp := refuseFreeForm(x, tc.ep, q, body)
			if tc.member == "" {
				if resp != nil {
					t.Fatalf("refused: %d %s", resp.Status, resp.Body)
				}
				return
			}
			if resp == nil || resp.Status != agtp.StatusUnprocessable || !strings.Contains(string(resp.Body), `"reason":"`+ReasonFreeFormExecution+`"`) ||
				!strings.Contains(string(resp.Body), `"member":"`+tc.member+`"`) {
				t.Fatalf("resp = %+v, want 422 %s naming %s", resp, ReasonFreeFormExecution, tc.member)
			}
		})
	}
}
