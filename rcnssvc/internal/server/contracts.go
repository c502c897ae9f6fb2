package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Reason tokens of this service's own refusals.
const (
	ReasonContractNotFound     = "contract-not-found"
	ReasonContractSessionEnded = "contract-session-ended"
	ReasonInspectAllRequired   = "inspect-all-required"
	ReasonModeInvalid          = "mode-invalid"
)

// GetContract resolves a contract. With synthesis_id it is the presentation
// of Contract-Synthesized (AGTP-API §10.1.4;
// docs/decisions.md#D-contract-resolution): 404 when unknown or evicted, 464
// contract-not-yours for another agent, 464 contract-revoked when expired,
// revoked or released, 404 when bound to a session that is not the caller's,
// 405 or 404 when presented on another method or path than its own
// (pairMismatch); a confirm-first preview is accepted by its first
// presentation on its own pair, and a contract whose acceptance is not
// audited yet is not run (settle: Unavailable acceptance-pending). With
// inspect set it only reads. Without synthesis_id it finds the caller's
// active contract for (method, path), so a PROPOSE result is callable at
// once (AGTP-API §10.8); a pending preview never resolves that way.
func (s *Server) GetContract(ctx context.Context, req *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
	if direct(ctx) {
		// An operator or internal system reads; presenting a contract is
		// an agent's act, which only the front door relays.
		req = proto.CloneOf(req)
		req.Caller, req.Inspect = directCaller(), true
	}
	if req.GetSynthesisId() == "" {
		return s.resolvePair(ctx, req)
	}
	c := req.GetCaller()
	notFound := &rcnsv1.GetContractResponse{Status: agtp.StatusNotFound, Reason: ReasonContractNotFound, Explanation: "no contract with that synthesis_id"}
	id := req.GetSynthesisId()
	if !validID(prefixSynthesis, id) {
		return notFound, nil
	}
	ct, err := s.load(ctx, id)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if ct == nil || ct.state == stateEvicted {
		return notFound, nil
	}
	now := s.now().UnixMilli()
	if req.GetInspect() {
		return &rcnsv1.GetContractResponse{Contract: ct.proto(now)}, nil
	}
	refuse := func(reason, explanation string, withContract bool) *rcnsv1.GetContractResponse {
		a := &attempt{Kind: "presentation", Method: req.GetMethod(), Path: req.GetPath(), AgentID: c.GetAgentId(), TrustTier: c.GetTrustTier(),
			Status: agtp.StatusRCNSNoContract, Reason: reason, Explanation: explanation, SynthesisID: id, RecipeName: ct.rec.RecipeName}
		resp := &rcnsv1.GetContractResponse{Status: agtp.StatusRCNSNoContract, Reason: reason, Explanation: explanation, AttemptId: s.record(ctx, a)}
		if withContract {
			resp.Contract = ct.proto(now)
		}
		return resp
	}
	if ct.rec.AgentID != c.GetAgentId() {
		return refuse(agtp.ReasonContractNotYours, "this contract was issued to another agent", false), nil
	}
	switch eff := ct.effective(now); eff {
	case stateRevoked, stateReleased, stateExpired:
		return refuse(agtp.ReasonContractRevoked, "this contract is "+eff+" and no longer resolves", true), nil
	}
	if ct.rec.SessionID != "" && ct.rec.SessionID != c.GetSessionId() {
		return &rcnsv1.GetContractResponse{Status: agtp.StatusNotFound, Reason: ReasonContractSessionEnded,
			Explanation: "this synthesized endpoint lives for the session that negotiated it (AGTP-API §10.8)"}, nil
	}
	if resp := pairMismatch(ct, req.GetMethod(), req.GetPath(), now); resp != nil {
		return resp, nil
	}
	switch {
	case ct.state == statePending:
		if ct, err = s.accept(ctx, ct); err != nil {
			return nil, err
		}
	case ct.unaudited():
		if ct, err = s.settle(ctx, ct); err != nil {
			return nil, err
		}
	}
	return &rcnsv1.GetContractResponse{Contract: ct.proto(s.now().UnixMilli())}, nil
}

// Reasons of a contract presented for a pair it was not made for.
const (
	ReasonContractMethodMismatch = "contract-method-mismatch"
	ReasonContractPathMismatch   = "contract-path-mismatch"
)

