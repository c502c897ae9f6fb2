package pipeline_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
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
