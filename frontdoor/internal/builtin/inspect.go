package builtin

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// inspect reads the audit store (core §7.2.4).
func (bi *Registry) inspect(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	target := str(params, "target")
	caller := inspectCaller(call)
	// The ACL is checked before any lookup, so a refused caller cannot
	// learn whether a record exists.
	if err := bi.ACL.Precheck(caller); err != nil {
		return bi.dependencyFailure(ctx, call, "inspect", err)
	}
	switch target {
	case "audit":
		id := str(params, "audit_id")
		if !agtp.IsCanonicalID(id) {
			return call.Fail(agtp.StatusBadRequest, "audit-id-required", "target=audit needs audit_id: 64 lowercase hexadecimal characters", nil)
		}
		r, err := bi.Audit.GetRecord(ctx, &auditv1.GetRecordRequest{AuditId: id})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "auditsvc", err)
		}
		rec := r.GetRecord()
		if err := bi.ACL.Allow(caller, rec.GetChainAgentId()); err != nil {
			return bi.dependencyFailure(ctx, call, "inspect", err)
		}
		//lint:ignore SA1019 the first release's auditsvc sends the payload only as JSON bytes
		payload, err := auditclient.Payload(rec.GetPayload(), rec.GetPayloadJson())
		if err != nil {
			return bi.dependencyFailure(ctx, call, "auditsvc", err)
		}
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
			"audit_id": rec.GetAuditId(), "jws": rec.GetJws(), "payload": payload,
			"chain_agent_id": rec.GetChainAgentId(), "sequence": rec.GetSequence(),
		})
	case "chain_head":
		id := str(params, "agent_id")
		if id == "" {
			return call.Fail(agtp.StatusBadRequest, "agent-id-required", "target=chain_head needs agent_id", nil)
		}
		if err := bi.ACL.Allow(caller, id); err != nil {
			return bi.dependencyFailure(ctx, call, "inspect", err)
		}
		r, err := bi.Audit.GetChainHead(ctx, &auditv1.GetChainHeadRequest{AgentId: id})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "auditsvc", err)
		}
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"agent_id": id, "audit_id": r.GetAuditId(), "length": r.GetLength()})
	case "lifecycle":
		id := str(params, "agent_id")
		if id == "" {
			return call.Fail(agtp.StatusBadRequest, "agent-id-required", "target=lifecycle needs agent_id", nil)
		}
		if err := bi.ACL.Allow(caller, id); err != nil {
			return bi.dependencyFailure(ctx, call, "inspect", err)
		}
		limit, _ := strconv.Atoi(str(params, "limit"))
		r, err := bi.Audit.ListLifecycleEvents(ctx, &auditv1.ListLifecycleEventsRequest{AgentId: id, PageSize: int32(limit)})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "auditsvc", err)
		}
		events := []map[string]any{}
		for _, e := range r.GetEvents() {
			//lint:ignore SA1019 the first release's auditsvc sends the payload only as JSON bytes
			payload, err := auditclient.Payload(e.GetPayload(), e.GetPayloadJson())
			if err != nil {
				return bi.dependencyFailure(ctx, call, "auditsvc", err)
			}
			events = append(events, map[string]any{"audit_id": e.GetAuditId(), "format": e.GetFormat(), "envelope": e.GetEnvelope(),
				"event_type": e.GetEventType(), "payload": payload})
		}
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"agent_id": id, "events": events})
	case "contract":
		if bi.RCNS == nil {
			return call.Fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
		}
		r, err := bi.RCNS.GetContract(ctx, &rcnsv1.GetContractRequest{SynthesisId: str(params, "synthesis_id"), Caller: call.RCNSCaller(), Inspect: true})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "rcnssvc", err)
		}
		if r.GetContract() == nil {
			return call.Fail(agtp.StatusNotFound, "contract-not-found", "no contract with that synthesis_id", nil)
		}
		if err := bi.ACL.Allow(caller, r.GetContract().GetOriginatingAgentId()); err != nil {
			return bi.dependencyFailure(ctx, call, "inspect", err)
		}
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, ContractJSON(r.GetContract()))
	case "rcns-attempt":
		if bi.RCNS == nil {
			return call.Fail(agtp.StatusNotFound, "attempt-not-found", "this server keeps no RCNS attempts", nil)
		}
		r, err := bi.RCNS.GetAttempt(ctx, &rcnsv1.GetAttemptRequest{AttemptId: str(params, "attempt_id")})
		if err != nil {
			return bi.dependencyFailure(ctx, call, "rcnssvc", err)
		}
		//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
		attempt, err := jsondoc.PreferStruct(r.GetAttempt(), r.GetAttemptJson())
		if err != nil {
			return bi.dependencyFailure(ctx, call, "rcnssvc", err)
		}
		var subject struct {
			AgentID string `json:"agent_id"`
		}
		if err := json.Unmarshal(attempt, &subject); err != nil {
			return bi.dependencyFailure(ctx, call, "rcnssvc", err)
		}
		if err := bi.ACL.Allow(caller, subject.AgentID); err != nil {
			return bi.dependencyFailure(ctx, call, "inspect", err)
		}
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, attempt)
	case "":
		return call.Fail(agtp.StatusBadRequest, "target-required", "INSPECT needs target: audit, chain_head, lifecycle, contract or rcns-attempt", nil)
	}
	return call.Fail(agtp.StatusUnprocessable, "target-unknown", "INSPECT target "+strconv.Quote(target)+" is not one of audit, chain_head, lifecycle, contract, rcns-attempt", nil)
}

// inspectCaller is the verified identity INSPECT's read ACL judges: the
// TLS client certificate's key, and the Agent-ID only when the caller
// proved it with a certificate (an Agent Certificate, or one for the
// Genesis issuer key: the cross-check core §7.2.4 asks for). A header
// claim or a token authenticates no one to read a chain.
func inspectCaller(call *Call) inspect.Caller {
	peer := call.Peer
	if peer == nil {
		return inspect.Caller{}
	}
	c := inspect.Caller{KeyFingerprint: peer.SPKIFingerprint}
	if call.ProofLevel == callerproof.LevelCertificate {
		c.AgentID = call.AgentID
	}
	return c
}
