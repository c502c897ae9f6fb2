package coreparam_test

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/coreparam"
)

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	if s == "" {
		return nil
	}
	v, err := answer.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

func TestSplit(t *testing.T) {
	declares := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, d := range names {
				if d == n {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name     string
		method   string
		root     bool
		declares func(string) bool
		query    string
		body     string
		core     string // the split parameters as JSON, "" for none
		left     string // what stays in the body
		leftQ    string // what stays in the query
		bad      string // a violation's location, "" for none
	}{
		{name: "QUERY's parameters leave the body", method: "QUERY",
			body: `{"status":"open","intent":"open orders","scope":["orders:read"],"format":"structured","confidence_threshold":0.75}`,
			core: `{"confidence_threshold":0.75,"format":"structured","intent":"open orders","scope":["orders:read"]}`, left: `{"status":"open"}`},
		{name: "a structured intent is an object", method: "QUERY", body: `{"intent":{"topic":"orders"}}`, core: `{"intent":{"topic":"orders"}}`, left: `{}`},
		{name: "a member the endpoint declares is the endpoint's", method: "QUERY", declares: declares("format"),
			body: `{"format":"csv","intent":"x"}`, core: `{"intent":"x"}`, left: `{"format":"csv"}`},
		{name: "another method's parameter is not recognised", method: "QUERY", body: `{"action":"book"}`, left: `{"action":"book"}`},
		{name: "context on any method", method: "INSPECT", body: `{"target":"audit","context":{"turn":3}}`, core: `{"context":{"turn":3}}`, left: `{"target":"audit"}`},
		{name: "from the query, converted", method: "QUERY", query: "confidence_threshold=0.5&format=raw&limit=2",
			core: `{"confidence_threshold":0.5,"format":"raw"}`, leftQ: "limit=2"},
		{name: "the body wins over the query", method: "QUERY", query: "format=raw", body: `{"format":"natural"}`, core: `{"format":"natural"}`, left: `{}`},
		{name: "confidence_threshold above 1", method: "QUERY", body: `{"confidence_threshold":1.5}`, bad: "/confidence_threshold"},
		{name: "confidence_threshold below 0", method: "QUERY", body: `{"confidence_threshold":-0.1}`, bad: "/confidence_threshold"},
		{name: "confidence_threshold as text", method: "QUERY", body: `{"confidence_threshold":"high"}`, bad: "/confidence_threshold"},
		{name: "confidence_threshold from a query that is no number", method: "QUERY", query: "confidence_threshold=high", bad: "/confidence_threshold"},
		{name: "QUERY format outside the draft's set", method: "QUERY", body: `{"format":"bullets"}`, bad: "/format"},
		{name: "SUMMARIZE format has its own set", method: "SUMMARIZE", body: `{"format":"bullets","length":"brief","focus":"risks"}`,
			core: `{"focus":"risks","format":"bullets","length":"brief"}`, left: `{}`},
		{name: "SUMMARIZE length outside the set", method: "SUMMARIZE", body: `{"length":"short"}`, bad: "/length"},
		{name: "an empty intent", method: "QUERY", body: `{"intent":"  "}`, bad: "/intent"},
		{name: "an intent over the bound", method: "QUERY", body: `{"intent":"` + strings.Repeat("a", coreparam.MaxText+1) + `"}`, bad: "/intent"},
		{name: "a scope of numbers", method: "QUERY", body: `{"scope":[1,2]}`, bad: "/scope"},
		{name: "EXECUTE action must be text", method: "EXECUTE", body: `{"action":{"x":1}}`, bad: "/action"},
		{name: "PLAN constraints and available_methods", method: "PLAN", body: `{"goal":"ship","constraints":{"budget":"10 USD"},"available_methods":["QUERY","EXECUTE"]}`,
			core: `{"available_methods":["QUERY","EXECUTE"],"constraints":{"budget":"10 USD"},"goal":"ship"}`, left: `{}`},
		{name: "PLAN available_methods must be method names", method: "PLAN", body: `{"available_methods":["query"]}`, bad: "/available_methods"},
		{name: "QUERY / without intent", method: "QUERY", root: true, body: `{"scope":"orders"}`, bad: "/intent"},
		{name: "QUERY on an endpoint path needs no intent", method: "QUERY", body: `{}`, left: `{}`},
		{name: "QUERY / whose schema declares intent leaves it to the schema", method: "QUERY", root: true, declares: declares("intent"), body: `{}`, left: `{}`},
		{name: "PLAN / takes intent for goal", method: "PLAN", root: true, body: `{"intent":"ship"}`, core: `{"intent":"ship"}`, left: `{}`},
		{name: "PLAN / without goal", method: "PLAN", root: true, body: `{}`, bad: "/goal"},
		{name: "SUMMARIZE / without source", method: "SUMMARIZE", root: true, body: `{"length":"brief"}`, bad: "/source"},
		{name: "EXECUTE / without action", method: "EXECUTE", root: true, bad: "/action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			body := decode(t, tc.body)
			core, bad := coreparam.Split(tc.method, tc.root, tc.declares, q, body)
			if tc.bad != "" {
				if len(bad) == 0 || bad[0].Location != tc.bad || bad[0].Keyword != "core-parameter" {
					t.Fatalf("violations = %+v, want one at %s", bad, tc.bad)
				}
				return
			}
			if bad != nil {
				t.Fatalf("violations = %+v", bad)
			}
			if got := string(core.JSON()); got != tc.core {
				t.Errorf("core = %s, want %s", got, tc.core)
			}
			if tc.left != "" {
				if !reflect.DeepEqual(body, decode(t, tc.left)) {
					left, _ := json.Marshal(body)
					t.Errorf("body left = %s, want %s", left, tc.left)
				}
			}
			if got := q.Encode(); got != tc.leftQ {
				t.Errorf("query left = %q, want %q", got, tc.leftQ)
			}
		})
	}
}

