package builtin

import (
	"context"
	"time"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// contractState names a contract's state from the enum, or from the
// first release's string.
func contractState(c *rcnsv1.Contract) string {
	//lint:ignore SA1019 the first release's rcnssvc sends the state only as a string
	return enumname.Prefer(c.GetContractState(), c.GetState())
}

// ContractJSON is a contract as DISCOVER /contracts, INSPECT and the RCNS
// answers show it.
func ContractJSON(c *rcnsv1.Contract) map[string]any {
	m := map[string]any{
		"synthesis_id":         c.GetSynthesisId(),
		"method":               c.GetMethod(),
		"path":                 c.GetPath(),
		"originating_agent_id": c.GetOriginatingAgentId(),
		"recipe_lineage":       map[string]any{"recipe_name": c.GetRecipeName(), "recipe_version": c.GetRecipeVersion()},
		"contract_hash":        c.GetContractHash(),
		"negotiation_origin":   c.GetNegotiationOrigin(),
		"state":                contractState(c),
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
func (bi *Registry) propose(ctx context.Context, call *Call) *agtp.Response {
	input := call.Input
	if bi.RCNS == nil {
		return call.Fail(agtp.StatusProposalRejected, "synthesis-disabled", "this server does not synthesize endpoints", nil)
	}
	r, err := bi.RCNS.Propose(ctx, &rcnsv1.ProposeRequest{
		Caller: call.RCNSCaller(), Parameters: string(input), NegotiationId: call.Header.Get(agtp.HeaderNegotiationID),
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	return bi.proposeAnswer(ctx, call, r)
}

// proposeAnswer turns an evaluation into the response rcnssvc built.
func (bi *Registry) proposeAnswer(ctx context.Context, call *Call, r *rcnsv1.ProposeResponse) *agtp.Response {
	status := int(r.GetStatus())
	if status == 0 {
		status = agtp.StatusProposalRejected
	}
	//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
	resp := agtp.NewResponse(status, agtp.MediaTypeJSON, jsondoc.PreferString(r.GetBody(), r.GetBodyJson()))
	if id := r.GetNegotiationId(); id != "" {
		resp.Header.Set(agtp.HeaderNegotiationID, id)
	}
	if c := r.GetContract(); c != nil {
		call.Synthesis = Synthesis{ID: c.GetSynthesisId(), ContractHash: c.GetContractHash(), NegotiationOrigin: c.GetNegotiationOrigin()}
	}
	return resp
}

// proposal polls an evaluation that answered 261.
func (bi *Registry) proposal(ctx context.Context, call *Call) *agtp.Response {
	id := str(call.Params, "proposal_id")
	if bi.RCNS == nil {
		return call.Fail(agtp.StatusNotFound, "proposal-not-found", "this server does not evaluate proposals", nil)
	}
	r, err := bi.RCNS.GetProposal(ctx, &rcnsv1.GetProposalRequest{ProposalId: id, AgentId: call.AgentID})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	return bi.proposeAnswer(ctx, call, r.GetResult())
}
