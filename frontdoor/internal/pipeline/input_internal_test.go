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
		{"a shell nested 100 levels deep", run, "", `{"options":` + nestedJSON(100, `{"shell":"sh -c id"}`) + `}`, "shell"},
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

// A body is a core §5.7 envelope only when its method, if any, is the
// request's own; where the endpoint's input declares parameters (QUOTE),
// only when it names the request's method.
func TestBodyParametersEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name, body, method string
		declaresParameters bool
		params, context    string
	}{
		{"an envelope", `{"method":"QUERY","task_id":"t","parameters":{"a":1},"context":{"c":1}}`, "QUERY", false, `{"a":1}`, `{"c":1}`},
		{"an envelope without method", `{"parameters":{"a":1}}`, "QUERY", false, `{"a":1}`, `null`},
		{"a member outside the envelope", `{"parameters":{"a":1},"b":2}`, "QUERY", false, `{"b":2,"parameters":{"a":1}}`, `null`},
		{"another method's name is the input's own", `{"method":"QUERY","parameters":{"a":1}}`, "QUOTE", true, `{"method":"QUERY","parameters":{"a":1}}`, `null`},
		{"an input that declares parameters needs the method named", `{"parameters":{"a":1}}`, "QUOTE", true, `{"parameters":{"a":1}}`, `null`},
		{"an envelope naming QUOTE", `{"method":"QUOTE","parameters":{"method":"QUERY"}}`, "QUOTE", true, `{"method":"QUERY"}`, `null`},
		{"a method that is no string is not an envelope's", `{"method":7,"parameters":{"a":1}}`, "QUERY", false, `{"method":7,"parameters":{"a":1}}`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params, ctx, err := bodyParameters([]byte(tc.body), tc.declaresParameters, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := json.Marshal(params)
			c, _ := json.Marshal(ctx)
			if string(p) != tc.params || string(c) != tc.context {
				t.Fatalf("parameters %s context %s, want %s and %s", p, c, tc.params, tc.context)
			}
		})
	}
}

// nestedJSON wraps inner in depth single-member objects.
func nestedJSON(depth int, inner string) string {
	return strings.Repeat(`{"a":`, depth) + inner + strings.Repeat(`}`, depth)
}