// pairMismatch refuses a contract presented on a request it was not made
// for, before a confirm-first preview is accepted by it: a contract is
// one endpoint (AGTP-API §10.1.4), so another method on its path is 405,
// as a registered path under another method is (AGTP-API §6.1, §11), and
// another path is 404. The contract comes back so the front door can name
// its method in the 405 body. An empty method or path is not checked.
func pairMismatch(ct *contract, method, path string, nowMs int64) *rcnsv1.GetContractResponse {
	if path != "" && path != ct.rec.Path {
		if _, ok := recipe.MatchPath(ct.rec.Path, path); !ok {
			return &rcnsv1.GetContractResponse{Status: agtp.StatusNotFound, Reason: ReasonContractPathMismatch, Contract: ct.proto(nowMs),
				Explanation: "this contract serves the path " + ct.rec.Path + ", not " + path}
		}
	}
	if method != "" && method != ct.rec.Method {
		return &rcnsv1.GetContractResponse{Status: agtp.StatusMethodNotAllowed, Reason: ReasonContractMethodMismatch, Contract: ct.proto(nowMs),
			Explanation: "this contract serves " + ct.rec.Method + " " + ct.rec.Path + ", not " + method}
	}
	return nil
}

// ReasonAcceptancePending is the Unavailable reason of a contract
// presented while its acceptance is being audited.
const ReasonAcceptancePending = "acceptance-pending"

// accept turns a confirm-first preview into an active contract. The state
// changes with the acceptance event marked pending, which keeps the
// contract out of force (contract.unaudited: a second presentation, the
// bare-pair resolution and the gate do not run it) until auditsvc has the
// event; when the event cannot be audited the preview goes back to pending
// (fail closed).
func (s *Server) accept(ctx context.Context, ct *contract) (*contract, error) {
	id := ct.rec.SynthesisID
	changed, _, err := s.transition(ctx, id, []string{statePending}, stateActive, "", ct.rec.AgentID, eventAccepted)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if changed {
		if err := s.emit(ctx, &ct.rec, eventAccepted, "", ct.rec.AgentID); err != nil {
			if _, _, rerr := s.transition(context.WithoutCancel(ctx), id, []string{stateActive}, statePending, "", "", ""); rerr != nil {
				// It stays active and unaudited, so not in force; a later
				// presentation audits it (settle).
				s.log.ErrorContext(ctx, "accepted contract not reverted after an audit failure", "synthesis_id", id, "error", rerr)
			}
			return nil, err
		}
		if err := s.clearEvent(context.WithoutCancel(ctx), id, eventAccepted); err != nil {
			s.log.WarnContext(ctx, "contract event flag not cleared; the contract is in force once presented again", "synthesis_id", id, "error", err)
			ct.state, ct.event = stateActive, ""
			return ct, nil
		}
	}
	cur, err := s.load(ctx, id)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if cur != nil && cur.unaudited() && !changed {
		// Another presentation is accepting it.
		return s.settle(ctx, cur)
	}
	if cur == nil || cur.effective(s.now().UnixMilli()) != stateActive {
		return nil, grpcerr.Conflict("contract-changed", "the contract changed while it was being accepted; present it again")
	}
	return cur, nil
}

// retakeScript claims an unaudited contract for auditing its acceptance:
// it renews "changed" when the contract is still active, unaudited and
// unchanged since it was read (only one claimant's renewal succeeds).
var retakeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') == 'active' and redis.call('HGET', KEYS[1], 'event') == ARGV[1]
  and redis.call('HGET', KEYS[1], 'changed') == ARGV[2] then
  redis.call('HSET', KEYS[1], 'changed', ARGV[3])
  return 1
