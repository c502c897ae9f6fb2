// Package pipeline is the front door's request pipeline: for every parsed
// AGTP request it makes the structural decision from the local catalog
// snapshot, establishes the caller from the agent cache, validates input,
// asks policysvc once, dispatches to the endpoint's handler (a built-in
// of package builtin, a registered function or a binding), validates
// output, and has auditsvc sign and append the Attribution-Record before
// the response leaves. The hot path costs two network hops: Authorize and
// SignAndAppend.
//
// The stages of docs/decisions.md#D-decision-order are one file each, in
// the order decide runs them: wire.go, structure.go, caller.go, input.go,
// policy.go, dispatch.go and record.go (docs/frontdoor.md, "Following one
// request").
package pipeline

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/outputcheck"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/agtp/transport"
)

// Options configure the pipeline.
type Options struct {
	// ServerID is stamped on every response (core §5.5.4).
	ServerID string
	// OwnerID is the principal accountable for this server, stamped as
	// Owner-ID.
	OwnerID string
	// RequestTimeout bounds the whole pipeline of one request.
	RequestTimeout time.Duration
	// DelegationEnabled admits Delegation-Chain; without it such requests
	// get 501 (core §5.5.3).
	DelegationEnabled bool
	// InspectACL is public, agent_only or operator_only (core §7.2.4).
	InspectACL string
	// CallerProof is what a bare Agent-ID header is worth
	// (callerproof.Required when empty).
	CallerProof callerproof.Mode
	// OperatorFingerprints are the SHA-256 of the SubjectPublicKeyInfo of
	// the client certificates allowed to read under INSPECT operator_only.
	OperatorFingerprints []string
	// OutputCheck picks the registered function results validated
	// against their output schema; nil validates every one. What an
	// upstream, a composition or an MCP server returns is validated on
	// every call, whatever it says.
	OutputCheck *outputcheck.Sampler
}

// Deps are the pipeline's collaborators.
type Deps struct {
	Catalog  *catalogstate.Store
	Agents   *agentcache.Cache
	Policy   policyv1.PolicyServiceClient
	Audit    auditv1.AuditServiceClient
	Identity identityv1.IdentityServiceClient
	RCNS     rcnsv1.RcnsServiceClient
	// Tasks is policysvc's task service (ESCALATE, CONFIRM, NOTIFY,
	// DELEGATE); nil answers those 501.
	Tasks taskv1.TaskServiceClient
	// Peers is the AGTP client for other servers (a DELEGATE to a
	// sub-agent on another host); nil answers such hops 550.
	Peers *client.Client
	// Outbound decides which caller-named destinations (webhooks, AGTP
	// hosts) the mechanics verbs may reach; nil reaches none.
	Outbound *Outbound
	Handlers *handler.Registry
	// Bindings run external_service and composition endpoints and
	// carried framework payloads; nil answers them 501.
	Bindings *Bindings
	Log      *slog.Logger
	Tracer   trace.Tracer
	Meter    metric.Meter
}

// Pipeline serves AGTP requests; it implements transport.Handler.
type Pipeline struct {
	opts Options
	Deps
	metrics  *metrics
	costs    *builtin.Costs
	sessions sessionCache
	builtins *builtin.Registry
	// contracts holds the compiled endpoints of the contracts this
	// pipeline ran lately (contracts.go).
	contracts *endpointCache
}

// Outbound is how the mechanics verbs reach destinations their callers
// name (builtin.Outbound).
type Outbound = builtin.Outbound

// New builds a pipeline.
func New(opts Options, deps Deps) (*Pipeline, error) {
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 15 * time.Second
	}
	if opts.CallerProof == "" {
		opts.CallerProof = callerproof.Required
	}
	mode, err := inspect.ParseMode(opts.InspectACL)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(deps.Meter)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{opts: opts, Deps: deps, metrics: m, costs: builtin.NewCosts(), contracts: newContractCache(endpoint.FromJSON)}
	var resolveRecipe func(ctx context.Context, name string) (*recipe.Recipe, error)
	if deps.Bindings != nil && deps.Bindings.Compositions != nil {
		resolveRecipe = deps.Bindings.Compositions.Resolve
	}
	p.builtins = builtin.New(builtin.Deps{
		ServerID: opts.ServerID,
		Agents:   deps.Agents, Policy: deps.Policy, Audit: deps.Audit, Identity: deps.Identity, RCNS: deps.RCNS, Tasks: deps.Tasks,
		Peers: deps.Peers, Outbound: deps.Outbound,
		ACL:         inspect.NewACL(mode, opts.OperatorFingerprints...),
		Costs:       p.costs,
		Log:         deps.Log,
		DropSession: p.DropSession,
		Serve:       p.ServeAGTP,
		ServeInner:  p.serveInner,
		Recipe:      resolveRecipe,
	})
	return p, nil
}

