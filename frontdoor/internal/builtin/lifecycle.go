package builtin

import (
	"context"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
)

var lifecycleTransitions = map[string]identityv1.LifecycleTransition{
	"ACTIVATE":   identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE,
	"DEACTIVATE": identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE,
	"REINSTATE":  identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE,
	"REVOKE":     identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE,
	"DEPRECATE":  identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE,
}

// lifecycle runs one of the five lifecycle methods through identitysvc,
// with the TLS client identity for genesis_issuer authorisation.
func (bi *Registry) lifecycle(ctx context.Context, call *Call) *agtp.Response {
	method, params := call.Method, call.Params
	if method == "REVOKE" {
		switch str(params, "target") {
		case "contract":
			return bi.revokeContract(ctx, call)
		case "stale-contracts":
			return bi.revokeStaleContracts(ctx, call)
		}
	}
	target := str(params, "agent_id")
	if target == "" {
		return call.Fail(agtp.StatusBadRequest, "agent-id-required", method+" needs the agent_id parameter", nil)
	}
	if method == "REVOKE" && str(params, "target") == "" && str(params, "reason") == "" {
		return call.Fail(agtp.StatusBadRequest, "reason-required", "REVOKE needs a reason (core §7.2.16)", nil)
	}
	deadline, resp := rfc3339(ctx, call, params, "migration_deadline")
	if resp != nil {
		return resp
	}
	r, err := bi.Identity.TransitionLifecycle(ctx, &identityv1.TransitionLifecycleRequest{
		AgentId:              target,
		Transition:           lifecycleTransitions[method],
		Reason:               str(params, "reason"),
		Actor:                str(params, "actor"),
		SuccessorAgentId:     str(params, "successor_agent_id"),
		MigrationDeadline:    deadline,
		ClientKeyFingerprint: call.clientKeyFingerprint(),
		CallerAgentId:        call.AgentID,
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	body := map[string]any{
		"agent_id":        target,
		"status":          callerpolicy.StateName(r.GetStatus()),
		"previous_status": callerpolicy.StateName(r.GetPreviousStatus()),
		"event_type":      r.GetEventType(),
	}
	if r.GetNoop() {
		body["noop"] = true
	} else {
		body["audit_id"] = r.GetAuditId()
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, body)
}

// revokeContract runs REVOKE target=contract (core §7.2.16.1): the
// originating agent, or an operator holding inspect:all, evicts a contract.
func (bi *Registry) revokeContract(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if bi.RCNS == nil {
		return call.Fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
	}
	id := str(params, "synthesis_id")
	if id == "" {
		return call.Fail(agtp.StatusBadRequest, "synthesis-id-required", "REVOKE target=contract needs synthesis_id", nil)
	}
	r, err := bi.RCNS.RevokeContract(ctx, &rcnsv1.RevokeContractRequest{Caller: call.RCNSCaller(), SynthesisId: id, Reason: str(params, "reason")})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, ContractJSON(r.GetContract()))
}

// revokeStaleContracts runs REVOKE target=stale-contracts (core
// §7.2.16.2); mode is grandfather or invalidate, anything else 400. The
// answer reports every live contract with a recipe and its outcome
// (AGTP-API §10.1.4.1: unchanged, grandfathered or evicted), with the
// versions compared; current_version is null for a removed recipe.
func (bi *Registry) revokeStaleContracts(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	if bi.RCNS == nil {
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"evicted": 0, "synthesis_ids": []string{}, "contracts": []any{}})
	}
	r, err := bi.RCNS.RevokeStaleContracts(ctx, &rcnsv1.RevokeStaleContractsRequest{Caller: call.RCNSCaller(), Mode: str(params, "mode"), Actor: str(params, "actor")})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	contracts := make([]map[string]any, 0, len(r.GetContracts()))
	for _, c := range r.GetContracts() {
		//lint:ignore SA1019 the first release's rcnssvc sends the outcome only as a string
		m := map[string]any{"synthesis_id": c.GetSynthesisId(), "outcome": enumname.Prefer(c.GetSweepOutcome(), c.GetOutcome()),
			"recipe_name": c.GetRecipeName(), "recipe_version": c.GetRecipeVersion(), "current_version": nil}
		if c.CurrentVersion != nil {
			m["current_version"] = c.GetCurrentVersion()
		}
		if c.GetReleasePending() {
			m["release_pending"] = true
		}
		contracts = append(contracts, m)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"mode": r.GetMode(), "evicted": r.GetEvicted(),
		"synthesis_ids": append([]string{}, r.GetSynthesisIds()...), "contracts": contracts})
}
