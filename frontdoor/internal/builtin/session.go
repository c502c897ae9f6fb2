package builtin

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// suspend runs SUSPEND (core §7.2.12): a session of the caller, or, with
// synthesis_id, the release of the caller's synthesized contract.
func (bi *Registry) suspend(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if call.AgentID == "" {
		return call.Fail(agtp.StatusUnauthorized, "agent-unauthenticated", "SUSPEND needs Agent-ID", nil)
	}
	if id := str(params, "synthesis_id"); id != "" {
		if bi.RCNS == nil {
			return call.Fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
		}
		r, err := bi.RCNS.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{Caller: call.RCNSCaller(), SynthesisId: id, Reason: str(params, "reason"), Release: true})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "rcnssvc", err)
		}
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, ContractJSON(r.GetContract()))
	}
	sid := str(params, "session_id")
	if sid == "" {
		return call.Fail(agtp.StatusBadRequest, "session-id-required", "SUSPEND needs session_id (or synthesis_id)", nil)
	}
	fp := call.clientKeyFingerprint()
	in := &identityv1.SuspendSessionRequest{SessionId: sid, AgentId: call.AgentID, Reason: str(params, "reason"), ClientKeyFingerprint: &fp}
	if rb := str(params, "resume_by"); rb != "" {
		t, err := time.Parse(time.RFC3339, rb)
		if err != nil {
			return call.Fail(agtp.StatusBadRequest, "resume-by-invalid", "resume_by must be an RFC 3339 time", nil)
		}
		in.ResumeBy = timestamppb.New(t)
	}
	if cp, ok := params["checkpoint"]; ok {
		b, _ := json.Marshal(cp)
		in.Checkpoint = string(b)
	}
	r, err := bi.Identity.SuspendSession(ctx, in)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	bi.DropSession(sid)
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
		"suspension_id": r.GetSuspensionId(), "session_id": r.GetSessionId(), "resumption_nonce": r.GetResumptionNonce(),
		//lint:ignore SA1019 the first release's identitysvc sends the status only as a string
		"resume_by": r.GetResumeBy().AsTime().UTC().Format(time.RFC3339), "status": enumname.Prefer(r.GetSessionStatus(), r.GetStatus()),
	})
}

// resume runs RESUME with the nonce SUSPEND returned.
func (bi *Registry) resume(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if call.AgentID == "" {
		return call.Fail(agtp.StatusUnauthorized, "agent-unauthenticated", "RESUME needs Agent-ID", nil)
	}
	sid := str(params, "session_id")
	r, err := bi.Identity.ResumeSession(ctx, &identityv1.ResumeSessionRequest{SessionId: sid, AgentId: call.AgentID, ResumptionNonce: str(params, "resumption_nonce")})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	bi.DropSession(sid)
	//lint:ignore SA1019 the first release's identitysvc sends the status only as a string
	body := map[string]any{"session_id": r.GetSessionId(), "suspension_id": r.GetSuspensionId(), "status": enumname.Prefer(r.GetSessionStatus(), r.GetStatus())}
	//lint:ignore SA1019 the first release's identitysvc sends the checkpoint only as bytes
	if cp := jsondoc.PreferString(r.GetCheckpoint(), r.GetCheckpointJson()); len(cp) > 0 {
		body["checkpoint"] = json.RawMessage(cp)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, body)
}