var _ transport.Handler = (*Pipeline)(nil)

// ServeAGTP runs one request through the pipeline. It always returns a
// response.
func (p *Pipeline) ServeAGTP(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *agtp.Response {
	ctx, cancel := context.WithTimeout(ctx, p.opts.RequestTimeout)
	defer cancel()
	x := p.begin(ctx, conn, req)
	defer x.end()
	return p.serve(x)
}

// serveInner runs a request made on a caller's behalf (a composition step,
// an MCP tool call, RETRY's re-run) through the pipeline, as ServeAGTP
// does, within the parent's connection and deadline.
func (p *Pipeline) serveInner(ctx context.Context, parent *transport.ConnInfo, req *agtp.Request) *agtp.Response {
	conn := transport.ConnInfo{}
	if parent != nil {
		conn = *parent
	}
	// Supported-Methods belongs on the connection's first response, which
	// an invocation never is.
	conn.Requests = 1
	x := p.begin(ctx, &conn, req)
	defer x.end()
	return p.serve(x)
}

// serve takes one request through the stages: decide answers it, record
// stamps, signs and records the answer.
func (p *Pipeline) serve(x *exchange) *agtp.Response {
	return p.record(x, p.decideRecovered(x))
}

// decideRecovered runs decide and turns a panic in a stage or a handler
// into 500 internal-error, which the record stage then stamps, signs and
// chains like any other answer (docs/decisions.md#D-internal-error). The
// transport's own recovery is left with panics of the record stage.
func (p *Pipeline) decideRecovered(x *exchange) (resp *agtp.Response) {
	defer func() {
		if v := recover(); v != nil {
			p.Log.ErrorContext(x.ctx, "request pipeline panic", "method", x.req.Method, "path", x.req.Path, "panic", v, "stack", string(debug.Stack()))
			resp = internalError(x)
		}
	}()
	return p.decide(x)
}

// internalError is the 500 of a request the pipeline could not answer as
// decided; its reason is the transport's, so the 500 reads the same
// whichever layer produced it.
func internalError(x *exchange) *agtp.Response {
	return x.fail(agtp.StatusServerError, transport.ReasonInternalError, "internal error", nil)
}

// decide is the decision order of docs/decisions.md#D-decision-order
// (AGTP-API §11, core §5.6): each stage either answers the
// request, ending it, or hands it to the next. Every response then goes
// through the record stage (record.go), which runs the record hooks the
// stages left on the exchange.
func (p *Pipeline) decide(x *exchange) *agtp.Response {
	// A binding's own refusal (agp.go) is answered once its caller is
	// known, so that it goes on the caller's chain.
	if x.bound != nil && x.bound.Refusal != nil {
		return p.refuseBound(x, x.bound.Refusal)
	}

	// 1. Wire (wire.go): what the transport's parser leaves to the
	// pipeline: a catalog to decide on.
	if resp := p.wire(x); resp != nil {
		return resp
	}

	// 2. Structure (structure.go): 459, 460, 405, 404 or a match, from
	// the local catalog snapshot, before the caller is resolved. Only an
	// unmatched request that presents a contract, asks for RCNS or names
	// a session goes on, to the contract route below; so no outage of
	// rcnssvc or identitysvc turns a 404 into a 503.
	if resp := p.structure(x); resp != nil {
		return resp
	}

	// 3. Delegation-Chain (wire.go): 501 while delegation is off, after
	// the structural codes (core §5.5.3, docs/decisions.md#D-decision-order).
	if resp := p.delegation(x); resp != nil {
		return resp
	}

	// 4. Contract route (contracts.go): an unmatched request served by a
	// synthesized contract, the RCNS gate, or in the end its structural
	// answer.
	if !x.matched {
		return p.contractRoute(x)
	}
	ep := x.decision.Endpoint.Proto

	// 5. Caller (caller.go): who sent the request and how that was proven,
	// with the manifest's discovery and scope toggles on either side.
	if resp := p.caller(x, ep); resp != nil {
		return resp
	}

	// 6. Input (input.go): parameters from body, query and path, validated
	// before any policy state (idempotency claims, rate-limit spend) is
	// touched.
	input, resp := p.input(x)
	if resp != nil {
		return resp
	}

	// 7. Policy (policy.go): one round trip for scopes, rate limits,
	// idempotency and credentials; an idempotent replay ends here.
	if resp := p.authorize(x, ep, x.decision.Method, input); resp != nil {
		return resp
	}
	if x.replayed {
		return p.replay(x)
	}

	// 8. Dispatch (dispatch.go): a binding's last word (agp.go), then the
	// endpoint's handler: a built-in, a registered function or a binding.
	if resp := p.intercept(x); resp != nil {
		return resp
	}
	return p.dispatch(x, input)
}
