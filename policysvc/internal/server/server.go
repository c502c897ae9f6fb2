// Package server implements policyv1.PolicyService: one call that decides
// whether a request may run (Authority-Scope, external credentials, trust
// tier, budget, zone, merchant, rate limits and the idempotency claim), so
// that the front door pays one network hop and, in the common case, one
// Redis round trip per request.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/policysvc/internal/oauth"
	"github.com/agtpsuite/agtp/policysvc/internal/ratelimit"
	"github.com/agtpsuite/agtp/policysvc/internal/taskrun"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/idempotency"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Reasons this service adds to the drafts' vocabularies.
const (
	ReasonRateLimited             = "rate-limited"
	ReasonIdempotencyKeyRequired  = "idempotency-key-required"
	ReasonInvalidIdempotencyKey   = "invalid-idempotency-key"
	ReasonTrustTierInsufficient   = "trust-tier-insufficient"
	ReasonOAuthScopeInsufficient  = "oauth-scope-insufficient"
	ReasonBudgetExceeded          = "budget-exceeded"
	ReasonBudgetLimitRequired     = "budget-limit-required"
	ReasonZoneViolation           = "zone-violation"
	ReasonZoneRequired            = "zone-required"
	ReasonCounterpartyUnverified  = "counterparty-unverified"
	ReasonIdempotencyClaimLost    = "idempotency-claim-lost"
	ReasonPolicyUnavailable       = "policy-unavailable"
	ReasonUnknownRateLimitScope   = "unknown-rate-limit-scope"
	ReasonInvalidPolicyRequest    = "invalid-policy-request"
	ReasonIdempotencyResponseSize = "idempotency-response-too-large"
	// ReasonIdempotencyOutcomeUnknown refuses a retry of a request that
	// ran, or may have run, and whose outcome was not stored.
	ReasonIdempotencyOutcomeUnknown = "idempotency-outcome-unknown"
	// ReasonIdempotencyOutcomeApplied refuses a retry of a request an
	// operator recorded as having taken effect.
	ReasonIdempotencyOutcomeApplied = "idempotency-outcome-applied"
)

// Server is the PolicyService implementation.
type Server struct {
	policyv1.UnimplementedPolicyServiceServer

	rdb redis.UniversalClient
	// gates sends the decisions' rate-limit and claim scripts; concurrent
	// decisions share its pipelines.
	gates *ratelimit.Coalescer
	log   *slog.Logger
	opts  Options
	oauth *oauth.Verifier // nil when OAuth is off

	// endpointNames[i] names the buckets of opts.RateLimits.Endpoints[i].
	endpointNames []string
	costs         []agtp.Budget // parsed opts.Budget.Costs; nil for body-read costs
	// limited is whether any limit applies to decisions; without one and
	// without a claim, a decision plans no Redis work.
	limited bool
	// manifest is the Merchant Manifest Document when the options name a
	// file; nil otherwise.
	manifest *merchantManifest
	// runs indexes requests by Task-ID for RETRY (taskruns.go).
	runs *taskrun.Store
}

// gatePipelines bounds the decisions' pipelines in flight at once; more
// concurrent decisions wait and go out together in the next one.
const gatePipelines = 2

// New returns a Server. It validates opts (after defaults) and, for a JWKS
// file, reads it; it does no Redis I/O.
func New(rdb redis.UniversalClient, log *slog.Logger, opts Options) (*Server, error) {
	if rdb == nil {
		return nil, fmt.Errorf("policy: a Redis client is required")
	}
	if log == nil {
		log = slog.Default()
	}
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	s := &Server{rdb: rdb, gates: ratelimit.NewCoalescer(rdb, gatePipelines), log: log, opts: opts, runs: taskrun.New(rdb, opts.Idempotency.TTL)}
	if opts.OAuth.Enabled() {
		v, err := oauth.New(opts.OAuth, log)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		s.oauth = v
	}
	rl := opts.RateLimits
	s.limited = rl.PerIP.Enabled() || rl.PerPrincipal.Enabled()
	for _, e := range rl.Endpoints {
		s.endpointNames = append(s.endpointNames, "ep:"+hashName(e.Method+" "+e.Path))
		s.limited = s.limited || e.Rate.Enabled()
	}
	for _, r := range rl.Tiers {
		s.limited = s.limited || r.Enabled()
	}
	for _, c := range opts.Budget.Costs {
		var b agtp.Budget
		if !c.fromBody() {
			b, _ = agtp.ParseBudget(c.Cost) // checked by Validate
		}
		s.costs = append(s.costs, b)
	}
	manifest, err := resolveMerchant(&s.opts.Merchant)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	s.manifest = manifest
	return s, nil
}

