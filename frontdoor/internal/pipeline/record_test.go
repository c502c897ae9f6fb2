package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Every answer is recorded on the caller's chain, with the stable fields
// stamped; an anonymous refusal is signed but not chained.
func TestRecordStage(t *testing.T) {
	f := newStageFixture(t, nil)
	resp, _ := f.do(t, stageRequest("QUERY", "/notes/n-1", "", agtp.HeaderTaskID, "t-1"))
	if resp.Status != agtp.StatusOK || resp.Header.Get(agtp.HeaderServerID) != "agtp.stage.test" || resp.Header.Get(agtp.HeaderTaskID) != "t-1" ||
		resp.Header.Get(agtp.HeaderAuditID) == "" {
		t.Fatalf("answer = %d %v", resp.Status, resp.Header)
	}
	f.do(t, stageRequest("QUERY", "/nowhere", "", agtp.HeaderAgentID, ""))
	recs := f.appended()
	if len(recs) != 2 || recs[0].GetChainAgentId() != stageAgent || recs[0].GetUnchained() || !recs[1].GetUnchained() {
		t.Fatalf("appended %v", recs)
	}
}

// The record hooks the policy stage left run once the answer is known:
// a request policysvc indexed for RETRY reports its status, and an
// idempotency claim whose outcome auditsvc could not store is released
// (nothing ran) or marked unknown (the handler ran).
func TestRecordStageRunsTheHooks(t *testing.T) {
	var completed []*policyv1.CompleteTaskRunRequest
	var released, unknown int
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.policy.AuthorizeF = func(context.Context, *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
			return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, TaskRunToken: "tok",
				Claim: &policyv1.IdempotencyClaim{Slot: "s", Token: "t", TtlSeconds: 60}}, nil
		}
		f.policy.CompleteTaskRunF = func(_ context.Context, in *policyv1.CompleteTaskRunRequest) (*policyv1.CompleteTaskRunResponse, error) {
			completed = append(completed, in)
			return &policyv1.CompleteTaskRunResponse{}, nil
		}
		f.policy.ReleaseIdempotencyF = func(context.Context, *policyv1.ReleaseIdempotencyRequest) (*policyv1.ReleaseIdempotencyResponse, error) {
			released++
			return &policyv1.ReleaseIdempotencyResponse{}, nil
		}
		f.policy.MarkIdempotencyUnknownF = func(context.Context, *policyv1.MarkIdempotencyUnknownRequest) (*policyv1.MarkIdempotencyUnknownResponse, error) {
			unknown++
			return &policyv1.MarkIdempotencyUnknownResponse{Marked: true}, nil
		}
		f.audit.SignAndAppendF = func(context.Context, *auditv1.SignAndAppendRequest) (*auditv1.SignAndAppendResponse, error) {
			return nil, grpcerr.Unavailable("down", "the chain store is down")
		}
	})
	resp, body := f.do(t, stageRequest("EXECUTE", "/notes", `{"text":"hi"}`, agtp.HeaderTaskID, "t-1", agtp.HeaderIdempotencyKey, "k-1"))
	wantAnswer(t, resp, body, agtp.StatusUnavailable, "audit-unavailable")
	if body["outcome"] != "unknown" || unknown != 1 || released != 0 {
		t.Fatalf("body %s; marked unknown %d, released %d", resp.Body, unknown, released)
	}
	// The handler's own status is reported, not the 503 sent.
	if len(completed) != 1 || completed[0].GetStatus() != agtp.StatusOK || completed[0].GetToken() != "tok" {
		t.Fatalf("CompleteTaskRun got %v", completed)
	}
}

// A response the wire writer would refuse (here a 204 with a body) is
// replaced by 500 internal-error in the record stage, so the 500 that
// leaves carries Server-ID and Response-ID and its Attribution-Record is
// signed and appended like any other (docs/decisions.md#D-internal-error).
func TestUnwritableResponseIsARecorded500(t *testing.T) {
	f := newStageFixture(t, func(f *stageFixture, _ *pipeline.Options, _ *catalogstate.Store) {
		f.handlers = map[string]handler.Func{"test.notes.get": func(context.Context, *handler.Call) (*handler.Result, error) {
			return &handler.Result{Status: agtp.StatusNoContent, Output: json.RawMessage(`{"note_id":"n-1"}`)}, nil
		}}
	})
	resp, body := f.do(t, stageRequest("QUERY", "/notes/n-1", ""))
	wantAnswer(t, resp, body, agtp.StatusServerError, transport.ReasonInternalError)
	if err := resp.Check(); err != nil || resp.Header.Get(agtp.HeaderServerID) != "agtp.stage.test" {
		t.Fatalf("the 500 is not writable (%v) or lacks Server-ID: %v", err, resp.Header)
	}
	recs := f.appended()
	if len(recs) != 1 || recs[0].GetClaims().GetStatus() != agtp.StatusServerError || recs[0].GetChainAgentId() != stageAgent {
		t.Fatalf("appended %v, want one record of the 500", recs)
	}
}
