package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

// BoundKeyPrefix is the namespace the AGP binding keeps its clients'
// Idempotency-Keys in (agp:<key>), apart from the same agent's AGTP keys:
// a replay must come back in the protocol it was stored in. Handlers and
// upstreams get the key as the client sent it.
const BoundKeyPrefix = "agp:"

// Bound is a request of another protocol (the AGP binding over HTTPS,
// docs/agp.md) run as an AGTP request: the same structural decision,
// caller, input validation, policysvc Authorize (scopes, rate limits,
// idempotency), handler and auditsvc SignAndAppend as a request read off
// the wire, with three hooks where the binding differs.
type Bound struct {
	// Request is the synthesized AGTP request; its Agent-ID header names
	// the caller the binding authenticated.
	Request *agtp.Request
	// Conn describes the connection it came on (client address for the
	// per-address limits, TLS state).
	Conn *transport.ConnInfo
	// Refusal, when set, answers the request as soon as the caller is
	// identified, with no handler: a refusal the binding decided itself (a
	// missing AGP scope) is still signed and chained to the caller, and
	// spends the caller's rate limits like every refusal of a bound
	// request (spendRefused); past a limit the answer is the 429.
	Refusal *Refusal
	// Intercept runs once policy allowed the request and it is not an
	// idempotent replay, just before the endpoint's handler. A non-nil
	// response is the answer and the handler does not run; when it is not
	// a 2xx, the idempotency claim is released so that the refusal is
	// never replayed.
	Intercept func(ctx context.Context, v *View) *agtp.Response
	// Shape turns the pipeline's answer into the binding's form before it
	// is signed, chained and stored for idempotent replay, so the
	// Attribution-Record's result_hash covers the bytes the client gets.
	// A replay is already shaped and is not passed through it again.
	Shape func(ctx context.Context, v *View, resp *agtp.Response) *agtp.Response
	// Fingerprint identifies the binding's own request (AGP: the SHA-256
	// of {businessId, request} in JCS). A mapping can drop what its
	// protocol sent (a member the endpoint ignores, the business), so the
	// AGTP method, path and input alone would take two different requests
	// for one; folded into the idempotency fingerprint, an
	// Idempotency-Key reused with another body of the binding is 409
	// idempotency-key-reused, never a replay of the first answer.
	Fingerprint string
}

// idempotencyFingerprint is the fingerprint an Idempotency-Key of the
// bound request is bound to: the AGTP one, fp, with the binding's own
// request folded in (still a SHA-256 in hex, as policysvc requires).
func (b *Bound) idempotencyFingerprint(fp string) string {
	if b == nil || b.Fingerprint == "" {
		return fp
	}
	sum := sha256.Sum256([]byte("bound\n" + fp + "\n" + b.Fingerprint))
	return hex.EncodeToString(sum[:])
}

// Refusal is a binding's own refusal.
type Refusal struct {
	Status      int
	Reason      string
	Explanation string
}

// View is what a binding's hooks see of the exchange.
type View struct {
	x *exchange
	// AgentID is the authenticated caller ("" when anonymous).
	AgentID string
	// State is the catalog snapshot the request was decided on (nil when
	// none had arrived).
	State *catalogstate.State
	// Endpoint is the matched endpoint, nil when the request matched none.
	Endpoint *endpoint.Endpoint
	// Rejection is the AGTP reason token of an error answer.
	Rejection string
}

// Fail builds an AGTP error response for the exchange.
func (v *View) Fail(status int, reason, explanation string, extra map[string]any) *agtp.Response {
	return v.x.fail(status, reason, explanation, extra)
}

// Target resolves and validates a call the request names but does not
// make (AGP prepare names the execute it confirms): the structural
// decision and the input schema, as the pipeline would apply them. A
// non-nil response is the AGTP refusal the call would get.
func (v *View) Target(method, path string, params map[string]any) (*endpoint.Endpoint, *agtp.Response) {
	x := v.x
	if x.state == nil {
		return nil, x.fail(agtp.StatusUnavailable, "catalog-unavailable", "the front door has not received the method catalog yet; retry shortly", nil)
	}
	d := x.state.Table.Decide(method, path)
	if d.Outcome != route.Matched {
		return nil, x.fail(d.Status(), d.Reason, d.Explanation(), map[string]any{"method": method, "path": path})
	}
	ep := x.state.Endpoints[d.Endpoint.Index]
	if _, report := ep.BuildInput(d.Params(), nil, params); report != nil {
		return nil, x.fail(agtp.StatusUnprocessable, answer.ReasonInputInvalid, report.Error(), map[string]any{"violations": report.Violations})
	}
	return ep, nil
}

