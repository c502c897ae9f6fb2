package pipeline

import (
	"encoding/json"
	"time"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

func (p *Pipeline) rcnsCaller(x *exchange) *rcnsv1.Caller {
	return &rcnsv1.Caller{
		AgentId:   x.agentID,
		SessionId: x.req.Header.Get(agtp.HeaderSessionID),
		Scopes:    p.effectiveScopes(x),
		TrustTier: x.caller.GetTrustTier(),
	}
}

func contractJSON(c *rcnsv1.Contract) map[string]any {
	m := map[string]any{
		"synthesis_id":         c.GetSynthesisId(),
		"method":               c.GetMethod(),
		"path":                 c.GetPath(),
		"originating_agent_id": c.GetOriginatingAgentId(),
		"recipe_lineage":       map[string]any{"recipe_name": c.GetRecipeName(), "recipe_version": c.GetRecipeVersion()},
		"contract_hash":        c.GetContractHash(),
		"negotiation_origin":   c.GetNegotiationOrigin(),
		"state":                c.GetState(),
		"persistent":           c.GetPersistent(),
	}
	if c.GetIssuedAt() != nil {
		m["issued_at"] = c.GetIssuedAt().AsTime().UTC().Format(time.RFC3339)
	}
	if c.GetExpiresAt() != nil {
		m["expires_at"] = c.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)
	}
	return m
}

// propose forwards PROPOSE to rcnssvc (core §7.2.7, AGTP-API §10).
func (p *Pipeline) propose(x *exchange, input []byte) *agtp.Response {
	if p.RCNS == nil {
		return x.fail(agtp.StatusProposalRejected, "synthesis-disabled", "this server does not synthesize endpoints", nil)
	}
	r, err := p.RCNS.Propose(x.ctx, &rcnsv1.ProposeRequest{
		Caller: p.rcnsCaller(x), ParametersJson: input, NegotiationId: x.req.Header.Get(agtp.HeaderNegotiationID),
	})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	return p.proposeAnswer(x, r)
}

// proposeAnswer turns an evaluation into the response rcnssvc built.
func (p *Pipeline) proposeAnswer(x *exchange, r *rcnsv1.ProposeResponse) *agtp.Response {
	status := int(r.GetStatus())
	if status == 0 {
		status = agtp.StatusProposalRejected
	}
	resp := agtp.NewResponse(status, agtp.MediaTypeJSON, r.GetBodyJson())
	if id := r.GetNegotiationId(); id != "" {
		resp.Header.Set(agtp.HeaderNegotiationID, id)
	}
	if c := r.GetContract(); c != nil {
		x.synthesisID, x.contractHash, x.negotiationOrigin = c.GetSynthesisId(), c.GetContractHash(), c.GetNegotiationOrigin()
	}
	return resp
}

// proposal polls an evaluation that answered 261.
func (p *Pipeline) proposal(x *exchange, id string) *agtp.Response {
	if p.RCNS == nil {
		return x.fail(agtp.StatusNotFound, "proposal-not-found", "this server does not evaluate proposals", nil)
	}
	r, err := p.RCNS.GetProposal(x.ctx, &rcnsv1.GetProposalRequest{ProposalId: id, AgentId: x.agentID})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	return p.proposeAnswer(x, r.GetResult())
}

// rcnsGate handles an unregistered (method, path) from a caller that sent
// Allow-RCNS: true (AGTP-API §10.1).
func (p *Pipeline) rcnsGate(x *exchange) *agtp.Response {
	if p.RCNS == nil {
		resp := x.fail(agtp.StatusRCNSNoContract, "rcns-disabled", "this server does not run runtime contract negotiation", nil)
		resp.Header.Set(agtp.HeaderRCNSAttemptID, newResponseID())
		return resp
	}
	r, err := p.RCNS.Gate(x.ctx, &rcnsv1.GateRequest{Caller: p.rcnsCaller(x), Method: x.req.Method, Path: x.req.Path})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	switch r.GetOutcome() {
	case rcnsv1.GateOutcome_GATE_OUTCOME_CONFIRM_FIRST:
		c := r.GetContract()
		preview := contractJSON(c)
		preview["endpoint"] = json.RawMessage(orNull(c.GetEndpointJson()))
		return jsonResponse(x, agtp.StatusRCNSContractAvailable, agtp.MediaTypeJSON, preview)
	case rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC:
		c := r.GetContract()
		resp := p.runContract(x, c)
		x.negotiationOrigin = "rcns-gate"
		return resp
	case rcnsv1.GateOutcome_GATE_OUTCOME_RATE_LIMITED:
		return x.fail(agtp.StatusRateLimited, r.GetReason(), r.GetExplanation(), map[string]any{"scope": "rcns", "retry_after_seconds": r.GetRetryAfterSeconds()})
	}
	var extra map[string]any
	if r.GetScope() != "" {
		extra = map[string]any{"scope": r.GetScope()}
	}
	resp := x.fail(int(r.GetStatus()), r.GetReason(), r.GetExplanation(), extra)
	if r.GetAttemptId() != "" {
		resp.Header.Set(agtp.HeaderRCNSAttemptID, r.GetAttemptId())
	}
	return resp
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// revokeContract runs REVOKE target=contract (core §7.2.16.1): the
// originating agent, or an operator holding inspect:all, evicts a contract.
func (p *Pipeline) revokeContract(x *exchange, params map[string]any) *agtp.Response {
	if p.RCNS == nil {
		return x.fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
	}
	id := str(params, "synthesis_id")
	if id == "" {
		return x.fail(agtp.StatusBadRequest, "synthesis-id-required", "REVOKE target=contract needs synthesis_id", nil)
	}
	r, err := p.RCNS.RevokeContract(x.ctx, &rcnsv1.RevokeContractRequest{Caller: p.rcnsCaller(x), SynthesisId: id, Reason: str(params, "reason")})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, contractJSON(r.GetContract()))
}

// revokeStaleContracts runs REVOKE target=stale-contracts (core
// §7.2.16.2); mode is grandfather or invalidate, anything else 400.
func (p *Pipeline) revokeStaleContracts(x *exchange, params map[string]any) *agtp.Response {
	if p.RCNS == nil {
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"evicted": 0})
	}
	r, err := p.RCNS.RevokeStaleContracts(x.ctx, &rcnsv1.RevokeStaleContractsRequest{Caller: p.rcnsCaller(x), Mode: str(params, "mode")})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"evicted": r.GetEvicted(), "synthesis_ids": r.GetSynthesisIds()})
}
