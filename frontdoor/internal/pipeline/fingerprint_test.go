package pipeline_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/idempotency"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

// An Idempotency-Key is bound to the core parameters too (EXECUTE's
// action here), which the input stage takes out of the input and hands
// the handler: the same key with another action, in the body, the
// envelope's context or the query, is 409 idempotency-key-reused, not a
// replay of the first action's answer. The slot protocol is the real one
// on a real redis-server.
func TestIdempotencyKeyCoversCoreParameters(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	var runs atomic.Int32
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, store *catalogstate.Store) {
		eps, err := endpoint.ParseAndCompile("endpoints.yaml", []byte(stageEndpoints+`
  - method: EXECUTE
    path: /jobs
    description: Runs a job action.
    semantic: {intent: Run a job action., actor: agent, outcome: The action ran., capability: creation, confidence: 0.9, impact: reversible, is_idempotent: false}
    input_schema: {type: object, properties: {job: {type: string}}, additionalProperties: false}
    output_schema: {type: object}
    errors: []
    handler: {type: registered_function, function: test.echo}
`), endpoint.FormatYAML, endpoint.Context{InheritCapability: true})
		if err != nil {
			t.Fatal(err)
		}
		snap := &catalogv1.Snapshot{Revision: 2, CatalogVersion: "1.0.0", ApiVersion: "1.0.0"}
		for _, ep := range eps {
			snap.Endpoints = append(snap.Endpoints, ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_B))
		}
		if err := store.Set(snap); err != nil {
			t.Fatal(err)
		}
		f.handlers = map[string]handler.Func{"test.echo": func(_ context.Context, call *handler.Call) (*handler.Result, error) {
			runs.Add(1)
			return &handler.Result{Output: append(append([]byte(`{"did":`), call.CoreParams...), '}')}, nil
		}}
		f.policy.AuthorizeF = func(ctx context.Context, in *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			out := &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, EffectiveScopes: in.GetAgentScopes()}
			if in.GetIdempotencyKey() == "" {
				return out, nil
			}
			slot, token := rediskeys.IdempotencySlot(in.GetAgentId(), in.GetIdempotencyKey()), idempotency.NewToken()
			r, err := idempotency.Claim(ctx, rdb, slot, in.GetRequestFingerprint(), token, idempotency.DefaultLease)
			if err != nil {
				return nil, err
			}
			switch r.Outcome {
			case idempotency.Claimed:
				out.Claim = &policyv1.IdempotencyClaim{Slot: slot, Token: token, TtlSeconds: 3600, LeaseSeconds: 30}
			case idempotency.Replay:
				out.Decision, out.ReplayResponse = policyv1.Decision_DECISION_REPLAY, r.Response
			default:
				out.Decision = policyv1.Decision_DECISION_DENY
				out.Denial = &policyv1.Denial{Status: agtp.StatusConflict, Reason: "idempotency-key-reused", Explanation: r.Outcome.String()}
			}
			return out, nil
		}
		f.policy.ReleaseIdempotencyF = func(ctx context.Context, in *policyv1.ReleaseIdempotencyRequest) (*policyv1.ReleaseIdempotencyResponse, error) {
			_, err := idempotency.Release(ctx, rdb, in.GetClaim().GetSlot(), in.GetClaim().GetToken())
			return &policyv1.ReleaseIdempotencyResponse{}, err
		}
		f.audit.SignAndAppendF = func(ctx context.Context, in *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
			stored := false
			if o := in.GetIdempotentOutcome(); o != nil {
				stored, _ = idempotency.Complete(ctx, rdb, o.GetSlot(), o.GetToken(), o.GetResponse(), idempotency.DefaultTTL)
			}
			return &auditv1.SignAndAppendResponse{AttributionRecord: "eyJhbGciOiJub25lIn0.e30.", AuditId: strings.Repeat("0", 64), OutcomeStored: stored}, nil
		}
	})

	first, _ := f.do(t, stageRequest("EXECUTE", "/jobs", `{"job":"j-1","action":"archive"}`, agtp.HeaderIdempotencyKey, "k-1"))
	if first.Status != agtp.StatusOK {
		t.Fatalf("first = %d %s", first.Status, first.Body)
	}
	again, _ := f.do(t, stageRequest("EXECUTE", "/jobs", `{"job":"j-1","action":"archive"}`, agtp.HeaderIdempotencyKey, "k-1"))
	if again.Status != agtp.StatusOK || again.Header.Get(agtp.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("the identical request = %d (replayed %q), want the replay", again.Status, again.Header.Get(agtp.HeaderIdempotentReplayed))
	}
	for _, tc := range []struct{ name, target, body string }{
		{"in the body", "/jobs", `{"job":"j-1","action":"delete"}`},
		{"in the query", "/jobs?action=delete", `{"job":"j-1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.do(t, stageRequest("EXECUTE", tc.target, tc.body, agtp.HeaderIdempotencyKey, "k-1"))
			if resp.Status != agtp.StatusConflict || body["reason"] != "idempotency-key-reused" {
				t.Fatalf("another action under the key = %d (replayed %q) %s; want 409 idempotency-key-reused", resp.Status, resp.Header.Get(agtp.HeaderIdempotentReplayed), resp.Body)
			}
		})
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once", n)
	}
}
