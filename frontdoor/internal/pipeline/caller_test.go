package pipeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

func TestCallerStage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []string
		status  int
		reason  string
	}{
		{"no Agent-ID on a non-anonymous endpoint is 401", []string{agtp.HeaderAgentID, ""}, agtp.StatusUnauthorized, "agent-unauthenticated"},
		{"a malformed Agent-ID is 401", []string{agtp.HeaderAgentID, "not-an-id"}, agtp.StatusUnauthorized, "agent-unauthenticated"},
		{"an Authority-Scope beyond the agent's scopes is refused", []string{agtp.HeaderAuthorityScope, "notes:write"}, agtp.StatusAuthorizationRequired, ""},
		{"a known active agent passes", nil, agtp.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
				f.policy.AuthorizeF = func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
					asked++
					return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW}, nil
				}
			})
			resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1", "", tc.headers...))
			if resp.Status != tc.status || (tc.reason != "" && body["reason"] != tc.reason) {
				t.Fatalf("answer = %d %s, want %d %s", resp.Status, resp.Body, tc.status, tc.reason)
			}
			if refused := tc.status != agtp.StatusOK; refused && asked != 0 {
				t.Fatalf("policy asked %d times for a request the caller stage refused", asked)
			}
		})
	}
}

// A failed look-up of the caller is a 503 naming identitysvc when it is
// unreachable, and a masked 500 otherwise.
func TestCallerStageIdentityFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resolve func(context.Context, *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error)
		status  int
		reason  string
	}{
		{"unreachable", func(context.Context, *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
			return nil, grpcerr.Unavailable("down", "the identity store is down")
		}, agtp.StatusUnavailable, "identitysvc-unavailable"},
		{"unimplemented", nil, agtp.StatusServerError, "internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
				f.identity.ResolveAgentF = tc.resolve
			})
			resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1", ""))
			wantAnswer(t, resp, body, tc.status, tc.reason)
			if strings.Contains(string(resp.Body), "store is down") {
				t.Fatalf("internal detail leaked: %s", resp.Body)
			}
		})
	}
}
