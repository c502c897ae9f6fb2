package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Input is validated before policy state is touched: a refused input
// never reaches Authorize.
func TestInputStage(t *testing.T) {
	for _, tc := range []struct {
		name, target, body string
		headers            []string
		status             int
		reason             string
	}{
		{"a body that is not JSON is 400", "/notes/n-1", `{"limit":`, nil, agtp.StatusBadRequest, "invalid-body"},
		{"a query that does not decode is 400", "/notes/n-1?limit=%zz", "", nil, agtp.StatusBadRequest, "invalid-query"},
		{"a member the schema does not know is 422", "/notes/n-1", `{"color":"red"}`, nil, agtp.StatusUnprocessable, "input-invalid"},
		{"a body of another media type is 422", "/notes/n-1", `{}`, []string{agtp.HeaderContentType, "text/plain"}, agtp.StatusUnprocessable, "unsupported-content-type"},
		{"path, query and body merge", "/notes/n-1?limit=2", `{"parameters":{}}`, nil, agtp.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked *policyv1.AuthorizeRequest
			f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
				f.policy.AuthorizeF = func(_ context.Context, in *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
					asked = in
					return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
				}
			})
			resp, body := f.do(t, stageRequest("QUERY", tc.target, tc.body, tc.headers...))
			if tc.status == agtp.StatusOK {
				if resp.Status != agtp.StatusOK || asked == nil {
					t.Fatalf("answer = %d %s (policy asked: %v)", resp.Status, resp.Body, asked != nil)
				}
				return
			}
			wantAnswer(t, resp, body, tc.status, tc.reason)
			if asked != nil {
				t.Fatal("policy was asked about a request with invalid input")
			}
		})
	}
}

// A PROPOSE whose parameters do not fit its input schema is 400 with the
// violations, within PROPOSE's own status set, never 422 (core §7.2.7,
// AGTP-API §10.6).
func TestInputStageProposeIs400(t *testing.T) {
	const propose = `
endpoints:
  - method: PROPOSE
    path: /
    description: Proposes an endpoint.
    semantic: {intent: Negotiate an endpoint., actor: agent, outcome: An approved contract or a rejection., capability: mechanics, confidence: 1.0, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {endpoint: {type: object}, persistent: {type: boolean}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.notes.put}
`
	f := newStageFixture(t, func(_ *stageFixture, _ *pipeline.Options, store *catalogstate.Store) {
		eps, err := endpoint.ParseAndCompile("propose.yaml", []byte(propose), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
		if err != nil {
			t.Fatal(err)
		}
		snap := proto.CloneOf(store.Current().Snapshot)
		snap.Endpoints = append(snap.Endpoints, eps[0].Proto(catalogv1.EndpointTier_ENDPOINT_TIER_A))
		if err := store.Set(snap); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name, body string
		headers    []string
		reason     string
	}{
		{"an endpoint that is not an object", `{"endpoint":"BOOK /room"}`, nil, "input-invalid"},
		{"a member PROPOSE does not know", `{"endpoint":{},"colour":"red"}`, nil, "input-invalid"},
		{"a body of another media type", `{}`, []string{agtp.HeaderContentType, "text/plain"}, "unsupported-content-type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(t, stageRequest("PROPOSE", "/", tc.body, tc.headers...))
			wantAnswer(t, resp, body, agtp.StatusBadRequest, tc.reason)
			if tc.reason == "input-invalid" && body["violations"] == nil {
				t.Fatalf("400 without violations: %s", resp.Body)
			}
		})
	}
}

// coreEndpoints are stageEndpoints plus endpoints for the core per-method
// parameters and QUOTE: QUERY / (the root form), an endpoint that declares
// a core parameter's name itself, and the built-in QUOTE.
const coreEndpoints = stageEndpoints + `
  - method: QUERY
    path: /
    description: Answers an intent.
    semantic: {intent: Answer an intent., actor: agent, outcome: The caller holds the answer., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.echo}
  - method: QUERY
    path: /reports
    description: Lists reports in a format.
    semantic: {intent: List reports., actor: agent, outcome: The caller holds the reports., capability: retrieval, confidence: 0.9, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {format: {type: string, enum: [csv, json]}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.echo}
  - method: QUOTE
    path: /
    description: Estimates a call.
    semantic: {intent: Estimate a call., actor: agent, outcome: The caller holds an estimate., capability: transaction, confidence: 1.0, impact: informational, is_idempotent: true}
    input_schema: {type: object, properties: {method: {type: string}, path: {type: string}, parameters: {type: object}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: agtp.builtin.quote}
`

func newCoreFixture(t *testing.T, asked *bool) *stageFixture {
	t.Helper()
	return newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, store *catalogstate.Store) {
		eps, err := endpoint.ParseAndCompile("endpoints.yaml", []byte(coreEndpoints), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
		if err != nil {
			t.Fatal(err)
		}
		snap := &catalogv1.Snapshot{Revision: 2, CatalogVersion: "1.0.0", ApiVersion: "1.0.0",
			Methods: []*catalogv1.Method{{Name: "QUOTE"}}}
		for _, ep := range eps {
			snap.Endpoints = append(snap.Endpoints, ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_B))
		}
		if err := store.Set(snap); err != nil {
			t.Fatal(err)
		}
		f.policy.AuthorizeF = func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			*asked = true
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
		}
	})
}

