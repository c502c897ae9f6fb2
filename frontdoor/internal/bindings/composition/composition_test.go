package composition_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	catalogdemo "github.com/agtpsuite/agtp/catalogsvc/demo"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings/composition"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/testkit"
)

// invoker is a bindings.Invoker whose behaviour is two function fields.
type invoker struct {
	check  func(method, template string) *bindings.Outcome
	invoke func(ctx context.Context, in bindings.Invocation) *bindings.Outcome
	calls  []bindings.Invocation
}

func (v *invoker) Check(method, template string) *bindings.Outcome {
	if v.check == nil {
		return nil
	}
	return v.check(method, template)
}

func (v *invoker) Invoke(ctx context.Context, in bindings.Invocation) (*bindings.Outcome, error) {
	v.calls = append(v.calls, in)
	return v.invoke(ctx, in), nil
}

func ok(output string) *bindings.Outcome {
	return &bindings.Outcome{Status: 200, Output: json.RawMessage(output), AuditID: "audit"}
}

// orderDesk answers the demo recipe's two steps.
func orderDesk(ctx context.Context, in bindings.Invocation) *bindings.Outcome {
	switch in.Method + " " + in.Path {
	case "QUERY /orders/o-1":
		return ok(`{"order_id":"o-1","status":"open","lines":[{"sku":"widget","quantity":3}]}`)
	case "SUMMARIZE /documents":
		var p map[string]any
		_ = json.Unmarshal(in.Input, &p)
		return ok(fmt.Sprintf(`{"summary":%q}`, "brief of "+p["text"].(string)))
	}
	return &bindings.Outcome{Status: 404, Reason: "not-found"}
}

func demoRunner(t *testing.T, opts composition.Options) *composition.Runner {
	t.Helper()
	demo, err := composition.Demo()
	if err != nil {
		t.Fatal(err)
	}
	opts.Recipes = demo
	return composition.New(opts)
}

func compositionError(t *testing.T, err error) map[string]any {
	t.Helper()
	var he *handler.Error
	if !errors.As(err, &he) || he.Name != composition.ErrorName {
		t.Fatalf("error %v, want composition_failed", err)
	}
	d, _ := he.Details["details"].(map[string]any)
	if d == nil {
		t.Fatalf("no details in %v", he.Details)
	}
	return d
}

// AGTP-API §12.1: steps run in order, each an invocation of an endpoint
// under the caller, outputs feed later inputs and the output mapping
// builds the result.
func TestRunThreadsOutputsThroughSteps(t *testing.T) {
	inv := &invoker{invoke: orderDesk}
	res, err := demoRunner(t, composition.Options{}).Run(context.Background(), "order-brief",
		&handler.Call{Input: json.RawMessage(`{"order_id":"o-1"}`)}, inv)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal(res.Output, &out)
	want := map[string]any{"order_id": "o-1", "status": "open",
		"brief": `brief of {"lines":[{"quantity":3,"sku":"widget"}],"order_id":"o-1","status":"open"}`}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("output %v\nwant %v", out, want)
	}
	if len(inv.calls) != 2 || inv.calls[0].Key != "order-brief@1#1" || inv.calls[1].Key != "order-brief@1#2" {
		t.Fatalf("calls %+v", inv.calls)
	}
	var in2 map[string]any
	_ = json.Unmarshal(inv.calls[1].Input, &in2)
	if in2["max_sentences"] != 1.0 {
		t.Errorf("literal input lost: %v", in2)
	}
}

// docs/decisions.md#D-composition: the caller's authority must cover every
// step, checked before execution; a refused step fails the composition with
// nothing run.
func TestRunChecksEveryStepBeforeRunningAny(t *testing.T) {
	inv := &invoker{invoke: orderDesk, check: func(method, _ string) *bindings.Outcome {
		if method == "SUMMARIZE" {
			return &bindings.Outcome{Status: 262, Reason: "scope-required", Explanation: "no documents:read"}
		}
		return nil
	}}
	_, err := demoRunner(t, composition.Options{}).Run(context.Background(), "order-brief",
		&handler.Call{Input: json.RawMessage(`{"order_id":"o-1"}`)}, inv)
	d := compositionError(t, err)
	if d["step"] != 2 || d["step_status"] != 262 || d["step_reason"] != "scope-required" {
		t.Fatalf("details %v", d)
	}
	if len(inv.calls) != 0 {
		t.Fatalf("%d steps ran before the authority check failed", len(inv.calls))
	}
}