// BoundOutcome is what the binding needs to answer in its own protocol.
type BoundOutcome struct {
	// Response is the final response, stamped and signed.
	Response *agtp.Response
	// AgentID is the authenticated caller ("" when anonymous).
	AgentID string
	// Replayed marks an idempotent replay.
	Replayed bool
	// AuditID is the Audit-ID of the response's Attribution-Record.
	AuditID string
	// RateLimit is the tightest limit that applied, when one did.
	RateLimit *RateLimit
}

// RateLimit is the state of the tightest rate limit after the request.
type RateLimit struct {
	Limit, Remaining, ResetSeconds int64
}

// ServeBound runs a bound request through the pipeline.
func (p *Pipeline) ServeBound(ctx context.Context, b *Bound) *BoundOutcome {
	ctx, cancel := context.WithTimeout(ctx, p.opts.RequestTimeout)
	defer cancel()
	x := p.begin(ctx, b.Conn, b.Request)
	defer x.end()
	x.bound = b
	resp := p.record(x, p.spendRefused(x, p.decideRecovered(x)))
	out := &BoundOutcome{Response: resp, AgentID: x.agentID, Replayed: x.replayed, AuditID: resp.Header.Get(agtp.HeaderAuditID)}
	if a := x.authz; a != nil && a.GetRateLimitLimit() > 0 {
		out.RateLimit = &RateLimit{Limit: a.GetRateLimitLimit(), Remaining: max(a.GetRateLimitRemaining(), 0), ResetSeconds: a.GetRateLimitResetSeconds()}
	}
	return out
}

// refuseBound identifies the caller (so the refusal goes on its chain)
// and answers with the binding's refusal.
func (p *Pipeline) refuseBound(x *exchange, r *Refusal) *agtp.Response {
	x.state = p.Catalog.Current()
	if resp := p.identify(x, true); resp != nil {
		return resp
	}
	return x.fail(r.Status, r.Reason, r.Explanation, nil)
}

// spendRefused makes a bound request that was refused before the policy
// stage (the binding's own refusal, input that does not validate, a call
// that names no endpoint) spend its caller's rate limits, the way a
// request policysvc refuses does (docs/policy.md, "One decision"): a
// binding keeps something of every refused call (AGP's transaction
// record), so a caller must not be able to make them without limit. The
// mechanism is policysvc's own: an Authorize for the request, which spends
// the buckets before anything else refuses. It carries no Idempotency-Key,
// Task-ID, credential or required scopes (nothing is claimed, indexed or
// checked on the request's behalf), so only its rate limits count: a 429
// replaces the refusal, and any other decision leaves the refusal
// standing, with the limit's X-RateLimit state. Only a caller the
// pipeline identified spends; dependency failures (5xx) do not, and a
// policysvc that does not answer leaves the refusal as it was.
func (p *Pipeline) spendRefused(x *exchange, resp *agtp.Response) *agtp.Response {
	refused := resp.Status == agtp.StatusAuthorizationRequired || resp.Status >= 400 && resp.Status < 500
	if x.bound == nil || x.authz != nil || x.agentID == "" || !refused {
		return resp
	}
	method, path := x.req.Method, x.req.Path
	if x.matched && x.decision.Endpoint != nil {
		// The endpoint's own limits count too.
		method, path = x.decision.Method, x.decision.Endpoint.Proto.GetPath()
	}
	// path is an endpoint's template, or the path of a call that matched
	// none (a binding's own route, an unknown path): policysvc only
	// compares it with the configured endpoint limits.
	out, err := p.Policy.Authorize(x.ctx, callerAuthorize(x, method, path))
	if err != nil {
		p.Log.WarnContext(x.ctx, "rate limits of a refused request not spent: policysvc did not answer", "agent_id", x.agentID, "method", method, "error", err)
		return resp
	}
	x.authz = out
	if d := out.GetDenial(); out.GetDecision() == policyv1.Decision_DECISION_DENY && d.GetStatus() == agtp.StatusRateLimited {
		return denied(x, d)
	}
	return resp
}

// intercept runs a bound request's Intercept hook (run.go calls it after
// policy, before the handler).
func (p *Pipeline) intercept(x *exchange) *agtp.Response {
	if x.bound == nil || x.bound.Intercept == nil {
		return nil
	}
	resp := x.bound.Intercept(x.ctx, p.view(x))
	if resp != nil && (resp.Status < 200 || resp.Status > 299) && x.claim != nil {
		p.releaseClaim(x)
		x.claim = nil
	}
	return resp
}

func (p *Pipeline) view(x *exchange) *View {
	v := &View{x: x, AgentID: x.agentID, State: x.state, Rejection: x.rejection}
	if x.matched && x.state != nil && x.decision.Endpoint != nil {
		v.Endpoint = x.state.Endpoints[x.decision.Endpoint.Index]
	}
	return v
}