// The core per-method parameters (core §7.2) are accepted on every
// endpoint of their method, checked by their own rules, and handed to the
// handler in CoreParams, out of its input; a member the endpoint's schema
// declares stays the endpoint's (docs/decisions.md#D-core-parameters).
func TestCoreParameters(t *testing.T) {
	for _, tc := range []struct {
		name, target, body string
		status             int
		reason             string
		input, core        string // the echo handler's view, when 200
	}{
		{name: "core parameters on an endpoint that does not declare them", target: "/reports",
			body: `{"intent":"this month's reports","scope":"reports","confidence_threshold":0.8}`, status: agtp.StatusOK,
			input: `{}`, core: `{"confidence_threshold":0.8,"intent":"this month's reports","scope":"reports"}`},
		{name: "the endpoint's own format wins over QUERY's", target: "/reports", body: `{"format":"csv","intent":"all"}`, status: agtp.StatusOK,
			input: `{"format":"csv"}`, core: `{"intent":"all"}`},
		{name: "a format valid for core but not for the endpoint's own member is the schema's 422", target: "/reports",
			body: `{"format":"structured"}`, status: agtp.StatusUnprocessable, reason: "input-invalid"},
		{name: "core parameters from the query", target: "/reports?format=json&confidence_threshold=0.5", status: agtp.StatusOK,
			input: `{"format":"json"}`, core: `{"confidence_threshold":0.5}`},
		{name: "an envelope's context is a core parameter", target: "/reports",
			body: `{"method":"QUERY","task_id":"t-1","parameters":{"intent":"x"},"context":{"turn":2}}`, status: agtp.StatusOK,
			input: `{}`, core: `{"context":{"turn":2},"intent":"x"}`},
		{name: "confidence_threshold out of range is 422 before policy", target: "/notes/n-1", body: `{"confidence_threshold":1.5}`,
			status: agtp.StatusUnprocessable, reason: "core-parameter-invalid"},
		{name: "a QUERY format outside the draft's set", target: "/notes/n-1", body: `{"format":"bullets"}`,
			status: agtp.StatusUnprocessable, reason: "core-parameter-invalid"},
		{name: "another method's parameter is still the schema's 422", target: "/notes/n-1", body: `{"action":"x"}`,
			status: agtp.StatusUnprocessable, reason: "input-invalid"},
		{name: "QUERY / without intent is 422 (core assertion 79)", target: "/", body: `{"scope":"notes"}`,
			status: agtp.StatusUnprocessable, reason: "core-parameter-invalid"},
		{name: "QUERY / with intent", target: "/", body: `{"intent":"my notes"}`, status: agtp.StatusOK,
			input: `{}`, core: `{"intent":"my notes"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			f := newCoreFixture(t, &asked)
			resp, body := f.do(t, stageRequest("QUERY", tc.target, tc.body))
			if tc.status != agtp.StatusOK {
				wantAnswer(t, resp, body, tc.status, tc.reason)
				if asked {
					t.Fatal("policy was asked about a request with invalid input")
				}
				if tc.reason == "core-parameter-invalid" && body["violations"] == nil {
					t.Fatalf("no violations: %s", resp.Body)
				}
				return
			}
			if resp.Status != agtp.StatusOK {
				t.Fatalf("answer = %d %s", resp.Status, resp.Body)
			}
			var echo struct {
				Result struct{ Input, Core json.RawMessage }
			}
			if err := json.Unmarshal(resp.Body, &echo); err != nil {
				t.Fatal(err)
			}
			if string(echo.Result.Input) != tc.input || string(echo.Result.Core) != tc.core {
				t.Fatalf("handler got input %s core %s, want %s and %s", echo.Result.Input, echo.Result.Core, tc.input, tc.core)
			}
		})
	}
}

// QUOTE in both forms (standard methods §5.1): QUOTE / names the call in
// its body, QUOTE /path by its own path and query; a method the path does
// not serve is 404 (companions assertion 24).
func TestQuoteForms(t *testing.T) {
	for _, tc := range []struct {
		name, target, body string
		status             int
		reason, path       string
	}{
		{"QUOTE / with method, path and parameters", "/", `{"method":"QUERY","path":"/notes/n-1","parameters":{}}`, agtp.StatusOK, "", "/notes/{note_id}"},
		{"QUOTE /path with method and parameters", "/notes/n-1", `{"method":"QUERY","parameters":{"limit":2}}`, agtp.StatusOK, "", "/notes/{note_id}"},
		{"QUOTE /path takes the query as the quoted call's", "/notes/n-1?limit=2", `{"method":"QUERY","parameters":{}}`, agtp.StatusOK, "", "/notes/{note_id}"},
		{"the quoted call's query is checked as the call would be", "/notes/n-1?limit=many", `{"method":"QUERY","parameters":{}}`, agtp.StatusUnprocessable, "quote-parameters-invalid", ""},
		{"QUOTE /path in an envelope naming QUOTE", "/notes/n-1", `{"method":"QUOTE","parameters":{"method":"QUERY","parameters":{}}}`, agtp.StatusOK, "", "/notes/{note_id}"},
		{"core parameters of the quoted call are accepted", "/notes/n-1", `{"method":"QUERY","parameters":{"intent":"a note","format":"raw"}}`, agtp.StatusOK, "", "/notes/{note_id}"},
		{"core parameters of the quoted call are checked", "/notes/n-1", `{"method":"QUERY","parameters":{"confidence_threshold":3}}`, agtp.StatusUnprocessable, "quote-parameters-invalid", ""},
		{"a method the path does not serve is 404 (path form)", "/notes/n-1", `{"method":"EXECUTE","parameters":{}}`, agtp.StatusNotFound, "quote-method-unsupported", ""},
		{"a method the path does not serve is 404 (body form)", "/", `{"method":"EXECUTE","path":"/notes/n-1","parameters":{}}`, agtp.StatusNotFound, "quote-method-unsupported", ""},
		{"a method the server does not know is 404", "/notes/n-1", `{"method":"FROBNICATE","parameters":{}}`, agtp.StatusNotFound, "quote-method-unsupported", ""},
		{"an unknown path is 404 (path form)", "/nowhere", `{"method":"QUERY","parameters":{}}`, agtp.StatusNotFound, "not-found", ""},
		{"an unknown path is 404 (body form)", "/", `{"method":"QUERY","path":"/nowhere","parameters":{}}`, agtp.StatusNotFound, "quote-target-unknown", ""},
		{"a body path that contradicts the request's", "/notes/n-1", `{"method":"QUERY","path":"/notes/n-2","parameters":{}}`, agtp.StatusBadRequest, "quote-path-conflict", ""},
		{"method is required", "/notes/n-1", `{"parameters":{}}`, agtp.StatusBadRequest, "method-required", ""},
		{"parameters are required", "/notes/n-1", `{"method":"QUERY"}`, agtp.StatusBadRequest, "parameters-required", ""},
		{"path is required at /", "/", `{"method":"QUERY","parameters":{}}`, agtp.StatusBadRequest, "path-required", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			f := newCoreFixture(t, &asked)
			resp, body := f.do(t, stageRequest("QUOTE", tc.target, tc.body))
			if tc.status != agtp.StatusOK {
				wantAnswer(t, resp, body, tc.status, tc.reason)
				return
			}
			if resp.Status != agtp.StatusOK || resp.Header.Get(agtp.HeaderCostEstimate) == "" {
				t.Fatalf("answer = %d %s", resp.Status, resp.Body)
			}
			result, _ := body["result"].(map[string]any)
			if result["method"] != "QUERY" || result["path"] != tc.path {
				t.Fatalf("quoted %v %v, want QUERY %s", result["method"], result["path"], tc.path)
			}
		})
	}
}

// confidence_threshold is a number from 0 to 1 (core §7.2.1,
// docs/frontdoor.md "Core per-method parameters"): NaN and Inf are not,
// and are 422 core-parameter-invalid before the handler runs (NaN passed
// the range check, and then the core parameters could not be encoded, so
// the handler got none of them: the caller's intent silently dropped).
func TestCoreParamThresholdThatIsNoNumberIsRefused(t *testing.T) {
	var core json.RawMessage
	ran := 0
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.handlers = map[string]handler.Func{"test.notes.get": func(_ context.Context, call *handler.Call) (*handler.Result, error) {
			ran++
			core = call.CoreParams
			return &handler.Result{Output: json.RawMessage(`{"note_id":"n-1"}`)}, nil
		}}
	})
	for _, v := range []string{"NaN", "nan", "Inf", "-Infinity"} {
		resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1?intent=find+it&confidence_threshold="+v, ""))
		if resp.Status != agtp.StatusUnprocessable || body["reason"] != "core-parameter-invalid" {
			t.Fatalf("confidence_threshold=%s: answer = %d %s (handler ran %d times, core parameters %s), want 422 core-parameter-invalid", v, resp.Status, resp.Body, ran, core)
		}
	}
	if ran != 0 {
		t.Fatalf("the handler ran %d times", ran)
	}
}