func TestParamsReaders(t *testing.T) {
	p, bad := coreparam.Split("QUERY", false, nil, nil, decode(t, `{"intent":"open orders","confidence_threshold":0.25}`))
	if bad != nil {
		t.Fatal(bad)
	}
	if p.String("intent") != "open orders" || p.String("confidence_threshold") != "" {
		t.Errorf("String: %q %q", p.String("intent"), p.String("confidence_threshold"))
	}
	if f, ok := p.Number("confidence_threshold"); !ok || f != 0.25 {
		t.Errorf("Number = %v %v", f, ok)
	}
	if _, ok := p.Number("intent"); ok {
		t.Error("an intent read as a number")
	}
	var none coreparam.Params
	if none.JSON() != nil || none.String("intent") != "" {
		t.Error("no parameters should read as none")
	}
}

func TestRootForm(t *testing.T) {
	const defs = `
endpoints:
  - method: QUERY
    path: /
    description: Answers an intent.
    semantic: {intent: Answer., actor: agent, outcome: Answered., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.q}
  - method: PLAN
    path: /
    description: Plans a goal.
    semantic: {intent: Plan., actor: agent, outcome: Planned., capability: analysis, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {intent: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.p}
  - method: QUERY
    path: /notes
    description: Lists notes.
    semantic: {intent: List., actor: agent, outcome: Listed., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.n}
`
	eps, err := endpoint.ParseAndCompile("endpoints.yaml", []byte(defs), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"QUERY /":      true,  // the root with a silent schema: the draft's MUST applies
		"PLAN /":       false, // the root whose schema declares members: its required list decides
		"QUERY /notes": false, // an endpoint's own path
	}
	for _, ep := range eps {
		if got := coreparam.RootForm(ep); got != want[ep.Def.Method+" "+ep.Def.Path] {
			t.Errorf("RootForm(%s %s) = %v", ep.Def.Method, ep.Def.Path, got)
		}
	}
}

// BenchmarkSplit is the input stage's added cost per request: a QUERY
// without core parameters, and one with four.
func BenchmarkSplit(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"none", `{"status":"open","limit":10}`},
		{"four", `{"status":"open","intent":"my open orders","scope":["orders:read"],"format":"structured","confidence_threshold":0.75}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v, _ := answer.DecodeJSON([]byte(bc.body))
			src := v.(map[string]any)
			body := make(map[string]any, len(src))
			b.ReportAllocs()
			for b.Loop() {
				for k, v := range src {
					body[k] = v
				}
				coreparam.Split("QUERY", false, nil, nil, body)
			}
		})
	}
}