// Run loads the Lua scripts and keeps the JWKS fresh until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	if err := ratelimit.Load(ctx, s.rdb); err != nil {
		// Not fatal: every call falls back to EVAL when a script is missing.
		s.log.WarnContext(ctx, "could not preload rate-limit scripts", "err", err)
	}
	if s.oauth != nil {
		return s.oauth.Run(ctx)
	}
	<-ctx.Done()
	return nil
}

// Bounds on what the front door may send; beyond them the request is
// malformed (a bug in the caller, not a client error).
const (
	maxIDLen        = 256
	maxScopes       = 256
	maxScopeLen     = 256
	maxPathLen      = 8 << 10
	maxPrincipalLen = 1024
	maxRateKeyLen   = 512
)

func validateRequest(req *policyv1.AuthorizeRequest) error {
	bad := func(what string) error {
		return grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, what)
	}
	switch {
	case req.GetMethod() == "" || len(req.GetMethod()) > 32:
		return bad("method must be 1-32 characters")
	case len(req.GetPathTemplate()) > maxPathLen:
		return bad("path_template is too long")
	case len(req.GetAgentId()) > maxIDLen:
		return bad("agent_id is too long")
	case len(req.GetAgentScopes()) > maxScopes || len(req.GetRequiredScopes()) > maxScopes:
		return bad("too many scopes")
	case len(req.GetClientIp()) > maxIDLen:
		return bad("client_ip is too long")
	case len(req.GetPrincipal()) > maxPrincipalLen:
		return bad("principal is too long")
	case len(req.GetRateTier()) > maxIDLen:
		return bad("rate_tier is too long")
	case req.GetTrustTier() < 0 || req.GetTrustTier() > 3:
		return bad("trust_tier must be 0-3")
	case req.GetIdempotencyKey() != "" && req.GetAgentId() != "" && !idempotency.ValidFingerprint(req.GetRequestFingerprint()):
		return bad("request_fingerprint must be a SHA-256 in 64 lowercase hex digits")
	case len(req.GetInputJson()) > maxInputLen:
		return bad("input_json is larger than 1 MiB")
	case req.GetCallerProofOnly() && (!req.GetTokenProvesAgent() || req.GetAgentId() == ""):
		return bad("caller_proof_only asks whether a token proves agent_id: set token_proves_agent and agent_id")
	}
	if r := req.GetTaskRun(); r != nil {
		if err := taskRunOf(r).Validate(); err != nil {
			return bad("task_run: " + err.Error())
		}
	}
	for _, list := range [][]string{req.GetAgentScopes(), req.GetRequiredScopes()} {
		for _, sc := range list {
			if len(sc) > maxScopeLen {
				return bad("a scope is too long")
			}
		}
	}
	return nil
}

