package pipeline_test

import (
	"context"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
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