// api assertion 73 (AGTP-API §12.1): a failing step stops the run with
// composition_failed naming the recipe, step number, method, status and
// reason, with the outputs captured before it.
func TestRunFailsHalfWayNamingTheStep(t *testing.T) {
	inv := &invoker{invoke: func(ctx context.Context, in bindings.Invocation) *bindings.Outcome {
		if in.Method == "SUMMARIZE" {
			return &bindings.Outcome{Status: 422, Reason: "text_too_long", AuditID: "a2"}
		}
		return orderDesk(ctx, in)
	}}
	_, err := demoRunner(t, composition.Options{}).Run(context.Background(), "order-brief",
		&handler.Call{Input: json.RawMessage(`{"order_id":"o-1"}`)}, inv)
	d := compositionError(t, err)
	for k, v := range map[string]any{"recipe": "order-brief", "recipe_version": "1", "step": 2, "step_method": "SUMMARIZE",
		"step_path": "/documents", "step_status": 422, "step_reason": "text_too_long"} {
		if d[k] != v {
			t.Errorf("details[%s] = %v, want %v", k, d[k], v)
		}
	}
	if captured, _ := d["captured_outputs"].([]any); len(captured) != 1 {
		t.Errorf("captured_outputs %v", d["captured_outputs"])
	}
	var he *handler.Error
	errors.As(err, &he)
	if !strings.Contains(he.Message, "step 2 (SUMMARIZE /documents)") {
		t.Errorf("message %q does not name the step", he.Message)
	}
}

// A step that failed for a reason a retry may cure makes the composite a
// transient failure (502, 504, or the step's 401/409/429), which the front
// door does not store under the Idempotency-Key; a settled refusal of a
// step stays the 422 of AGTP-API §12.1.
func TestFailedStepStatus(t *testing.T) {
	for _, tc := range []struct {
		step, reason string
		status       int
		wantStatus   int
		transient    bool
	}{
		{step: "declared error", reason: "text_too_long", status: 422, wantStatus: 0},
		{step: "not found", reason: "order_not_found", status: 404, wantStatus: 0},
		{step: "upstream timeout", reason: "upstream_timeout", status: 504, wantStatus: 504, transient: true},
		{step: "upstream down", reason: "upstream_connection_error", status: 502, wantStatus: 502, transient: true},
		{step: "audit unavailable", reason: "audit-unavailable", status: 503, wantStatus: 502, transient: true},
		{step: "rate limited", reason: "rate-limited", status: 429, wantStatus: 429, transient: true},
		{step: "outcome unknown", reason: "idempotency-outcome-unknown", status: 409, wantStatus: 409, transient: true},
	} {
		t.Run(tc.step, func(t *testing.T) {
			inv := &invoker{invoke: func(ctx context.Context, in bindings.Invocation) *bindings.Outcome {
				if in.Method == "SUMMARIZE" {
					return &bindings.Outcome{Status: tc.status, Reason: tc.reason}
				}
				return orderDesk(ctx, in)
			}}
			_, err := demoRunner(t, composition.Options{}).Run(context.Background(), "order-brief",
				&handler.Call{Input: json.RawMessage(`{"order_id":"o-1"}`)}, inv)
			d := compositionError(t, err)
			var he *handler.Error
			errors.As(err, &he)
			if he.Status != tc.wantStatus || bindings.IsTransient(err) != tc.transient || d["step_status"] != tc.status || d["step_reason"] != tc.reason {
				t.Fatalf("status %d transient %v details %v; want %d %v", he.Status, bindings.IsTransient(err), d, tc.wantStatus, tc.transient)
			}
		})
	}
}