// Authorize decides one request. Denials are answers (DECISION_DENY), not
// errors; errors mean a malformed call or a failed dependency.
func (s *Server) Authorize(ctx context.Context, req *policyv1.AuthorizeRequest) (*policyv1.AuthorizeResponse, error) {
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	if req.GetCallerProofOnly() {
		return s.proveCaller(ctx, req), nil
	}
	resp := &policyv1.AuthorizeResponse{RateLimitRemaining: -1}

	// Local checks first: they decide whether the Redis call may claim the
	// idempotency slot. Rate limits are spent even for requests refused
	// here, so that a caller cannot probe policy without limit.
	denial, acting := s.localChecks(ctx, req, resp)
	if denial != nil && req.GetTokenProvesAgent() && resp.GetTokenIssuer() == "" {
		return s.refuseUnproven(ctx, req, denial), nil
	}

	var claim *ratelimit.Claim
	if denial == nil && req.GetAgentId() != "" && req.GetIdempotencyKey() != "" {
		claim = &ratelimit.Claim{
			Slot:        rediskeys.IdempotencySlot(req.GetAgentId(), req.GetIdempotencyKey()),
			Fingerprint: req.GetRequestFingerprint(),
			Token:       idempotency.NewToken(),
			Lease:       s.opts.Idempotency.Lease,
			// An idempotent endpoint's request may run again whatever
			// became of an earlier one.
			Rerun: req.GetEndpointIdempotent(),
		}
	}
	plan := s.plan(req, acting, claim, true)
	var limited *policyv1.Denial
	var claimRes *ratelimit.Result
	if plan != nil && plan.batch.Len() > 0 {
		// In a batch, the items after this one go on while it waits on
		// Redis, so the batch's scripts share pipelines.
		batchrpc.Blocking(ctx)
		err := s.gates.Exec(ctx, &plan.batch)
		if err == nil {
			limited, claimRes, err = s.settle(ctx, plan, resp)
		}
		if err != nil {
			if denial == nil {
				return nil, s.redisError(ctx, err)
			}
			// The request is refused anyway; say why rather than 503.
			s.log.WarnContext(ctx, "rate limits not counted: redis", "err", err)
		}
	}
	switch {
	case limited != nil:
		denial = limited
	case denial != nil:
	case claim != nil:
		var err error
		denial, err = s.idempotencyOutcome(ctx, claim, claimRes, resp)
		if err != nil {
			return nil, err
		}
	}
	if denial != nil {
		s.logDenial(ctx, req, denial)
		resp.Decision = policyv1.Decision_DECISION_DENY
		resp.Denial = denial
		resp.Claim, resp.ReplayResponse = nil, nil
		resp.MerchantId, resp.MerchantFingerprint = "", ""
		s.indexTaskRun(ctx, req, resp)
		return resp, nil
	}
	if resp.Decision == policyv1.Decision_DECISION_UNSPECIFIED {
		resp.Decision = policyv1.Decision_DECISION_ALLOW
	}
	s.indexTaskRun(ctx, req, resp)
	if s.reusable(req, plan, resp) {
		resp.ReusableForMs = s.opts.DecisionReuse.Milliseconds()
	}
	return resp, nil
}

// proveCaller answers a caller_proof_only request: whether the bearer
// token proves agent_id, and nothing else. A token that proves the agent
// spends, claims and indexes nothing, since the request's own decision
// follows and spends its limits once. A token that proves nothing ends the
// request there, so it spends the shared limits as any refusal does
// (refuseUnproven).
func (s *Server) proveCaller(ctx context.Context, req *policyv1.AuthorizeRequest) *policyv1.AuthorizeResponse {
	resp := &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_ALLOW, RateLimitRemaining: -1}
	if _, denial := s.checkCredential(ctx, req, resp); denial != nil {
		return s.refuseUnproven(ctx, req, denial)
	}
	return resp
}

// refuseUnproven answers a request whose bearer token did not prove the
// agent it names (401). Nothing of that agent's is touched on the caller's
// behalf: not its own buckets, an idempotency claim or the task index. The
// limits that are not the agent's are spent as for any refused request
// (docs/policy.md, "One decision"), so that one address cannot send
// unlimited bad tokens, each costing a signature check: the client
// address's and the shared endpoint's; not the principal's, since the
// owner the request names is the unproven agent's. A refusal by one of
// them answers 429 instead of the 401, as elsewhere.
func (s *Server) refuseUnproven(ctx context.Context, req *policyv1.AuthorizeRequest, denial *policyv1.Denial) *policyv1.AuthorizeResponse {
	if p := s.plan(req, "", nil, false); p != nil && p.batch.Len() > 0 {
		batchrpc.Blocking(ctx)
		err := s.gates.Exec(ctx, &p.batch)
		var limited *policyv1.Denial
		if err == nil {
			limited, _, err = s.settle(ctx, p, &policyv1.AuthorizeResponse{RateLimitRemaining: -1})
		}
		switch {
		case err != nil:
			// The request is refused anyway; say why rather than 503.
			s.log.WarnContext(ctx, "rate limits not counted: redis", "err", err)
		case limited != nil:
			denial = limited
		}
	}
	s.logDenial(ctx, req, denial)
	return &policyv1.AuthorizeResponse{Decision: policyv1.Decision_DECISION_DENY, Denial: denial}
}

