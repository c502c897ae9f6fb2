package server

import (
	"context"
	"errors"
	"strings"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// maxPathLen bounds the request path a gate evaluation accepts (the front
// door's request line limit is 8 KiB).
const maxPathLen = 8 << 10

// Gate is the four-lock gate for an unregistered (method, path) whose
// request carried Allow-RCNS: true (AGTP-API §10.1.2;
// docs/decisions.md#D-rcns-gate-order). Lock 2 (the header) is the front
// door's; the others run here in the order 1, 3, 4 (464, 262, 464), then
// the negotiation rate limit (429, §10.1.5), then synthesis (461, an
// optimistic run, or 464). Every refusal but the rate limit is recorded as
// an attempt and carries its RCNS-Attempt-Id.
func (s *Server) Gate(ctx context.Context, req *rcnsv1.GateRequest) (*rcnsv1.GateResponse, error) {
	c := req.GetCaller()
	if !validAgentID(c.GetAgentId()) {
		return nil, grpcerr.InvalidArgument("caller-required", "the RCNS gate needs the caller's canonical Agent-ID")
	}
	method, path := req.GetMethod(), req.GetPath()
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if !agtp.ValidMethodToken(method) || !strings.HasPrefix(path, "/") || len(path) > maxPathLen {
		return nil, grpcerr.InvalidArgument("gate-request-invalid", "the gate needs a method token and an absolute path")
	}
	a := &attempt{Kind: "gate", Method: method, Path: path, AgentID: c.GetAgentId(), TrustTier: c.GetTrustTier(),
		Locks: map[string]string{"rcns_enabled": lockNotEvaluated, "allow_rcns": lockOpen, "scope": lockNotEvaluated, "trust_tier": lockNotEvaluated}}
	fail := func(outcome rcnsv1.GateOutcome, status int, reason, explanation, scope string) (*rcnsv1.GateResponse, error) {
		a.Status, a.Reason, a.Explanation = status, reason, explanation
		id := s.record(ctx, a)
		return &rcnsv1.GateResponse{Outcome: outcome, Status: int32(status), Reason: reason, Explanation: explanation, AttemptId: id, Scope: scope}, nil
	}
	noContract := func(reason, explanation string) (*rcnsv1.GateResponse, error) {
		return fail(rcnsv1.GateOutcome_GATE_OUTCOME_NO_CONTRACT, agtp.StatusRCNSNoContract, reason, explanation, "")
	}
	authz := func(reason, explanation, scope string) (*rcnsv1.GateResponse, error) {
		return fail(rcnsv1.GateOutcome_GATE_OUTCOME_AUTHORIZATION_REQUIRED, agtp.StatusAuthorizationRequired, reason, explanation, scope)
	}

	// Lock 1: RCNS is enabled on this server.
	if !s.opts.RCNS.Enabled {
		a.Locks["rcns_enabled"] = lockClosed
		return noContract(agtp.ReasonRCNSDisabled, "runtime contract negotiation is disabled on this server")
	}
	a.Locks["rcns_enabled"] = lockOpen
	// Lock 3: Authority-Scope grants rcns:negotiate.
	scopes := scopesOf(c)
	if !holds(scopes, s.opts.RCNS.NegotiateScope) {
		a.Locks["scope"] = lockClosed
		return authz(agtp.ReasonScopeRequired, "runtime contract negotiation needs "+s.opts.RCNS.NegotiateScope+" in Authority-Scope", s.opts.RCNS.NegotiateScope)
	}
	a.Locks["scope"] = lockOpen
	// Lock 4: the trust tier (1 is the most trusted).
	if !tierPasses(c.GetTrustTier(), s.opts.RCNS.MinTrustTier) {
		a.Locks["trust_tier"] = lockClosed
		return noContract(agtp.ReasonTrustTierInsufficient, "runtime contract negotiation needs trust tier "+tierText(s.opts.RCNS.MinTrustTier))
	}
	a.Locks["trust_tier"] = lockOpen

	// The negotiation rate limit (§10.1.5): every evaluation that passed
	// the locks counts, so a caller the locks refuse spends nothing and
	// learns which lock is closed before it learns its rate.
	if scope := s.opts.RCNS.RateLimitScope; scope != "" {
		ok, retry, err := s.spend(ctx, scope, c.GetAgentId())
		if err != nil {
			return nil, err
		}
		if !ok {
			return &rcnsv1.GateResponse{Outcome: rcnsv1.GateOutcome_GATE_OUTCOME_RATE_LIMITED, Status: agtp.StatusRateLimited,
				Reason: "rate-limited", Explanation: "too many contract negotiations; retry later", RetryAfterSeconds: retry}, nil
		}
	}

	st, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	pat, instPath := s.matchRequest(method, path)
	if pat == nil {
		return noContract(agtp.ReasonCompositionImpossible, "no composition of this server's endpoints provides "+method+" "+path)
	}
	a.RecipeName = pat.RecipeName
	if pat.MinTrustTier > 0 && !tierPasses(c.GetTrustTier(), pat.MinTrustTier) {
		return noContract(agtp.ReasonTrustTierInsufficient, "this composition is offered to trust tier "+tierText(pat.MinTrustTier))
	}
	if st.data != nil && !allIn(pat.DataClasses, st.data) {
		return noContract(agtp.ReasonCompositionImpossible, "the composition reads data outside this server's data_manifest (AGIS §8.3)")
	}
	if why := composable(st, pat); why != "" {
		return noContract(agtp.ReasonCompositionImpossible, why)
	}
	ev := &evaluation{st: st, caller: c, scopes: scopes}
	if resp := s.credentials(ev, pat.DataClasses); resp != nil {
		cl := pat.DataClasses[0]
		for _, x := range pat.DataClasses {
			if d, ok := st.data[x]; ok && d.RequiresAuthorization {
				cl = x
				break
			}
		}
		return authz(agtp.ReasonCredentialsMissing, "the data class "+cl+" requires authorization (core §7.5.4)", cl+":read")
	}
	needed := union(pat.RequiredScopes, stepScopes(st, pat))
	if missing := uncovered(scopes, needed); len(missing) > 0 {
		return authz(agtp.ReasonScopeRequired, "the composition needs "+strings.Join(missing, ", ")+", which Authority-Scope does not grant (AGTP-API §10.7)", missing[0])
	}

	// A repeated request gets its earlier contract back without a new
	// instantiation; create deduplicates atomically for concurrent ones.
	if old, err := s.existingGateContract(ctx, a.AgentID, method, instPath); err != nil {
		return nil, err
	} else if old != nil {
		return old, nil
	}
	return s.synthesize(ctx, a, pat, instPath, needed, noContract)
}

// existingGateContract answers with a live gate contract of the agent for
// the pair: the same preview (461) while pending, an active one to run.
func (s *Server) existingGateContract(ctx context.Context, agentID, method, path string) (*rcnsv1.GateResponse, error) {
	idx, err := s.agentIndex(ctx, agentID)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	for id, sm := range idx {
		if sm.Origin != originGate || sm.Method != method || sm.Path != path {
			continue
		}
		ct, err := s.load(ctx, id)
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		if ct == nil || ct.rec.AgentID != agentID {
			continue
		}
		if resp, err := s.gateAgain(ctx, ct); resp != nil || err != nil {
			return resp, err
		}
	}
	return nil, nil
}

// gateAgain answers a gate request with a live gate contract of the agent
// for the pair: the preview (461) while pending, the contract to run once
// in force. One whose acceptance is not audited yet is not in force:
// settle decides. It answers nil for a contract that ended.
func (s *Server) gateAgain(ctx context.Context, ct *contract) (*rcnsv1.GateResponse, error) {
	now := s.now().UnixMilli()
	switch ct.effective(now) {
	case statePending:
		if !ct.unaudited() {
			return gateAnswer(rcnsv1.GateOutcome_GATE_OUTCOME_CONFIRM_FIRST, agtp.StatusRCNSContractAvailable, ct, now), nil
		}
		cur, err := s.settle(ctx, ct)
		if err != nil {
			return nil, err
		}
		return gateAnswer(rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC, agtp.StatusOK, cur, s.now().UnixMilli()), nil
	case stateActive:
		return gateAnswer(rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC, agtp.StatusOK, ct, now), nil
	}
	return nil, nil
}

// synthesize instantiates a gate contract: a 461 preview in confirm-first
// mode, an active contract in optimistic mode. A live gate contract of the
// same agent for the same pair is answered again instead of a new one.
func (s *Server) synthesize(ctx context.Context, a *attempt, pat *recipe.Pattern, instPath string, scopes []string,
	noContract func(reason, explanation string) (*rcnsv1.GateResponse, error)) (*rcnsv1.GateResponse, error) {
	ep, err := pat.Instantiate(instPath, scopes)
	if err != nil {
		s.log.ErrorContext(ctx, "pattern does not instantiate", "recipe", pat.RecipeName, "path", instPath, "error", err)
		return noContract(agtp.ReasonSynthesisError, "the composition could not be instantiated for this path")
	}
	now := s.now()
	c := s.newContract(pat, a.AgentID, "", originGate, ep.JSON, now, s.opts.RCNS.ContractTTL)
	optimistic := s.opts.RCNS.Mode == ModeOptimistic
	c.state, c.changedMs = statePending, now.UnixMilli()
	if optimistic {
		// Active, with its acceptance event pending: not in force until
		// the event is audited (contract.unaudited).
		c.state, c.event = stateActive, eventAccepted
	}
	for dedupe := true; ; dedupe = false {
		dup, err := s.create(ctx, c, dedupe)
		if errors.Is(err, errContractLimit) {
			return noContract(agtp.ReasonSynthesisError, "you hold the most live contracts allowed; release one (SUSPEND synthesis_id) first")
		}
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		if dup == "" {
			break
		}
		old, err := s.load(ctx, dup)
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		if old != nil {
			if resp, err := s.gateAgain(ctx, old); resp != nil || err != nil {
				return resp, err
			}
		}
		// The duplicate ended in the meantime: make a new contract.
	}
	if !optimistic {
		return gateAnswer(rcnsv1.GateOutcome_GATE_OUTCOME_CONFIRM_FIRST, agtp.StatusRCNSContractAvailable, c, now.UnixMilli()), nil
	}
	if err := s.emit(ctx, &c.rec, eventAccepted, "", a.AgentID); err != nil {
		s.forget(context.WithoutCancel(ctx), &c.rec, true)
		return nil, err
	}
	if err := s.clearEvent(context.WithoutCancel(ctx), c.rec.SynthesisID, eventAccepted); err != nil {
		s.log.WarnContext(ctx, "contract event flag not cleared; the contract is in force once presented again", "synthesis_id", c.rec.SynthesisID, "error", err)
	}
	c.event = ""
	return gateAnswer(rcnsv1.GateOutcome_GATE_OUTCOME_OPTIMISTIC, agtp.StatusOK, c, now.UnixMilli()), nil
}

func gateAnswer(outcome rcnsv1.GateOutcome, status int, c *contract, nowMs int64) *rcnsv1.GateResponse {
	return &rcnsv1.GateResponse{Outcome: outcome, Status: int32(status), Contract: c.proto(nowMs)}
}

// matchRequest returns the pattern serving a concrete request and the
// path of the endpoint to instantiate.
func (s *Server) matchRequest(method, path string) (*recipe.Pattern, string) {
	var regexPat *recipe.Pattern
	var regexPath string
	for _, pat := range s.pats.Load().list {
		if p, ok := pat.MatchRequest(method, path); ok {
			if pat.PathExact != "" {
				return pat, p
			}
			if regexPat == nil {
				regexPat, regexPath = pat, p
			}
		}
	}
	return regexPat, regexPath
}

func tierText(t int32) string {
	if t == 1 {
		return "1"
	}
	return "1-" + string(rune('0'+t))
}
