package server

import (
	"context"
	"fmt"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Propose evaluates PROPOSE (core §7.2.7, §7.5; AGTP-API §10.4-§10.8) in the
// order of AGTP-API §10.6 (docs/rcns.md, "PROPOSE"). The answer is a
// ProposeResponse whose status and body_json the front door sends as they
// are; gRPC errors mean the front door's request was malformed or a
// dependency failed.
func (s *Server) Propose(ctx context.Context, req *rcnsv1.ProposeRequest) (*rcnsv1.ProposeResponse, error) {
	c := req.GetCaller()
	if !validAgentID(c.GetAgentId()) {
		return nil, grpcerr.InvalidArgument("caller-required", "PROPOSE needs the caller's canonical Agent-ID")
	}
	negID := canonicalUUID(req.GetNegotiationId())
	//lint:ignore SA1019 the first release's front door sends the parameters only as bytes
	params := jsondoc.PreferString(req.GetParameters(), req.GetParametersJson())
	if len(params) > s.opts.Propose.MaxBodyBytes {
		return invalid(agtp.StatusBadRequest, negID, agtp.ReasonBodyTooLarge, fmt.Sprintf("the PROPOSE parameters exceed %d bytes", s.opts.Propose.MaxBodyBytes), nil), nil
	}
	st, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	// Step 0: the switch, then the body's shape.
	if !st.policies.GetSynthesisEnabled() {
		return rejected(negID, agtp.ReasonSynthesisDisabled, "this server does not synthesize endpoints (policies.synthesis_enabled is false)", nil), nil
	}
	p, berr := parseProposal(params)
	if berr != nil {
		return invalid(agtp.StatusBadRequest, negID, berr.reason, berr.explanation, nil), nil
	}
	if resp, err := s.limit(ctx, s.opts.Propose.RateLimitScope, "propose:"+c.GetAgentId(), negID); resp != nil || err != nil {
		return resp, err
	}
	// Turns (core §7.4.1): the server mints the Negotiation-ID on the first
	// turn and allows MaxTurns per ID; then the agent must ESCALATE.
	if negID == "" {
		negID = newUUID()
	}
	turn, err := s.turn(ctx, c.GetAgentId(), negID)
	if err != nil {
		return nil, err
	}
	if turn > int64(s.opts.Propose.MaxTurns) {
		return rejected(negID, agtp.ReasonPolicyRefused,
			fmt.Sprintf("this negotiation has used its %d turns; ESCALATE instead of proposing again (core §7.4.1)", s.opts.Propose.MaxTurns),
			map[string]any{"escalate": true, "turn": turn, "max_turns": s.opts.Propose.MaxTurns}), nil
	}
	sessionID := c.GetSessionId()
	if sessionID == "" {
		sessionID = p.sessionID
	}
	ev := &evaluation{st: st, caller: c, scopes: scopesOf(c), p: p, negID: negID, turn: int(turn), sessionID: sessionID}
	return s.evaluateMaybeAsync(ctx, ev)
}

// limit spends one unit of a policysvc named limit; a refusal is 429 with
// scope rcns (AGTP-API §10.1.5). The limiter failing refuses too: an
// unlimited negotiation is what the limit exists to prevent.
func (s *Server) limit(ctx context.Context, scope, key, negID string) (*rcnsv1.ProposeResponse, error) {
	if scope == "" {
		return nil, nil
	}
	ok, retry, err := s.spend(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	if ok {
		return nil, nil
	}
	return answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_RATE_LIMITED, agtp.StatusRateLimited, negID,
		failBody("rate-limited", "too many negotiations; retry later", map[string]any{"scope": "rcns", "retry_after_seconds": retry})), nil
}

func (s *Server) spend(ctx context.Context, scope, key string) (allowed bool, retryAfter int64, err error) {
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	defer cancel()
	r, err := s.policy.CheckRateLimit(pctx, &policyv1.CheckRateLimitRequest{Scope: scope, Key: key, Cost: 1})
	if err != nil {
		s.log.WarnContext(ctx, "rcns rate limit unavailable", "error", err)
		return false, 0, grpcerr.Unavailable("policy-unavailable", "the negotiation rate limit could not be checked; retry")
	}
	return r.GetAllowed(), max(r.GetRetryAfterSeconds(), 1), nil
}

func (s *Server) turn(ctx context.Context, agentID, negID string) (int64, error) {
	key := rediskeys.RCNSNegotiation(agentID, negID)
	pipe := s.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.PExpire(ctx, key, s.opts.Propose.NegotiationTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, grpcerr.Internal(fmt.Errorf("negotiation turn: %w", err))
	}
	return incr.Val(), nil
}