// reusable reports whether resp may answer identical requests for
// Options.DecisionReuse: an ALLOW that depended on the request and the
// options alone. What counts or claims per request (a rate-limit bucket,
// an idempotency slot) is in the plan's Redis work; what records per
// request (a task-run index entry), checks what can change under the same
// request (a bearer token, which expires and is revoked) or reads the body
// for a cost is named by the request. Options change only with a restart,
// and a restart's decisions replace the old ones within DecisionReuse.
func (s *Server) reusable(req *policyv1.AuthorizeRequest, p *plan, resp *policyv1.AuthorizeResponse) bool {
	switch {
	case s.opts.DecisionReuse <= 0, resp.GetDecision() != policyv1.Decision_DECISION_ALLOW:
		return false
	case p != nil && p.batch.Len() > 0:
		return false
	case req.GetIdempotencyKey() != "", req.GetAuthorization() != "", req.GetTaskRun() != nil, len(req.GetInputJson()) > 0:
		return false
	}
	return true
}

// gate is one script call of a decision and what its buckets limit.
type gate struct {
	call   *ratelimit.Call
	labels []string
	rates  []ratelimit.Rate
	claim  bool
}

type plan struct {
	batch ratelimit.Batch
	gates []gate
	// Backing arrays for what a typical decision plans (the caller's own
	// gate with a bucket or two, and up to three shared limits), so that
	// planning costs the plan alone; more grows on the heap as usual.
	gateBuf     [4]gate
	mineLabels  [2]string
	mineRates   [2]ratelimit.Rate
	mineBuckets [2]ratelimit.Bucket
	shared      int // shared gates placed so far
	sharedLabel [3]string
	sharedRate  [3]ratelimit.Rate
	sharedBkt   [3]ratelimit.Bucket
}

// plan groups the buckets of a request by hash slot: the caller's own
// buckets and its idempotency slot share the agent's tag and go into one
// script; each shared limit (endpoint, address, principal) is its own call
// in the same pipeline. With proven false (the caller did not prove the
// agent it names) only the address's and the shared endpoints' limits are
// planned: the agent's own buckets and its owner's are not the caller's to
// spend. It is nil when there is nothing to send, with no allocation.
func (s *Server) plan(req *policyv1.AuthorizeRequest, acting string, claim *ratelimit.Claim, proven bool) *plan {
	if claim == nil && !s.limited {
		return nil
	}
	p := &plan{}
	p.gates = p.gateBuf[:0]
	rl := s.opts.RateLimits
	agent, ip := req.GetAgentId(), req.GetClientIp()
	if ip == "" {
		ip = "unknown"
	}
	own := func(name string) string {
		if agent == "" {
			return rediskeys.AnonymousRateLimit(ip, name)
		}
		return rediskeys.AgentRateLimit(agent, name)
	}

	mine := gate{labels: p.mineLabels[:0], rates: p.mineRates[:0]}
	buckets := p.mineBuckets[:0]
	add := func(g *gate, bs *[]ratelimit.Bucket, key, label string, r ratelimit.Rate) {
		*bs = append(*bs, ratelimit.Bucket{Key: key, Rate: r, Cost: 1})
		g.labels = append(g.labels, label)
		g.rates = append(g.rates, r)
	}
	if r, ok := s.tierRate(req); ok && proven {
		add(&mine, &buckets, own("tier"), "agent", r)
	}
	for i, e := range rl.Endpoints {
		if proven && e.PerAgent && e.Rate.Enabled() && e.matches(req.GetMethod(), req.GetPathTemplate()) {
			add(&mine, &buckets, own(s.endpointNames[i]), "agent-endpoint", e.Rate)
		}
	}
	if len(buckets) > 0 || claim != nil {
		mine.call = p.batch.Gate(buckets, claim)
		mine.claim = claim != nil
		p.gates = append(p.gates, mine)
	}
	shared := func(key, label string, r ratelimit.Rate) {
		bucket := ratelimit.Bucket{Key: key, Rate: r, Cost: 1}
		var g gate
		var bs []ratelimit.Bucket
		if i := p.shared; i < len(p.sharedBkt) {
			p.sharedLabel[i], p.sharedRate[i], p.sharedBkt[i] = label, r, bucket
			g.labels, g.rates, bs = p.sharedLabel[i:i+1:i+1], p.sharedRate[i:i+1:i+1], p.sharedBkt[i:i+1:i+1]
			p.shared++
		} else {
			g.labels, g.rates, bs = []string{label}, []ratelimit.Rate{r}, []ratelimit.Bucket{bucket}
		}
		g.call = p.batch.Gate(bs, nil)
		p.gates = append(p.gates, g)
	}
	for i, e := range rl.Endpoints {
		if !e.PerAgent && e.Rate.Enabled() && e.matches(req.GetMethod(), req.GetPathTemplate()) {
			shared(rediskeys.RateLimit("endpoint", s.endpointNames[i]), "endpoint", e.Rate)
		}
	}
	if rl.PerIP.Enabled() {
		shared(rediskeys.RateLimit("ip", subject(ip)), "ip", rl.PerIP)
	}
	principal := req.GetPrincipal()
	if principal == "" && acting != "" {
		principal = "oauth:" + acting
	}
	if rl.PerPrincipal.Enabled() && principal != "" && proven {
		shared(rediskeys.RateLimit("principal", subject(principal)), "principal", rl.PerPrincipal)
	}
	return p
}