// A step runs under its own timeout_seconds, or the runner's StepTimeout
// when it names none; overrunning it fails the composition as that step.
func TestStepTimeouts(t *testing.T) {
	recipes, err := composition.LoadFS(fstest.MapFS{"r.yaml": {Data: []byte(`
recipe_name: slow
recipe_version: "1"
steps:
  - {method: QUERY, path: /fast, timeout_seconds: 5}
  - {method: QUERY, path: /slow}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	var deadlines []time.Duration
	inv := &invoker{invoke: func(ctx context.Context, in bindings.Invocation) *bindings.Outcome {
		dl, _ := ctx.Deadline()
		deadlines = append(deadlines, time.Until(dl))
		if in.Path == "/slow" {
			<-ctx.Done()
			return &bindings.Outcome{Status: 503, Reason: "handler-timeout"}
		}
		return ok(`{}`)
	}}
	r := composition.New(composition.Options{Recipes: recipes, StepTimeout: 50 * time.Millisecond})
	start := time.Now()
	_, err = r.Run(context.Background(), "slow", &handler.Call{}, inv)
	d := compositionError(t, err)
	if d["step"] != 2 || d["step_timed_out"] != true || d["step_reason"] != "step-timeout" {
		t.Fatalf("details %v", d)
	}
	if he := (*handler.Error)(nil); !errors.As(err, &he) || he.Status != 504 || !bindings.IsTransient(err) {
		t.Fatalf("a step timeout = %v, want a transient 504", err)
	}
	if deadlines[0] < time.Second || deadlines[1] > 50*time.Millisecond || time.Since(start) > 2*time.Second {
		t.Fatalf("deadlines %v: step 1 has its own 5 s, step 2 the runner's 50 ms", deadlines)
	}
}

// Recipes are validated at load; every problem is reported with its file.
func TestLoadValidatesRecipes(t *testing.T) {
	good := "recipe_name: a\nrecipe_version: \"1\"\nsteps:\n  - {method: QUERY, path: \"/orders/{order_id}\", input: {order_id: {$from: input.id}}}\n"
	r, err := composition.LoadFS(fstest.MapFS{
		"a.yaml":      {Data: []byte(good)},
		"many.json":   {Data: []byte(`{"recipes":[{"recipe_name":"b","recipe_version":"2","steps":[{"method":"QUERY","path":"/x"}]}]}`)},
		"notes.txt":   {Data: []byte("ignored")},
		".git/x.yaml": {Data: []byte("garbage: [")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Names()) != "[a b]" || !r.Has("b") || r.Has("c") {
		t.Fatalf("names %v", r.Names())
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field":     {strings.Replace(good, "steps:", "stepz: []\nsteps:", 1), "unknown field"},
		"no version":        {strings.Replace(good, "recipe_version: \"1\"\n", "", 1), "recipe_version"},
		"bad name":          {strings.Replace(good, "recipe_name: a", "recipe_name: a b", 1), "recipe_name"},
		"unmapped param":    {strings.Replace(good, "{order_id: {$from: input.id}}", "{}", 1), "order_id is not mapped"},
		"forward reference": {strings.Replace(good, "input.id", "steps.0.output", 1), "has not run yet"},
		"bad timeout":       {strings.Replace(good, "steps:", "timeout_seconds: 601\nsteps:", 1), "timeout_seconds"},
		"bad method":        {strings.Replace(good, "method: QUERY", "method: query", 1), "method"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := composition.LoadFS(fstest.MapFS{"bad.yaml": {Data: []byte(tc.doc)}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.yaml") {
				t.Fatalf("err %v, want %q naming bad.yaml", err, tc.want)
			}
		})
	}
	_, err = composition.LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(good)}, "b.yaml": {Data: []byte(good)}})
	if err == nil || !strings.Contains(err.Error(), "already declared") {
		t.Fatalf("duplicate: %v", err)
	}
}

// A recipe the registry lacks is asked of rcnssvc (recipes a persistent
// PROPOSE promoted) and kept for CacheTTL; an unknown one is an error.
func TestResolveFallsBackToRCNS(t *testing.T) {
	var asked atomic.Int32
	stub := &testkit.RCNSStub{GetRecipeF: func(_ context.Context, req *rcnsv1.GetRecipeRequest) (*rcnsv1.GetRecipeResponse, error) {
		asked.Add(1)
		if req.GetRecipeName() != "promoted" {
			return nil, grpcerr.NotFound("recipe-not-found", "no such recipe")
		}
		return &rcnsv1.GetRecipeResponse{RecipeVersion: "3",
			Recipe: recipeStruct(t, `{"recipe_name":"promoted","recipe_version":"3","steps":[{"method":"QUERY","path":"/x"}]}`)}, nil
	}}
	r := demoRunner(t, composition.Options{RCNS: stub.Serve(t)})
	ctx := context.Background()
	for range 2 {
		rec, err := r.Resolve(ctx, "promoted")
		if err != nil || rec.Version != "3" {
			t.Fatalf("%v %v", rec, err)
		}
	}
	if asked.Load() != 1 {
		t.Errorf("rcnssvc asked %d times, want once (cached)", asked.Load())
	}
	if _, err := r.Resolve(ctx, "order-brief"); err != nil || asked.Load() != 1 {
		t.Errorf("a local recipe went to rcnssvc: %v", err)
	}
	if _, err := r.Resolve(ctx, "nope"); !errors.Is(err, composition.ErrUnknownRecipe) {
		t.Errorf("unknown recipe: %v", err)
	}
}

func BenchmarkRun(b *testing.B) {
	demo, _ := composition.Demo()
	r := composition.New(composition.Options{Recipes: demo})
	inv := &invoker{invoke: orderDesk}
	call := &handler.Call{Input: json.RawMessage(`{"order_id":"o-1"}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		inv.calls = inv.calls[:0]
		if _, err := r.Run(ctx, "order-brief", call, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// The demo endpoints of the binding kinds (catalogsvc/demo/bindings.yaml)
// compile, and the recipe their composition names is one of the front
// door's demo recipes.
func TestDemoEndpointsCompile(t *testing.T) {
	data, err := catalogdemo.FS.ReadFile("bindings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	demo, err := composition.Demo()
	if err != nil {
		t.Fatal(err)
	}
	eps, err := endpoint.ParseAndCompile("demo-endpoints.yaml", data, endpoint.FormatYAML, endpoint.Context{InheritCapability: true, Recipes: demo.Has})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, ep := range eps {
		kinds[ep.Def.Handler.Type] = true
	}
	if len(eps) != 3 || !kinds[endpoint.HandlerComposition] || !kinds[endpoint.HandlerExternalService] {
		t.Fatalf("%d endpoints, kinds %v", len(eps), kinds)
	}
}

// recipeStruct is a recipe as GetRecipeResponse.recipe.
func recipeStruct(t testing.TB, js string) *structpb.Struct {
	t.Helper()
	s, err := jsondoc.Struct([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
