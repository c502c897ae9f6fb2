package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/policysvc/internal/server"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// A batch's items are decided as Authorize decides them, each on its own:
// with no limit they need no Redis; with one, their scripts spend each
// item's own budget; a claim is each item's own; a malformed item fails
// alone.
func TestAuthorizeBatchDecidesEachItem(t *testing.T) {
	bad := func() *policyv1.AuthorizeRequest {
		r := request(agentB)
		r.TrustTier = 7
		return r
	}
	for _, tc := range []struct {
		name string
		opts server.Options
		// items, and per item the decision or the error code wanted; a
		// limited agent's items are counted instead (their order in
		// Redis is not the item order).
		items     []*policyv1.AuthorizeRequest
		want      []policyv1.Decision
		wantErr   map[int]codes.Code
		limitedA  int // agentA's items refused 429
		wantClaim map[int]bool
	}{{
		name:    "no limits",
		items:   []*policyv1.AuthorizeRequest{request(agentA), bad(), request(agentB), request(agentA)},
		want:    []policyv1.Decision{policyv1.Decision_DECISION_ALLOW, 0, policyv1.Decision_DECISION_ALLOW, policyv1.Decision_DECISION_ALLOW},
		wantErr: map[int]codes.Code{1: codes.InvalidArgument},
	}, {
		name: "limits and a claim",
		opts: server.Options{RateLimits: server.RateLimitOptions{Tiers: map[string]rateT{"default": {Limit: 3, Period: time.Minute}}}},
		items: []*policyv1.AuthorizeRequest{
			request(agentA), request(agentA), withKey(request(agentB), "k-1", "{}"), request(agentA), bad(), request(agentA), request(agentA),
		},
		want:      []policyv1.Decision{0, 0, policyv1.Decision_DECISION_ALLOW, 0, 0, 0, 0},
		wantErr:   map[int]codes.Code{4: codes.InvalidArgument},
		limitedA:  2,
		wantClaim: map[int]bool{2: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, newRedis(t), tc.opts, nil)
			out, err := c.AuthorizeBatch(context.Background(), &policyv1.AuthorizeBatchRequest{Items: tc.items})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.GetResults()) != len(tc.items) {
				t.Fatalf("%d results for %d items", len(out.GetResults()), len(tc.items))
			}
			limited := 0
			for i, r := range out.GetResults() {
				err := batchrpc.ItemError(r.GetResponse() != nil, r.GetError())
				if code, ok := tc.wantErr[i]; ok {
					if got, _, _, _ := grpcerr.Reason(err); got != code {
						t.Errorf("item %d: %v; want %v", i, err, code)
					}
					continue
				}
				if err != nil {
					t.Errorf("item %d: %v", i, err)
					continue
				}
				resp := r.GetResponse()
				if tc.items[i].GetAgentId() == agentA && tc.limitedA > 0 {
					if resp.GetDenial().GetStatus() == agtp.StatusRateLimited {
						limited++
					} else if resp.GetDecision() != policyv1.Decision_DECISION_ALLOW {
						t.Errorf("item %d: %v %v", i, resp.GetDecision(), resp.GetDenial())
					}
					continue
				}
				if resp.GetDecision() != tc.want[i] {
					t.Errorf("item %d: %v %v; want %v", i, resp.GetDecision(), resp.GetDenial(), tc.want[i])
				}
				if (resp.GetClaim() != nil) != tc.wantClaim[i] {
					t.Errorf("item %d: claim %v; want one: %v", i, resp.GetClaim(), tc.wantClaim[i])
				}
			}
			if limited != tc.limitedA {
				t.Errorf("%d of agent A's items rate-limited; want %d", limited, tc.limitedA)
			}
		})
	}
}