// tierRate picks the caller's per-agent rate.
func (s *Server) tierRate(req *policyv1.AuthorizeRequest) (ratelimit.Rate, bool) {
	tiers := s.opts.RateLimits.Tiers
	if len(tiers) == 0 {
		return ratelimit.Rate{}, false
	}
	if req.GetAgentId() == "" {
		r, ok := tiers["anonymous"]
		return r, ok && r.Enabled()
	}
	if r, ok := tiers[req.GetRateTier()]; ok && req.GetRateTier() != "" {
		return r, r.Enabled()
	}
	if t := req.GetTrustTier(); t > 0 {
		if r, ok := tiers["trust-tier-"+strconv.Itoa(int(t))]; ok {
			return r, r.Enabled()
		}
	}
	r, ok := tiers["default"]
	return r, ok && r.Enabled()
}

// settle reads the gate results. If any limit refused, it refunds the calls
// that spent (releasing a claim one of them made) and returns the 429.
// Otherwise it fills in the rate-limit fields of resp and returns the claim
// outcome, if a claim was made.
func (s *Server) settle(ctx context.Context, p *plan, resp *policyv1.AuthorizeResponse) (*policyv1.Denial, *ratelimit.Result, error) {
	var refused *policyv1.Denial
	var spentBuf [4]*ratelimit.Call
	spent := spentBuf[:0]
	var claimRes *ratelimit.Result
	var resetMax time.Duration
	for i := range p.gates {
		g := &p.gates[i]
		r, err := g.call.Result()
		if err != nil {
			return nil, nil, err
		}
		if !r.Allowed {
			if refused == nil || ratelimit.Seconds(r.RetryAfter) > refused.RetryAfterSeconds {
				refused = rateDenial(g.labels[r.Refused], r.RetryAfter)
			}
			continue
		}
		spent = append(spent, g.call)
		if g.claim {
			// A copy, so that only a claim's result goes to the heap.
			res := r
			claimRes = &res
		}
		if r.Remaining >= 0 && (resp.RateLimitRemaining < 0 || r.Remaining < resp.RateLimitRemaining) {
			resp.RateLimitRemaining = r.Remaining
			resp.RateLimitLimit = g.rates[r.Tightest].Limit
		}
		resetMax = max(resetMax, r.Reset)
	}
	if refused != nil {
		var refunds ratelimit.Batch
		for _, c := range spent {
			refunds.Refund(c)
		}
		batchrpc.Blocking(ctx)
		if err := refunds.Exec(ctx, s.rdb); err != nil {
			// The refusal stands; a failed refund only over-counts.
			s.log.WarnContext(ctx, "rate-limit refund failed", "err", err)
		}
		return refused, nil, nil
	}
	resp.RateLimitResetSeconds = ratelimit.Seconds(resetMax)
	return nil, claimRes, nil
}

func rateDenial(label string, retry time.Duration) *policyv1.Denial {
	secs := ratelimit.Seconds(retry)
	return &policyv1.Denial{
		Status:            agtp.StatusRateLimited,
		Reason:            ReasonRateLimited,
		Explanation:       fmt.Sprintf("too many requests (%s limit); retry after %d s", label, secs),
		RetryAfterSeconds: secs,
		Details: map[string]string{
			"limit":               label,
			"retry_after_seconds": strconv.FormatInt(secs, 10),
			"retry_at":            time.Now().Add(retry).UTC().Format(time.RFC3339),
		},
	}
}

