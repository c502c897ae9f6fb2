package pipeline

import (
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// contractEligible says whether an unmatched request goes to the contract
// route: the path is unknown (404) or known only under other methods (405
// from the registry, not from method policy, which a contract cannot
// override), and the request presents a contract, asks for RCNS
// (Allow-RCNS: true, answered 464 rcns-disabled when this front door has
// no rcnssvc) or names a session, in which a PROPOSE result may be
// callable.
func (p *Pipeline) contractEligible(x *exchange) bool {
	switch x.decision.Outcome {
	case route.NotFound:
	case route.MethodNotAllowed:
		if x.decision.Reason != route.ReasonMethodNotAllowed {
			return false
		}
	default:
		return false
	}
	if allowsRCNS(x) {
		return true
	}
	if p.RCNS == nil {
		return false
	}
	_, presented := x.req.Header.Lookup(agtp.HeaderContractSynthesized)
	_, session := x.req.Header.Lookup(agtp.HeaderSessionID)
	return presented || session
}

// allowsRCNS reports lock 2 of the four-lock gate: Allow-RCNS: true, any
// other value counting as absent (AGTP-API §10.1.2).
func allowsRCNS(x *exchange) bool {
	return strings.EqualFold(x.req.Header.Get(agtp.HeaderAllowRCNS), "true")
}

// contractRoute serves an unregistered (method, path) through RCNS
// (AGTP-API §10.1): a contract presented with Contract-Synthesized, the
// caller's active contract for the pair, or the four-lock gate when the
// caller sent Allow-RCNS: true. When no contract applies the structural
// answer stands.
func (p *Pipeline) contractRoute(x *exchange) *agtp.Response {
	presented, hasPresented := x.req.Header.Lookup(agtp.HeaderContractSynthesized)
	allow := allowsRCNS(x)
	if p.RCNS == nil {
		// Only Allow-RCNS gets here without rcnssvc: lock 1 is closed,
		// and the caller asked to learn it (lock 2 first,
		// docs/decisions.md#D-rcns-gate-order).
		return p.rcnsGate(x)
	}
	if !hasPresented && !allow {
		return p.implicitContract(x)
	}
	// A contract presented or asked for needs a proven caller: it is
	// bound to one (AGTP-API §10.1.4).
	if resp := p.identify(x, false); resp != nil {
		return resp
	}
	if resp := p.settleTokenNow(x); resp != nil {
		return resp
	}
	if x.agentID == "" {
		if x.proof.IgnoredClaim != "" {
			return x.fail(agtp.StatusUnauthorized, callerpolicy.ReasonAgentUnauthenticated,
				"a contract is bound to a proven caller, and the bearer token proves no agent: present your Agent Certificate or a valid token naming your Agent-ID", nil)
		}
		return p.structuralFailure(x)
	}
	in := &rcnsv1.GetContractRequest{Caller: p.rcnsCaller(x), Method: x.req.Method, Path: x.req.Path}
	if hasPresented {
		in.SynthesisId = presented
	}
	r, err := p.RCNS.GetContract(x.ctx, in)
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	switch {
	case r.GetStatus() == 0 && r.GetContract() != nil:
		return p.runContract(x, r.GetContract())
	case hasPresented:
		return p.contractRefused(x, presented, r)
	case allow:
		return p.rcnsGate(x)
	}
	return p.structuralFailure(x)
}

// implicitContract looks for the caller's own active contract for the pair
// (docs/decisions.md#D-contract-resolution) on behalf of a request that
// names a session but neither presents a contract nor asks for RCNS, so
// that a PROPOSE result is callable at once in its session (AGTP-API
// §10.8, api assertion 88). The lookup can only replace the structural
// answer with the contract's: a caller that cannot be identified, or an
// identitysvc or rcnssvc that does not answer, leaves the 404 or 405
// standing (docs/decisions.md#D-decision-order).
func (p *Pipeline) implicitContract(x *exchange) *agtp.Response {
	if resp := p.identify(x, true); resp != nil || x.agentID == "" {
		x.forgetCaller(callerproof.Proof{})
		return p.structuralFailure(x)
	}
	if resp := p.settleTokenNow(x); resp != nil || x.agentID == "" {
		x.forgetCaller(callerproof.Proof{})
		return p.structuralFailure(x)
	}
	r, err := p.RCNS.GetContract(x.ctx, &rcnsv1.GetContractRequest{Caller: p.rcnsCaller(x), Method: x.req.Method, Path: x.req.Path})
	if err != nil {
		p.Log.WarnContext(x.ctx, "contract lookup failed; the structural answer stands", "method", x.req.Method, "error", err)
		return p.structuralFailure(x)
	}
	if r.GetStatus() == 0 && r.GetContract() != nil {
		return p.runContract(x, r.GetContract())
	}
	return p.structuralFailure(x)
}

// contractRefused answers a presented contract rcnssvc did not resolve.
func (p *Pipeline) contractRefused(x *exchange, presented string, r *rcnsv1.GetContractResponse) *agtp.Response {
	extra := map[string]any{}
	if r.GetStatus() == agtp.StatusRCNSNoContract {
		extra["synthesis_id"] = presented
	}
	reason, explanation := r.GetReason(), r.GetExplanation()
	if reason == "" {
		reason = "contract-not-found"
	}
	if explanation == "" {
		explanation = "no usable contract with that synthesis_id"
	}
	status := int(r.GetStatus())
	if status == 0 {
		status = agtp.StatusNotFound
	}
	if status == agtp.StatusMethodNotAllowed {
		// The contract is for another method on this path: the 405 body
		// AGTP-API §11 requires, naming the contract's method with the
		// registry's.
		allowed := slices.Clone(x.decision.AllowedMethods)
		if m := r.GetContract().GetMethod(); m != "" && !slices.Contains(allowed, m) {
			allowed = append(allowed, m)
		}
		redirects := x.decision.Redirects
		if redirects == nil {
			redirects = map[string]string{}
		}
		extra["method"], extra["path"] = x.req.Method, x.req.Path
		extra["allowed_methods_for_path"], extra["redirects_for_path"] = allowed, redirects
	}
	resp := x.fail(status, reason, explanation, extra)
	if r.GetAttemptId() != "" {
		resp.Header.Set(agtp.HeaderRCNSAttemptID, r.GetAttemptId())
	}
	return resp
}

// settleTokenNow has policysvc check a pending bearer token before
// anything acts for the agent it names. Everywhere else the authorize
// stage checks it, but the contract route asks rcnssvc for the caller
// first (a gate that spends the caller's negotiation limit and contract
// slots, a presented contract it accepts), so the proof alone is asked
// for here (caller_proof_only: nothing counted or claimed, so that the
// contract's own decision spends the request's limits once, as for a
// caller proven by certificate): a token that proves nothing leaves the
// caller anonymous (settleTokenProof). A policysvc that does not answer
// is the dependency failure it is everywhere.
func (p *Pipeline) settleTokenNow(x *exchange) *agtp.Response {
	if !x.tokenPending {
		return nil
	}
	in := callerAuthorize(x, x.req.Method, x.req.Path)
	in.Authorization = x.req.Header.Get(agtp.HeaderAuthorization)
	in.TokenProvesAgent, in.CallerProofOnly = true, true
	out, err := p.Policy.Authorize(x.ctx, in)
	if err != nil {
		return p.dependencyFailure(x, "policysvc", err)
	}
	if resp := p.settleTokenProof(x, out); resp != nil {
		return resp
	}
	if d := out.GetDenial(); d.GetStatus() == agtp.StatusRateLimited {
		// A token that proved nothing still spends the address's limits;
		// past them the answer is the 429, as on every other route.
		return denied(x, d)
	}
	return nil
}

// rcnsGate handles an unregistered (method, path) from a caller that sent
// Allow-RCNS: true (AGTP-API §10.1).
func (p *Pipeline) rcnsGate(x *exchange) *agtp.Response {
	if p.RCNS == nil {
		resp := x.fail(agtp.StatusRCNSNoContract, "rcns-disabled", "this server does not run runtime contract negotiation", nil)
		resp.Header.Set(agtp.HeaderRCNSAttemptID, answer.NewID())
		return resp
	}
	r, err := p.RCNS.Gate(x.ctx, &rcnsv1.GateRequest{Caller: p.rcnsCaller(x), Method: x.req.Method, Path: x.req.Path})
	if err != nil {
		return p.dependencyFailure(x, "rcnssvc", err)
	}
	switch r.GetOutcome() {
	case rcnsv1.GateOutcome_GATE_OUTCOME_CONFIRM_FIRST:
		c := r.GetContract()
		preview := builtin.ContractJSON(c)
		//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
		preview["endpoint"] = json.RawMessage(orNull(jsondoc.PreferString(c.GetEndpoint(), c.GetEndpointJson())))
		resp, err := answer.JSON(agtp.StatusRCNSContractAvailable, agtp.MediaTypeJSON, preview)
		if err != nil {
			return x.fail(agtp.StatusServerError, "internal", "the response could not be encoded", nil)
		}
		return resp
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

// runContract serves a request with a synthesized contract: the contract's
// endpoint definition validates the input and gates scopes and
// idempotency like any endpoint, and its recipe runs each step through
// this front door's handlers as the same caller.
func (p *Pipeline) runContract(x *exchange, c *rcnsv1.Contract) *agtp.Response {
	x.synthesisID, x.contractHash, x.negotiationOrigin = c.GetSynthesisId(), c.GetContractHash(), c.GetNegotiationOrigin()
	//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
	ep, err := p.contracts.get(jsondoc.PreferString(c.GetEndpoint(), c.GetEndpointJson()))
	if err != nil {
		p.Log.ErrorContext(x.ctx, "contract endpoint does not compile", "synthesis_id", c.GetSynthesisId(), "error", err)
		return x.fail(agtp.StatusServerError, "synthesis-error", "the contract's endpoint definition is unusable", nil)
	}
	var rc recipe.Recipe
	//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
	if err := json.Unmarshal(jsondoc.PreferString(c.GetRecipe(), c.GetRecipeJson()), &rc); err != nil || len(rc.Steps) == 0 {
		return x.fail(agtp.StatusServerError, "synthesis-error", "the contract has no runnable recipe", nil)
	}
	values, ok := recipe.MatchPath(c.GetPath(), x.req.Path)
	if !ok {
		return x.fail(agtp.StatusNotFound, "contract-path-mismatch", "the request path does not match the contract's path "+c.GetPath(), nil)
	}
	params := make([]route.Param, 0, len(values))
	for k, v := range values {
		params = append(params, route.Param{Name: k, Value: v})
	}
	input, resp := p.buildInput(x, ep, params)
	if resp != nil {
		return resp
	}
	b, _ := json.Marshal(input)
	if resp := p.authorize(x, ep.Proto(catalogv1.EndpointTier_ENDPOINT_TIER_C), x.req.Method, b); resp != nil {
		return resp
	}
	if x.replayed {
		return p.replay(x)
	}
	if p.Bindings == nil || p.Bindings.Compositions == nil {
		return x.fail(agtp.StatusNotImplemented, "handler-kind-unsupported", "this front door runs no composition handlers", nil)
	}
	// The recipe runs like any composition endpoint: each step a request
	// of its own through the pipeline, recorded on the caller's chain and
	// named in this record's prior_actions.
	x.dispatched = true
	res, err := p.Bindings.Compositions.RunRecipe(x.ctx, &rc, p.handlerCall(x, x.req.Method, x.req.Path, c.GetPath(), b, values), &bindingInvoker{p: p, x: x})
	if res != nil {
		x.priors = append(x.priors, res.PriorActions...)
	}
	if err != nil {
		x.transient = bindings.IsTransient(err)
		var he *handler.Error
		if errors.As(err, &he) {
			return namedError(x, he)
		}
		p.Log.ErrorContext(x.ctx, "contract composition failed", "synthesis_id", c.GetSynthesisId(), "error", err)
		return x.fail(agtp.StatusServerError, "synthesis-error", "the composition failed", nil)
	}
	out, err := answer.DecodeJSON(res.Output)
	if err != nil {
		return x.fail(agtp.StatusServerError, "output-invalid", "the composition produced an invalid result", nil)
	}
	if report := ep.ValidateOutput(out); report != nil {
		p.Log.ErrorContext(x.ctx, "composition output does not match the contract's output schema", "violations", report.Error())
		return x.fail(agtp.StatusServerError, "output-invalid", "the composition produced a result that does not match the contract's output schema", nil)
	}
	return envelope(x, agtp.StatusOK, res.Output)
}

func (p *Pipeline) rcnsCaller(x *exchange) *rcnsv1.Caller {
	return &rcnsv1.Caller{
		AgentId:   x.agentID,
		SessionId: x.req.Header.Get(agtp.HeaderSessionID),
		Scopes:    p.effectiveScopes(x),
		TrustTier: x.caller.GetTrustTier(),
	}
}

// newContractCache holds the compiled endpoints of the contracts a
// pipeline ran lately, so that a contract's endpoint is compiled on its
// first call rather than on every one. The key is the SHA-256 of the
// definition: compiling is a function of those bytes alone, so an entry
// can never be stale, and a contract whose definition changes is a new
// key. An entry's weight is its definition's size (a compiled schema
// holds about 200 times its JSON), and the cache holds at most
// contractCacheEntries entries and contractCacheBytes of definitions,
// dropping the least recently used.
func newContractCache(compile func([]byte) (*endpoint.Endpoint, error)) *endpointCache {
	return &endpointCache{compile: compile, maxEntries: contractCacheEntries, maxBytes: contractCacheBytes}
}

const (
	contractCacheEntries = 256
	contractCacheBytes   = 512 << 10
)

type endpointCache struct {
	compile              func([]byte) (*endpoint.Endpoint, error)
	maxEntries, maxBytes int

	mu    sync.Mutex
	bytes int
	order list.List // of *cachedEndpoint, the most recently used first
	byKey map[[sha256.Size]byte]*list.Element
}

type cachedEndpoint struct {
	key  [sha256.Size]byte
	size int
	ep   *endpoint.Endpoint
}

// get returns the compiled endpoint of a definition, compiling it (out
// of the lock) when it is not held. A definition that does not compile
// is not kept: its refusal is quick (catalogsvc/endpoint's bounds).
func (c *endpointCache) get(def []byte) (*endpoint.Endpoint, error) {
	key := sha256.Sum256(def)
	if ep := c.lookup(key); ep != nil {
		return ep, nil
	}
	ep, err := c.compile(def)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*cachedEndpoint).ep, nil
	}
	if c.byKey == nil {
		c.byKey = map[[sha256.Size]byte]*list.Element{}
	}
	c.byKey[key] = c.order.PushFront(&cachedEndpoint{key: key, size: len(def), ep: ep})
	c.bytes += len(def)
	for c.order.Len() > 1 && (c.order.Len() > c.maxEntries || c.bytes > c.maxBytes) {
		old := c.order.Remove(c.order.Back()).(*cachedEndpoint)
		delete(c.byKey, old.key)
		c.bytes -= old.size
	}
	return ep, nil
}

func (c *endpointCache) lookup(key [sha256.Size]byte) *endpoint.Endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cachedEndpoint).ep
}
