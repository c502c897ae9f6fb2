package server

import (
	"context"
	"fmt"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/idempotency"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Reasons of the operator's resolution of an unknown outcome.
const (
	ReasonIdempotencyKeyNotFound   = "idempotency-key-not-found"
	ReasonIdempotencyOutcomeStored = "idempotency-outcome-stored"
)

// maxNoteLen bounds the operator's note on a resolution.
const maxNoteLen = 1024

// MarkIdempotencyUnknown records that the claimed request ran, or may have
// run, without a stored outcome: until the unknown lease lapses or an
// operator resolves the key, a retry of the same request is refused (409
// idempotency-outcome-unknown) rather than run a second time. A claim that
// no longer holds a pending slot is left alone (marked false), so that a
// completion that did land is never hidden. A slot that is gone (the lease
// lapsed while the request ran) is held as unknown again, with the claim's
// fingerprint, so that the same request's retry is still told its outcome
// is unknown rather than that the key was used for another request.
func (s *Server) MarkIdempotencyUnknown(ctx context.Context, req *policyv1.MarkIdempotencyUnknownRequest) (*policyv1.MarkIdempotencyUnknownResponse, error) {
	if err := validateClaim(req.GetClaim()); err != nil {
		return nil, err
	}
	c := req.GetClaim()
	ok, err := idempotency.MarkUnknown(ctx, s.rdb, c.GetSlot(), c.GetToken(), c.GetFingerprint(), s.opts.Idempotency.UnknownLease)
	if err != nil {
		return nil, s.redisError(ctx, err)
	}
	return &policyv1.MarkIdempotencyUnknownResponse{Marked: ok}, nil
}

// ResolveIdempotencyOutcome applies an operator's decision to an unknown
// outcome: RELEASE frees the key so a retry runs the request again,
// APPLIED keeps refusing retries (for the outcome TTL) as a request that
// took effect. Every resolution is logged with the operator's note.
func (s *Server) ResolveIdempotencyOutcome(ctx context.Context, req *policyv1.ResolveIdempotencyOutcomeRequest) (*policyv1.ResolveIdempotencyOutcomeResponse, error) {
	bad := func(what string) error { return grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, what) }
	var resolution idempotency.Resolution
	switch req.GetResolution() {
	case policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_RELEASE:
		resolution = idempotency.ResolveRelease
	case policyv1.IdempotencyResolution_IDEMPOTENCY_RESOLUTION_APPLIED:
		resolution = idempotency.ResolveApplied
	default:
		return nil, bad("resolution must be RELEASE or APPLIED")
	}
	switch {
	case req.GetAgentId() == "" || len(req.GetAgentId()) > maxIDLen:
		return nil, bad("agent_id must be 1-256 characters")
	case !idempotency.ValidKey(req.GetIdempotencyKey()):
		return nil, bad("idempotency_key must be 1-255 printable ASCII characters")
	case len(req.GetNote()) > maxNoteLen:
		return nil, bad("note must be at most 1024 bytes")
	}
	slot := rediskeys.IdempotencySlot(req.GetAgentId(), req.GetIdempotencyKey())
	prev, changed, err := idempotency.Resolve(ctx, s.rdb, slot, resolution, s.opts.Idempotency.TTL)
	if err != nil {
		return nil, s.redisError(ctx, err)
	}
	operator, _ := access.Caller(ctx)
	log := []any{"operator", operator.String(), "agent_id", req.GetAgentId(), "idempotency_key", req.GetIdempotencyKey(),
		"resolution", string(resolution), "previous_state", prev, "note", req.GetNote()}
	if !changed && !(resolution == idempotency.ResolveApplied && prev == idempotency.StateApplied) {
		s.log.InfoContext(ctx, "idempotency outcome not resolved", log...)
		return nil, unresolvable(prev)
	}
	s.log.InfoContext(ctx, "idempotency outcome resolved by the operator", log...)
	out := &policyv1.ResolveIdempotencyOutcomeResponse{PreviousState: slotState(prev), State: policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNSPECIFIED}
	if resolution == idempotency.ResolveApplied {
		out.State = policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_APPLIED
	}
	return out, nil
}

// unresolvable is the refusal of a resolution for a slot in state.
func unresolvable(state string) error {
	switch state {
	case "":
		return grpcerr.NotFound(ReasonIdempotencyKeyNotFound,
			"no request of this agent holds this Idempotency-Key (never used, or its outcome expired)")
	case rediskeys.SlotPending:
		return grpcerr.Conflict(agtp.ReasonIdempotencyInFlight,
			"the request holding this Idempotency-Key is still running; its outcome is not unknown yet", "state", state)
	case rediskeys.SlotDone:
		return grpcerr.Conflict(ReasonIdempotencyOutcomeStored,
			"the outcome of this Idempotency-Key is stored and replayed; there is nothing to resolve", "state", state)
	}
	return grpcerr.Conflict(ReasonIdempotencyOutcomeApplied,
		fmt.Sprintf("the outcome of this Idempotency-Key is %s; only RELEASE changes it", state), "state", state)
}

func slotState(state string) policyv1.IdempotencySlotState {
	switch state {
	case rediskeys.SlotPending:
		return policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_PENDING
	case rediskeys.SlotDone:
		return policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_DONE
	case idempotency.StateUnknown:
		return policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNKNOWN
	case idempotency.StateApplied:
		return policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_APPLIED
	}
	return policyv1.IdempotencySlotState_IDEMPOTENCY_SLOT_STATE_UNSPECIFIED
}