// idempotencyOutcome turns the claim result into the decision.
func (s *Server) idempotencyOutcome(ctx context.Context, claim *ratelimit.Claim, res *ratelimit.Result, resp *policyv1.AuthorizeResponse) (*policyv1.Denial, error) {
	if res == nil || !res.Claimed {
		return nil, grpcerr.Internal(fmt.Errorf("policy: the gate script returned no claim outcome"))
	}
	out := res.Claim
	if out.Outcome == idempotency.InFlight {
		if s.opts.Idempotency.MaxWait > 0 {
			batchrpc.Blocking(ctx)
			var err error
			out, err = idempotency.Wait(ctx, s.rdb, claim.Slot, claim.Fingerprint, claim.Token, idempotency.WaitOptions{
				MaxWait: s.opts.Idempotency.MaxWait, Lease: claim.Lease, Rerun: claim.Rerun,
			})
			if err != nil {
				return nil, s.redisError(ctx, err)
			}
		}
	}
	switch out.Outcome {
	case idempotency.Claimed:
		resp.Claim = &policyv1.IdempotencyClaim{
			Slot:         claim.Slot,
			Token:        claim.Token,
			TtlSeconds:   int64(s.opts.Idempotency.TTL / time.Second),
			LeaseSeconds: ratelimit.Seconds(claim.Lease),
			Fingerprint:  claim.Fingerprint,
		}
		resp.Decision = policyv1.Decision_DECISION_ALLOW
	case idempotency.Replay:
		resp.ReplayResponse = out.Response
		resp.Decision = policyv1.Decision_DECISION_REPLAY
	case idempotency.Reused:
		return &policyv1.Denial{
			Status:      agtp.StatusConflict,
			Reason:      agtp.ReasonIdempotencyKeyReused,
			Explanation: "this Idempotency-Key was already used by this agent with a different request",
		}, nil
	case idempotency.Unknown:
		return &policyv1.Denial{
			Status: agtp.StatusConflict,
			Reason: ReasonIdempotencyOutcomeUnknown,
			Explanation: "the request sent earlier with this Idempotency-Key ran, or may have run, but its outcome was not recorded, " +
				"so it is not run again: check whether it took effect (read the resource it changes), then send it with a new " +
				"Idempotency-Key to run it again, or ask the server's operator to resolve this key",
			Details: map[string]string{"outcome": idempotency.StateUnknown},
		}, nil
	case idempotency.Applied:
		return &policyv1.Denial{
			Status: agtp.StatusConflict,
			Reason: ReasonIdempotencyOutcomeApplied,
			Explanation: "the server's operator recorded that the request sent earlier with this Idempotency-Key took effect; " +
				"its response is not available: read the resource it changed, and use a new Idempotency-Key for a new request",
			Details: map[string]string{"outcome": idempotency.StateApplied},
		}, nil
	default:
		return &policyv1.Denial{
			Status:            agtp.StatusConflict,
			Reason:            agtp.ReasonIdempotencyInFlight,
			Explanation:       "a request with this Idempotency-Key is still running; retry later",
			RetryAfterSeconds: 1,
		}, nil
	}
	return nil, nil
}

func (s *Server) redisError(ctx context.Context, err error) error {
	if e := grpcerr.FromContext(ctx.Err()); e != nil {
		return e
	}
	s.log.ErrorContext(ctx, "policy decision failed: redis", "err", err)
	return grpcerr.Unavailable(ReasonPolicyUnavailable, "the policy store is unavailable")
}

// logDenial logs refusals. AGTP-specific codes are operational signals
// that must be logged (core §5.6); rate-limit refusals go to debug so a
// flood does not become a log flood. The Authorization value never is.
func (s *Server) logDenial(ctx context.Context, req *policyv1.AuthorizeRequest, d *policyv1.Denial) {
	level := slog.LevelInfo
	if d.Status == agtp.StatusRateLimited {
		level = slog.LevelDebug
	}
	s.log.Log(ctx, level, "request refused by policy",
		"status", d.GetStatus(), "reason", d.GetReason(),
		"agent_id", req.GetAgentId(), "principal", req.GetPrincipal(),
		"method", req.GetMethod(), "path", req.GetPathTemplate(), "client_ip", req.GetClientIp())
}

