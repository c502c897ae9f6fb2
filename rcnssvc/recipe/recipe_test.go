package recipe_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/rcnssvc/demo"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
)

type call struct {
	method, path string
	input        map[string]any
}

// stub answers steps from a table keyed by "METHOD path".
func stub(calls *[]call, answers map[string]func(map[string]any) (any, int)) recipe.Call {
	return func(_ context.Context, method, path string, input map[string]any) (any, int, error) {
		*calls = append(*calls, call{method, path, input})
		f, ok := answers[method+" "+path]
		if !ok {
			return nil, 404, nil
		}
		out, st := f(input)
		return out, st, nil
	}
}

func orderSummary(t *testing.T) *recipe.Recipe {
	t.Helper()
	ps, err := demo.Patterns()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.RecipeName == "order-summary" {
			return p.Recipe()
		}
	}
	t.Fatal("no order-summary pattern")
	return nil
}

// AGTP-API §12.1: steps run in order, outputs feed later inputs, and the
// output mapping builds the result.
func TestRunThreadsOutputsIntoLaterSteps(t *testing.T) {
	var calls []call
	out, err := orderSummary(t).Run(context.Background(), map[string]any{"order_id": "o 17/x"}, stub(&calls, map[string]func(map[string]any) (any, int){
		"QUERY /orders/o%2017%2Fx": func(map[string]any) (any, int) {
			return map[string]any{"order_id": "o 17/x", "status": "open", "lines": []any{}}, 200
		},
		"SUMMARIZE /documents": func(in map[string]any) (any, int) {
			return map[string]any{"summary": "summary of " + in["text"].(string)}, 200
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].input["order_id"] != "o 17/x" {
		t.Fatalf("calls %v", calls)
	}
	if _, has := calls[1].input["max_sentences"]; has {
		t.Error("an absent optional input was passed as a member")
	}
	// $as: json is the canonical JSON text of the earlier output.
	if calls[1].input["text"] != `{"lines":[],"order_id":"o 17/x","status":"open"}` {
		t.Errorf("text %q", calls[1].input["text"])
	}
	want := map[string]any{"order_id": "o 17/x", "status": "open", "summary": `summary of {"lines":[],"order_id":"o 17/x","status":"open"}`}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("output %v", out)
	}
}

// api assertion 73 (AGTP-API §12.1): a failing step is composition_failed
// with the recipe, the step number, its method, its status and the outputs
// captured before it.
func TestRunFailureDetails(t *testing.T) {
	var calls []call
	_, err := orderSummary(t).Run(context.Background(), map[string]any{"order_id": "o-1"}, stub(&calls, map[string]func(map[string]any) (any, int){
		"QUERY /orders/o-1": func(map[string]any) (any, int) { return map[string]any{"status": "open"}, 200 },
		"SUMMARIZE /documents": func(map[string]any) (any, int) {
			return map[string]any{"error": "text_too_long"}, 422
		},
	}))
	var f *recipe.Failure
	if !errors.As(err, &f) {
		t.Fatalf("err %v", err)
	}
	d := f.Details()
	if d["recipe"] != "order-summary" || d["step"] != 2 || d["step_method"] != "SUMMARIZE" || d["step_status"] != 422 {
		t.Fatalf("details %v", d)
	}
	if captured := d["captured_outputs"].([]any); len(captured) != 1 || !reflect.DeepEqual(captured[0], map[string]any{"status": "open"}) {
		t.Fatalf("captured %v", captured)
	}
	if recipe.ErrorName != "composition_failed" {
		t.Fatal(recipe.ErrorName)
	}
	// A transport error is a failure too, and later steps never run.
	calls = nil
	_, err = orderSummary(t).Run(context.Background(), map[string]any{"order_id": "o-1"}, func(context.Context, string, string, map[string]any) (any, int, error) {
		calls = append(calls, call{})
		return nil, 0, errors.New("boom")
	})
	if !errors.As(err, &f) || f.Step != 1 || len(calls) != 1 {
		t.Fatalf("err %v calls %d", err, len(calls))
	}
}

func TestMatchPath(t *testing.T) {
	for _, tc := range []struct {
		tmpl, path string
		ok         bool
		params     map[string]string
	}{
		{"/orders/{order_id}", "/orders/o-17", true, map[string]string{"order_id": "o-17"}},
		{"/orders/{order_id}", "/orders/o%2017", true, map[string]string{"order_id": "o 17"}},
		{"/orders/{order_id}", "/orders/o-17?x=1", true, map[string]string{"order_id": "o-17"}},
		{"/orders/{order_id}", "/orders/o-17/extra", false, nil},
		{"/orders/{order_id}", "/orders", false, nil},
		{"/orders/{order_id}", "/orders/", false, nil},
		{"/order-digest", "/order-digest", true, nil},
		{"/order-digest", "/order-digests", false, nil},
		{"/", "/", true, nil},
	} {
		params, ok := recipe.MatchPath(tc.tmpl, tc.path)
		if ok != tc.ok || (ok && len(tc.params) > 0 && !reflect.DeepEqual(params, tc.params)) {
			t.Errorf("MatchPath(%s, %s) = %v %v", tc.tmpl, tc.path, params, ok)
		}
	}
}

func TestFillPath(t *testing.T) {
	p, err := recipe.FillPath("/reports/{report_id}/rows/{n}", map[string]any{"report_id": "a b", "n": 3.0})
	if err != nil || p != "/reports/a%20b/rows/3" {
		t.Fatalf("%q %v", p, err)
	}
	if _, err := recipe.FillPath("/reports/{report_id}", map[string]any{"report_id": map[string]any{}}); err == nil {
		t.Fatal("an object filled a path parameter")
	}
	if _, err := recipe.FillPath("/reports/{report_id}", nil); err == nil {
		t.Fatal("a missing value filled a path parameter")
	}
}

// A patterns file is refused with every problem named.
func TestLoadRefusesBadPatterns(t *testing.T) {
	base := `{"recipe_name":"r","recipe_version":"1","method":"SUMMARIZE","path_exact":"/x",
	 "endpoint":{"description":"d","semantic":{"intent":"i","actor":"agent","outcome":"o","capability":"analysis","confidence":0.5,"impact":"informational","is_idempotent":true},
	 "input_schema":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false},"output_schema":{"type":"object"}},
	 "steps":[{"method":"QUERY","path":"/orders/{order_id}","input":{"order_id":{"$from":"input.a"}}}]}`
	if _, err := recipe.Load("ok.json", []byte(`{"patterns":[`+base+`]}`)); err != nil {
		t.Fatalf("the base pattern: %v", err)
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"both paths":        {`"path_exact":"/x"`, `"path_exact":"/x","path_regex":"^/x$"`, "exactly one"},
		"no path":           {`"path_exact":"/x",`, ``, "exactly one"},
		"bad regex":         {`"path_exact":"/x"`, `"path_regex":"(["`, "path_regex"},
		"bad name":          {`"recipe_name":"r"`, `"recipe_name":"r r"`, "recipe_name"},
		"bad method":        {`"method":"SUMMARIZE"`, `"method":"summarize"`, "method"},
		"unmapped param":    {`"input":{"order_id":{"$from":"input.a"}}`, `"input":{}`, "order_id is not mapped"},
		"forward reference": {`{"$from":"input.a"}`, `{"$from":"steps.0.output"}`, "has not run yet"},
		"undeclared input":  {`{"$from":"input.a"}`, `{"$from":"input.b"}`, "input.b"},
		"bad reference":     {`{"$from":"input.a"}`, `{"$from":"env.HOME"}`, "must start with"},
		"extra ref member":  {`{"$from":"input.a"}`, `{"$from":"input.a","$x":1}`, "only $from and $as"},
		"unknown field":     {`"method":"SUMMARIZE"`, `"method":"SUMMARIZE","handler":{}`, "unknown field"},
		"bad endpoint":      {`"impact":"informational"`, `"impact":"maybe"`, "endpoint"},
		"bad tier":          {`"method":"SUMMARIZE"`, `"method":"SUMMARIZE","min_trust_tier":4`, "min_trust_tier"},
		"no steps":          {`"steps":[{"method":"QUERY","path":"/orders/{order_id}","input":{"order_id":{"$from":"input.a"}}}]`, `"steps":[]`, "at least one step"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(base, tc.from, tc.to, 1)
			if doc == base {
				t.Fatal("the case changes nothing")
			}
			_, err := recipe.Load("bad.json", []byte(`{"patterns":[`+doc+`]}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := recipe.Load("dup.json", []byte(`{"patterns":[`+base+`,`+base+`]}`)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestPatternMatching(t *testing.T) {
	ps, err := recipe.Load("re.yaml", []byte(`
patterns:
  - recipe_name: weekly
    recipe_version: "1"
    method: SUMMARIZE
    path_regex: /digests/(daily|weekly)
    endpoint:
      description: d
      semantic: {intent: i, actor: agent, outcome: o, capability: analysis, confidence: 0.5, impact: informational, is_idempotent: true}
      input_schema: {type: object, additionalProperties: false}
      output_schema: {type: object}
    steps:
      - {method: QUERY, path: /orders}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if path, ok := p.MatchRequest("SUMMARIZE", "/digests/weekly"); !ok || path != "/digests/weekly" {
		t.Errorf("request: %q %v", path, ok)
	}
	for _, bad := range []string{"/digests/monthly", "/digests/weekly/x", "/x/digests/weekly"} {
		if _, ok := p.MatchRequest("SUMMARIZE", bad); ok {
			t.Errorf("%s matched: the regex is anchored", bad)
		}
	}
	if _, ok := p.MatchRequest("QUERY", "/digests/weekly"); ok {
		t.Error("another method matched")
	}
	if !p.MatchTemplate("SUMMARIZE", "/digests/daily") || p.MatchTemplate("SUMMARIZE", "/digests/{kind}") {
		t.Error("template matching of a regex pattern")
	}
	l := p.Listing()
	if _, ok := l["path_exact"]; ok || l["path_regex"] != "/digests/(daily|weekly)" {
		t.Errorf("listing %v", l)
	}
}

func BenchmarkRun(b *testing.B) {
	ps, _ := demo.Patterns()
	r := ps[0].Recipe()
	call := func(_ context.Context, method, _ string, in map[string]any) (any, int, error) {
		if method == "QUERY" {
			return map[string]any{"order_id": in["order_id"], "status": "open", "lines": []any{map[string]any{"sku": "a", "quantity": 1.0}}}, 200, nil
		}
		return map[string]any{"summary": "s"}, 200, nil
	}
	input := map[string]any{"order_id": "o-17", "max_sentences": 2.0}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Run(context.Background(), input, call); err != nil {
			b.Fatal(err)
		}
	}
}