end
return 0
`)

// settle answers for a contract whose acceptance is recorded but not
// audited (contract.unaudited). While the call that recorded it may still
// be auditing it (it sends the event within PeerTimeout), the contract is
// not in force and the answer is Unavailable acceptance-pending. After
// that, the call ended without auditing the event or taking the contract
// back (a crash, Redis refusing the revert): this call audits the
// acceptance and the contract is in force.
func (s *Server) settle(ctx context.Context, ct *contract) (*contract, error) {
	if !ct.unaudited() {
		return ct, nil
	}
	id := ct.rec.SynthesisID
	now := s.now().UnixMilli()
	pending := grpcerr.Unavailable(ReasonAcceptancePending, "the contract's acceptance is being audited; it is not in force yet, present it again shortly")
	if now-ct.changedMs < (2 * s.opts.PeerTimeout).Milliseconds() {
		return nil, pending
	}
	ok, err := retakeScript.Run(ctx, s.rdb, []string{rediskeys.Contract(id)}, eventAccepted, strconv.FormatInt(ct.changedMs, 10), now).Bool()
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("contract acceptance: %w", err))
	}
	if !ok {
		return nil, pending
	}
	if err := s.emit(ctx, &ct.rec, eventAccepted, "", ct.rec.AgentID); err != nil {
		return nil, err
	}
	if err := s.clearEvent(context.WithoutCancel(ctx), id, eventAccepted); err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("contract acceptance: %w", err))
	}
	cur, err := s.load(ctx, id)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if cur == nil || cur.effective(s.now().UnixMilli()) != stateActive {
		return nil, grpcerr.Conflict("contract-changed", "the contract changed while it was being accepted; present it again")
	}
	return cur, nil
}

func (s *Server) resolvePair(ctx context.Context, req *rcnsv1.GetContractRequest) (*rcnsv1.GetContractResponse, error) {
	c := req.GetCaller()
	notFound := &rcnsv1.GetContractResponse{Status: agtp.StatusNotFound, Reason: ReasonContractNotFound, Explanation: "no active contract of yours serves this method and path"}
	if !validAgentID(c.GetAgentId()) || req.GetMethod() == "" || req.GetPath() == "" {
		return notFound, nil
	}
	idx, err := s.agentIndex(ctx, c.GetAgentId())
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	type cand struct {
		id     string
		issued int64
	}
	var cands []cand
	for id, sm := range idx {
		if sm.Method != req.GetMethod() || (sm.SessionID != "" && sm.SessionID != c.GetSessionId()) {
			continue
		}
		if sm.Path != req.GetPath() {
			if _, ok := recipe.MatchPath(sm.Path, req.GetPath()); !ok {
				continue
			}
		}
		cands = append(cands, cand{id, sm.IssuedMs})
	}
	if len(cands) == 0 {
		return notFound, nil
	}
	// Newest first; usually the first candidate is the answer, so they are
	// read one at a time rather than all at once.
	sort.Slice(cands, func(i, j int) bool { return cands[i].issued > cands[j].issued })
	for _, x := range cands {
		ct, err := s.load(ctx, x.id)
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		now := s.now().UnixMilli()
		if ct != nil && ct.rec.AgentID == c.GetAgentId() && ct.effective(now) == stateActive {
			return &rcnsv1.GetContractResponse{Contract: ct.proto(now)}, nil
		}
	}
	return notFound, nil
}

// seesAll reports whether the caller may see and revoke every contract.
func (s *Server) seesAll(c *rcnsv1.Caller) bool {
	return c.GetOperator() || holds(scopesOf(c), s.opts.InspectAllScope)
}

// ListContracts is DISCOVER /contracts (AGTP-API §5.8.7): the caller's
// live contracts (pending previews included), or every live contract for
// a caller holding inspect:all.
//
// Pages are ordered by expiry, then synthesis ID: the order of the
// contract index, which an inspect:all page reads from its position on
// (O(page)); a caller's own contracts come from the agent's index (one
// hash, capped per agent). The position is the last (expiry, synthesis
// ID) returned; a contract renewed meanwhile moves to its new expiry.
func (s *Server) ListContracts(ctx context.Context, req *rcnsv1.ListContractsRequest) (*rcnsv1.ListContractsResponse, error) {
	c := req.GetCaller()
	if direct(ctx) {
		c = directCaller()
	}
	all := s.seesAll(c)
	spec := paging.Spec{RPC: rcnsv1.RcnsService_ListContracts_FullMethodName, Default: min(100, s.opts.Contracts.ListLimit), Max: s.opts.Contracts.ListLimit}
	page, err := spec.Parse(req.GetPageSize(), req.GetPageToken(), strconv.FormatBool(all), c.GetAgentId())
	if err != nil {
		return nil, err
	}
	var pos *paging.ZPos
	if page.After != "" {
		p, err := paging.ParseZPos(page.After)
		if err != nil {
			return nil, grpcerr.InvalidArgument(paging.ReasonPageTokenInvalid, err.Error())
		}
		pos = &p
	}
	now := s.now().UnixMilli()
	var candidates func(after *paging.ZPos, n int) ([]paging.ZPos, error)
	switch {
	case all:
		candidates = func(after *paging.ZPos, n int) ([]paging.ZPos, error) {
			zs, err := paging.ZAfter(ctx, s.rdb, rediskeys.ContractIndex, "("+strconv.FormatInt(now, 10), "+inf", after, n)
			if err != nil {
				return nil, fmt.Errorf("contract index: %w", err)
			}
			out := make([]paging.ZPos, len(zs))
			for i, z := range zs {
				m, _ := z.Member.(string)
				out[i] = paging.ZPos{Score: z.Score, Member: m}
			}
			return out, nil
		}
	case validAgentID(c.GetAgentId()):
		idx, err := s.agentIndex(ctx, c.GetAgentId())
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		mine := make([]paging.ZPos, 0, len(idx))
		for id, sm := range idx {
			mine = append(mine, paging.ZPos{Score: float64(sm.ExpiresMs), Member: id})
		}
		slices.SortFunc(mine, paging.ZPos.Compare)
		candidates = func(after *paging.ZPos, n int) ([]paging.ZPos, error) {
			if after != nil {
				i, _ := slices.BinarySearchFunc(mine, *after, paging.ZPos.Compare)
				for i < len(mine) && mine[i].Compare(*after) <= 0 {
					i++
				}
				mine = mine[i:]
			}
			return mine[:min(n, len(mine))], nil
		}
	default:
		return &rcnsv1.ListContractsResponse{}, nil
	}
	out := &rcnsv1.ListContractsResponse{}
	var last []paging.ZPos // the position of each contract listed
	// One contract beyond the page tells whether a next page exists.
	for len(out.Contracts) <= page.Size {
		cands, err := candidates(pos, page.Size+1-len(out.Contracts))
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		if len(cands) == 0 {
			break
		}
		ids := make([]string, len(cands))
		for i, p := range cands {
			ids[i] = p.Member
		}
		cts, err := s.loadMany(ctx, ids)
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		byID := make(map[string]*contract, len(cts))
		for _, ct := range cts {
			byID[ct.rec.SynthesisID] = ct
		}
		for _, p := range cands {
			pos = &p
			ct := byID[p.Member]
			if ct == nil {
				continue
			}
			switch ct.effective(now) {
			case statePending, stateActive:
				out.Contracts = append(out.Contracts, ct.proto(now))
				last = append(last, p)
			}
		}
	}
	if len(out.Contracts) > page.Size {
		out.Contracts = out.Contracts[:page.Size]
		out.NextPageToken = page.Next(last[page.Size-1].String())
	}
	return out, nil
}

// RevokeContract is REVOKE target=contract (core §7.2.16.1: the
// originator or inspect:all, else 403; later presentations get 464
// contract-revoked; rcns_revoke) and, with release, SUSPEND synthesis_id
// (§7.2.12.1: the originator only; rcns_release). Ending an ended contract
// changes nothing and emits nothing; an event a failed audit left pending
// is sent on the retry, and so is the removal of a promoted endpoint the
// catalog did not take (Unavailable catalog-unavailable until it is gone;
// the janitor retries it too).
func (s *Server) RevokeContract(ctx context.Context, req *rcnsv1.RevokeContractRequest) (*rcnsv1.RevokeContractResponse, error) {
	c, actor := req.GetCaller(), req.GetActor()
	if direct(ctx) {
		c, actor = directCaller(), directActor(ctx)
	}
	id := req.GetSynthesisId()
	if id == "" {
		return nil, grpcerr.InvalidArgument("synthesis-id-required", "name the contract with synthesis_id")
	}
	if !validID(prefixSynthesis, id) {
		return nil, grpcerr.NotFound(ReasonContractNotFound, "no contract with that synthesis_id")
	}
	ct, err := s.load(ctx, id)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if ct == nil || ct.state == stateEvicted {
		return nil, grpcerr.NotFound(ReasonContractNotFound, "no contract with that synthesis_id")
	}
	owner := ct.rec.AgentID == c.GetAgentId()
	to, event := stateRevoked, eventRevoke
	if req.GetRelease() {
		if !owner {
			return nil, grpcerr.PermissionDenied(agtp.ReasonContractNotYours, "only the originating agent may release a contract (core §7.2.12.1)")
		}
		to, event = stateReleased, eventRelease
	} else if !owner && !s.seesAll(c) {
		return nil, grpcerr.PermissionDenied(agtp.ReasonContractNotYours, "only the originating agent or an operator holding "+s.opts.InspectAllScope+" may revoke a contract (core §7.2.16.1)")
	}
	if actor == "" {
		actor = c.GetAgentId()
	}
	if len(actor) > 256 || len(req.GetReason()) > 1024 {
		return nil, grpcerr.InvalidArgument("invalid-parameter", "actor and reason are bounded to 256 and 1024 bytes")
	}
	changed, _, err := s.transition(ctx, id, []string{statePending, stateActive}, to, req.GetReason(), actor, event)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if changed || ct.event == event || ct.unpromote {
		if ct, err = s.load(ctx, id); err != nil || ct == nil {
			return nil, grpcerr.Internal(errors.Join(err, errors.New("contract vanished")))
		}
		if err := s.finish(ctx, ct, false); err != nil {
			return nil, err
		}
	}
	if ct, err = s.load(ctx, id); err != nil || ct == nil {
		return nil, grpcerr.Internal(errors.Join(err, errors.New("contract vanished")))
	}
	if ct.unpromote {
		return nil, grpcerr.Unavailable(ReasonCatalogUnavailable, "the contract is "+ct.effective(s.now().UnixMilli())+
			", but its promoted endpoint could not be removed from the catalog yet; the janitor retries the removal, and so does a repeated call")
	}
	return &rcnsv1.RevokeContractResponse{Contract: ct.proto(s.now().UnixMilli())}, nil
}

// ReasonCatalogUnavailable is the Unavailable reason of an ended persistent
// contract whose catalog endpoint is not removed yet.
const ReasonCatalogUnavailable = "catalog-unavailable"

// finish completes an ended contract: its catalog endpoint goes (or its
// pending-unpromote mark stays for the retries, unpromote.go), it leaves
// the indexes (and Redis too when evicted), and its pending event is
// audited. It is safe to repeat.
func (s *Server) finish(ctx context.Context, ct *contract, evict bool) error {
	if ct.rec.Persistent {
		if _, err := s.unpromote(ctx, entryOf(&ct.rec)); err != nil {
			// Nothing recorded the removal: the contract stays in the
			// indexes with its event, so the callers' retries finish it.
			return grpcerr.Internal(err)
		}
	}
	if ct.event != "" {
		if err := s.emit(ctx, &ct.rec, ct.event, ct.reason, ct.actor); err != nil {
			return err
		}
	}
	if evict {
		s.forget(ctx, &ct.rec, true)
		return nil
	}
	s.forget(ctx, &ct.rec, false)
	if ct.event != "" {
		if err := s.clearEvent(ctx, ct.rec.SynthesisID, ct.event); err != nil {
			s.log.WarnContext(ctx, "contract event flag not cleared", "synthesis_id", ct.rec.SynthesisID, "error", err)
		}
	}
	return nil
}

// RevokeStaleContracts is REVOKE target=stale-contracts (AGTP-API
// §10.1.4.1; core §7.2.16.2): inspect:all only; every contract with a
// recipe is unchanged (its recipe version is current), grandfathered
// (it differs or the recipe is gone, mode grandfather) or evicted (mode
// invalidate: gone, so a presentation gets 404, with rcns_release reason
// policy-change-invalidation and the actor). The answer lists each of
// them with its outcome; an eviction whose event auditsvc did not take is
// listed with release_pending rather than failing the sweep, whose other
// outcomes have happened. A contract that ends while the sweep runs is
// no longer live and is not listed.
func (s *Server) RevokeStaleContracts(ctx context.Context, req *rcnsv1.RevokeStaleContractsRequest) (*rcnsv1.RevokeStaleContractsResponse, error) {
	c, actor := req.GetCaller(), req.GetActor()
	if direct(ctx) {
		c, actor = directCaller(), directActor(ctx)
	}
	if !s.seesAll(c) {
		return nil, grpcerr.PermissionDenied(ReasonInspectAllRequired, "the stale-contract sweep needs "+s.opts.InspectAllScope+" (core §7.2.16.2)")
	}
	mode := req.GetMode()
	if mode == "" {
		mode = s.opts.RCNS.OnPolicyChange
	}
	if mode != PolicyGrandfather && mode != PolicyInvalidate {
		return nil, grpcerr.InvalidArgument(ReasonModeInvalid, "mode must be grandfather or invalidate (core §7.2.16.2)")
	}
	if actor == "" {
		actor = c.GetAgentId()
	}
	if len(actor) > 256 {
		return nil, grpcerr.InvalidArgument("invalid-parameter", "actor is bounded to 256 bytes")
	}
	ids, err := s.rdb.ZRange(ctx, rediskeys.ContractIndex, 0, -1).Result()
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("contract index: %w", err))
	}
	out := &rcnsv1.RevokeStaleContractsResponse{Mode: mode}
	pats := s.pats.Load()
	for start := 0; start < len(ids); start += 256 {
		cts, err := s.loadMany(ctx, ids[start:min(start+256, len(ids))])
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		for _, ct := range cts {
			if ct.rec.RecipeName == "" {
				continue
			}
			r := &rcnsv1.StaleContract{SynthesisId: ct.rec.SynthesisID, RecipeName: ct.rec.RecipeName, RecipeVersion: ct.rec.RecipeVersion}
			if cur := pats.byName[ct.rec.RecipeName]; cur != nil {
				v := cur.RecipeVersion
				r.CurrentVersion = &v
			}
			switch eff := ct.effective(s.now().UnixMilli()); {
			case eff == stateEvicted:
				r.SweepOutcome = rcnsv1.SweepOutcome_SWEEP_OUTCOME_EVICTED // an earlier sweep's eviction whose event was not audited
			case eff != statePending && eff != stateActive:
				continue
			case r.CurrentVersion != nil && *r.CurrentVersion == ct.rec.RecipeVersion:
				r.SweepOutcome = rcnsv1.SweepOutcome_SWEEP_OUTCOME_UNCHANGED
			case mode == PolicyGrandfather:
				r.SweepOutcome = rcnsv1.SweepOutcome_SWEEP_OUTCOME_GRANDFATHERED
			default:
				changed, _, err := s.transition(ctx, ct.rec.SynthesisID, []string{statePending, stateActive}, stateEvicted, "policy-change-invalidation", actor, eventRelease)
				if err != nil {
					return nil, grpcerr.Internal(err)
				}
				if !changed {
					continue
				}
				r.SweepOutcome = rcnsv1.SweepOutcome_SWEEP_OUTCOME_EVICTED
			}
			//lint:ignore SA1019 the first release's field, filled for its clients beside SweepOutcome
			r.Outcome = enumname.Of(r.SweepOutcome)
			if r.SweepOutcome == rcnsv1.SweepOutcome_SWEEP_OUTCOME_EVICTED {
				cur, err := s.load(ctx, ct.rec.SynthesisID)
				if err != nil {
					return nil, grpcerr.Internal(err)
				}
				if cur != nil {
					if err := s.finish(ctx, cur, true); err != nil {
						// The eviction stands; its event is emitted by the
						// next sweep (the evicted case above).
						s.log.WarnContext(ctx, "evicted contract's rcns_release not audited yet", "synthesis_id", ct.rec.SynthesisID, "error", err)
						r.ReleasePending = true
					}
				}
				out.Evicted++
				out.SynthesisIds = append(out.SynthesisIds, ct.rec.SynthesisID)
			}
			out.Contracts = append(out.Contracts, r)
		}
	}
	return out, nil
}

// GetAttempt is INSPECT target=rcns-attempt (core §7.2.4).
func (s *Server) GetAttempt(ctx context.Context, req *rcnsv1.GetAttemptRequest) (*rcnsv1.GetAttemptResponse, error) {
	if !validID(prefixAttempt, req.GetAttemptId()) {
		return nil, grpcerr.NotFound("attempt-not-found", "no RCNS attempt with that attempt_id (attempts are kept for a while, then evicted)")
	}
	b, err := s.rdb.Get(ctx, rediskeys.RCNSAttempt(req.GetAttemptId())).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, grpcerr.NotFound("attempt-not-found", "no RCNS attempt with that attempt_id (attempts are kept for a while, then evicted)")
	}
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("attempt load: %w", err))
	}
	attempt, err := jsondoc.Struct(b)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("attempt %s: %w", req.GetAttemptId(), err))
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Attempt
	return &rcnsv1.GetAttemptResponse{AttemptJson: b, Attempt: attempt}, nil
}

// patternPaging is ListPatterns' page sizes.
var patternPaging = paging.Spec{RPC: rcnsv1.RcnsService_ListPatterns_FullMethodName, Default: 100, Max: 1000}

// ListPatterns is DISCOVER /patterns (AGTP-API §5.8.6), served whether
// RCNS is enabled or not, a page at a time in recipe name order (the
// position is the last name returned).
func (s *Server) ListPatterns(_ context.Context, req *rcnsv1.ListPatternsRequest) (*rcnsv1.ListPatternsResponse, error) {
	page, err := patternPaging.Parse(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	pats, next := paging.Slice(page, s.pats.Load().byRecipe, func(p *recipe.Pattern) string { return p.RecipeName })
	out := &rcnsv1.ListPatternsResponse{RcnsEnabled: s.opts.RCNS.Enabled, NextPageToken: next}
	listing := make([]map[string]any, 0, len(pats))
	for _, p := range pats {
		out.Patterns = append(out.Patterns, &rcnsv1.Pattern{
			RecipeName: p.RecipeName, RecipeVersion: p.RecipeVersion, Method: p.Method, PathExact: p.PathExact, PathRegex: p.PathRegex,
			Description: p.Description, RequiredScopes: p.RequiredScopes, MinTrustTier: p.MinTrustTier, DataClasses: p.DataClasses, Steps: int32(len(p.Steps)),
		})
		listing = append(listing, p.Listing())
	}
	b, err := json.Marshal(map[string]any{"rcns_enabled": s.opts.RCNS.Enabled, "patterns": listing})
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Body
	out.BodyJson, out.Body = b, string(b)
	return out, nil
}

// GetRecipe returns a recipe: the current version, or one a contract
// captured.
func (s *Server) GetRecipe(ctx context.Context, req *rcnsv1.GetRecipeRequest) (*rcnsv1.GetRecipeResponse, error) {
	name, version := req.GetRecipeName(), req.GetRecipeVersion()
	if !recipe.ValidName(name) || (version != "" && !recipe.ValidVersion(version)) {
		return nil, grpcerr.NotFound("recipe-not-found", "no such recipe")
	}
	if cur := s.pats.Load().byName[name]; cur != nil && (version == "" || version == cur.RecipeVersion) {
		b, err := json.Marshal(cur.Recipe())
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		return recipeResponse(b, cur.RecipeVersion)
	}
	if version == "" {
		return nil, grpcerr.NotFound("recipe-not-found", "no such recipe")
	}
	b, err := s.rdb.Get(ctx, rediskeys.RCNSRecipe(name, version)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, grpcerr.NotFound("recipe-not-found", "no such recipe version")
	}
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("recipe load: %w", err))
	}
	return recipeResponse(b, version)
}

// recipeResponse carries a recipe's JSON both as the Struct and as the
// first release's bytes.
func recipeResponse(b []byte, version string) (*rcnsv1.GetRecipeResponse, error) {
	rec, err := jsondoc.Struct(b)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("recipe %s: %w", version, err))
	}
	//lint:ignore SA1019 the first release's field, filled for its clients beside Recipe
	return &rcnsv1.GetRecipeResponse{RecipeJson: b, Recipe: rec, RecipeVersion: version}, nil
}

// direct reports whether an operator or an internal system calls, known
// by its certificate, rather than the front door relaying an agent it
// proved. Only the front door's statements about the caller (the Caller
// message, the actor) are taken; a direct caller's are ignored. A handler
// called without an access decision (in tests) takes the statement.
func direct(ctx context.Context) bool {
	id, ok := access.Caller(ctx)
	return ok && id != access.FrontDoor
}

// directCaller is the standing of a direct caller: it sees every
// contract, as inspect:all does, and is no agent. The access table limits
// it to what operators and internal systems may call.
func directCaller() *rcnsv1.Caller { return &rcnsv1.Caller{Operator: true} }

// directActor names a direct caller in the events it causes.
func directActor(ctx context.Context) string {
	return access.Actor(ctx)
}
