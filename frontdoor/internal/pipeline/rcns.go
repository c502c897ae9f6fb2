package pipeline

import (
	"encoding/json"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/agtp"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
)

func (p *Pipeline) rcnsCaller(x *exchange) *rcnsv1.Caller {
	return &rcnsv1.Caller{
		AgentId:   x.agentID,
		SessionId: x.req.Header.Get(agtp.HeaderSessionID),
		Scopes:    x.caller.GetScopes(),
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

// rcnsGate handles an unregistered (method, path) from a caller that sent
// Allow-RCNS: true (AGTP-API §10.1).
func (p *Pipeline) rcnsGate(x *exchange) *agtp.Response {
	if p.RCNS == nil {
		resp := x.fail(agtp.StatusRCNSNoContract, "rcns-disabled", "this server does not run runtime contract negotiation", nil)
		resp.Header.Set(agtp.HeaderRCNSAttemptID, newResponseID())
		return resp
	}
	if resp := p.identify(x, false); resp != nil {
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
		x.synthesisID, x.contractHash, x.negotiationOrigin = c.GetSynthesisId(), c.GetContractHash(), "rcns-gate"
		return x.fail(agtp.StatusNotImplemented, "contract-execution-unsupported", "optimistic execution of synthesized contracts is not available on this front door yet", nil)
	case rcnsv1.GateOutcome_GATE_OUTCOME_RATE_LIMITED:
		return x.fail(agtp.StatusRateLimited, r.GetReason(), r.GetExplanation(), map[string]any{"scope": "rcns", "retry_after_seconds": r.GetRetryAfterSeconds()})
	}
	resp := x.fail(int(r.GetStatus()), r.GetReason(), r.GetExplanation(), nil)
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
