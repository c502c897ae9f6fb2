package pipeline_test

import (
	"context"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

func TestPolicyStage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		authorize func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error)
		status    int
		reason    string
		members   []string
	}{
		{"a denial is answered as policysvc worded it", func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_DENY, Denial: &policyv1.Denial{
				Status: 429, Reason: "rate-limited", Explanation: "slow down", RetryAfterSeconds: 7, Details: map[string]string{"scope": "agent"}}}, nil
		}, agtp.StatusRateLimited, "rate-limited", []string{`"retry_after_seconds":7`, `"scope":"agent"`}},
		{"policysvc unreachable is 503 naming it", func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			return nil, grpcerr.Unavailable("down", "the policy store is down")
		}, agtp.StatusUnavailable, "policysvc-unavailable", nil},
		{"no decision is a 500", func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			return &policyv1.AuthorizeResponse{}, nil
		}, agtp.StatusServerError, "internal", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) { f.policy.AuthorizeF = tc.authorize })
			resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1", ""))
			wantAnswer(t, resp, body, tc.status, tc.reason)
			for _, m := range tc.members {
				if !contains(string(resp.Body), m) {
					t.Errorf("body %s lacks %s", resp.Body, m)
				}
			}
		})
	}
}

// policysvc is asked once, with what the earlier stages established: the
// caller, its scopes, the endpoint's template and the Idempotency-Key
// with the request's fingerprint.
func TestPolicyStageAsksOnce(t *testing.T) {
	var asked []*policyv1.AuthorizeRequest
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.policy.AuthorizeF = func(_ context.Context, in *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			asked = append(asked, in)
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
		}
	})
	resp, _ := f.do(t, stageRequest("EXECUTE", "/notes", `{"text":"hi"}`, agtp.HeaderIdempotencyKey, "key-1"))
	if resp.Status != agtp.StatusOK || len(asked) != 1 {
		t.Fatalf("answer %d %s after %d Authorize calls", resp.Status, resp.Body, len(asked))
	}
	in := asked[0]
	if in.GetAgentId() != stageAgent || in.GetPathTemplate() != "/notes" || in.GetMethod() != "EXECUTE" ||
		in.GetIdempotencyKey() != "key-1" || in.GetRequestFingerprint() == "" || len(in.GetAgentScopes()) != 1 {
		t.Fatalf("Authorize got %v", in)
	}
}
