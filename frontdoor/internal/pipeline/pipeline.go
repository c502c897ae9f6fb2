// Package pipeline is the front door's request pipeline: for every parsed
// AGTP request it makes the structural decision from the local catalog
// snapshot, establishes the caller from the agent cache, asks policysvc
// once, validates input, dispatches to the endpoint's handler (a built-in
// or a registered function), validates output, and has auditsvc sign and
// append the Attribution-Record before the response leaves. The hot path
// costs two network hops: Authorize and SignAndAppend.
package pipeline

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/agentcache"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/outputcheck"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
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
	// OutputCheck picks the handler results validated against their
	// output schema; nil validates every one.
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
	costs    *costTracker
	sessions sessionCache
	acl      inspect.ACL
}

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
	return &Pipeline{opts: opts, Deps: deps, metrics: m, costs: newCostTracker(), acl: inspect.NewACL(mode, opts.OperatorFingerprints...)}, nil
}

var _ transport.Handler = (*Pipeline)(nil)

// ServeAGTP runs one request through the pipeline. It always returns a
// response.
func (p *Pipeline) ServeAGTP(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *agtp.Response {
	ctx, cancel := context.WithTimeout(ctx, p.opts.RequestTimeout)
	defer cancel()
	x := p.begin(ctx, conn, req)
	defer x.end()
	resp := p.run(x)
	return p.finish(x, resp)
}