// CompleteIdempotency stores the outcome of a claimed request.
func (s *Server) CompleteIdempotency(ctx context.Context, req *policyv1.CompleteIdempotencyRequest) (*policyv1.CompleteIdempotencyResponse, error) {
	if err := validateClaim(req.GetClaim()); err != nil {
		return nil, err
	}
	if len(req.GetResponse()) > s.opts.Idempotency.MaxResponseBytes {
		return nil, grpcerr.InvalidArgument(ReasonIdempotencyResponseSize,
			fmt.Sprintf("the response exceeds %d bytes", s.opts.Idempotency.MaxResponseBytes))
	}
	ok, err := idempotency.Complete(ctx, s.rdb, req.GetClaim().GetSlot(), req.GetClaim().GetToken(), req.GetResponse(), s.opts.Idempotency.TTL)
	if err != nil {
		return nil, s.redisError(ctx, err)
	}
	if !ok {
		return nil, grpcerr.Conflict(ReasonIdempotencyClaimLost, "the claim was released or lapsed; the response was not stored")
	}
	return &policyv1.CompleteIdempotencyResponse{}, nil
}

// ReleaseIdempotency drops a claim; releasing a claim that is already gone
// succeeds, so callers may retry it.
func (s *Server) ReleaseIdempotency(ctx context.Context, req *policyv1.ReleaseIdempotencyRequest) (*policyv1.ReleaseIdempotencyResponse, error) {
	if err := validateClaim(req.GetClaim()); err != nil {
		return nil, err
	}
	if _, err := idempotency.Release(ctx, s.rdb, req.GetClaim().GetSlot(), req.GetClaim().GetToken()); err != nil {
		return nil, s.redisError(ctx, err)
	}
	return &policyv1.ReleaseIdempotencyResponse{}, nil
}

// validateClaim makes sure a claim names an idempotency slot, so that these
// RPCs cannot be used to write arbitrary Redis keys.
func validateClaim(c *policyv1.IdempotencyClaim) error {
	slot := c.GetSlot()
	const marker = "}:idem:"
	i := strings.Index(slot, marker)
	ok := len(slot) <= rediskeysMaxSlotLen &&
		strings.HasPrefix(slot, rediskeys.Prefix+"{") && i > 0 &&
		idempotency.ValidFingerprint(slot[i+len(marker):]) &&
		len(c.GetToken()) == 32 && isHex(c.GetToken()) &&
		(c.GetFingerprint() == "" || idempotency.ValidFingerprint(c.GetFingerprint()))
	if !ok {
		return grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "claim must be one Authorize returned")
	}
	return nil
}

const rediskeysMaxSlotLen = 512

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckRateLimit spends from a named limit: "rcns" counts RCNS gate
// evaluations per agent (AGTP-API §10.1.5); the caller answers a refusal
// with 429 and "scope": "rcns" in the body.
func (s *Server) CheckRateLimit(ctx context.Context, req *policyv1.CheckRateLimitRequest) (*policyv1.CheckRateLimitResponse, error) {
	rate, ok := s.opts.RateLimits.Named[req.GetScope()]
	if !ok {
		return nil, grpcerr.InvalidArgument(ReasonUnknownRateLimitScope, "no rate limit is configured for scope "+strconv.Quote(req.GetScope()))
	}
	if req.GetKey() == "" || len(req.GetKey()) > maxRateKeyLen {
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "key must be 1-512 bytes")
	}
	cost := max(req.GetCost(), 1)
	if cost > rate.BurstSize() {
		return nil, grpcerr.InvalidArgument(ReasonInvalidPolicyRequest, "cost exceeds the limit's burst")
	}
	r, err := ratelimit.Spend(ctx, s.rdb, ratelimit.Bucket{Key: rediskeys.RateLimit(req.GetScope(), subject(req.GetKey())), Rate: rate, Cost: cost})
	if err != nil {
		return nil, s.redisError(ctx, err)
	}
	if !r.Allowed {
		return &policyv1.CheckRateLimitResponse{RetryAfterSeconds: ratelimit.Seconds(r.RetryAfter)}, nil
	}
	return &policyv1.CheckRateLimitResponse{Allowed: true, Remaining: r.Remaining}, nil
}

// subject makes a caller-influenced value safe inside a hash-tagged key:
// kept readable when short and free of braces, hashed otherwise.
func subject(v string) string {
	if len(v) <= 128 && !strings.ContainsAny(v, "{}") {
		return v
	}
	return "h:" + hashName(v)
}

func hashName(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}
