package pipeline

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/coreparam"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/kit"
)

// exchange is one request's state as it moves through the pipeline. Each
// group of fields is written by the stage named above it, and read by the
// stages after it.
type exchange struct {
	// Set when the request arrives (begin).
	ctx   context.Context
	span  trace.Span
	start time.Time
	conn  *transport.ConnInfo
	req   *agtp.Request
	// bound is set for a request of another protocol (agp.go).
	bound *Bound

	// Written by the wire and structure stages (wire.go, structure.go).
	state    *catalogstate.State
	decision route.Decision
	matched  bool

	// Written by the caller stage (caller.go). caller is the record of
	// the proven caller, nil when anonymous; proof is how it was proven;
	// tokenPending marks a caller whose bearer token policysvc has yet
	// to check in Authorize (the policy stage settles it).
	caller       *identityv1.AgentRecord
	agentID      string
	proof        callerproof.Proof
	tokenPending bool

	// Written by the structure stage for QUOTE /path (structure.go): the
	// request's own path and query name the quoted call.
	quoteTarget bool

	// Written by the input stage (input.go): the request's core
	// per-method parameters (core §7.2), for the handler.
	core coreparam.Params

	// Written by the policy stage (policy.go).
	authz *policyv1.AuthorizeResponse
	claim *policyv1.IdempotencyClaim
	// replayed is set when the response is an idempotent replay.
	replayed bool
	// idempotentEndpoint is the matched endpoint's is_idempotent: such a
	// request may always run again.
	idempotentEndpoint bool
	// idemKey is the request's Idempotency-Key (the header, or a
	// REGISTER's idempotency_key parameter).
	idemKey string
	// input is the validated input of the method inputMethod, for the
	// Tier 2 members of the record (record.go).
	input       []byte
	inputMethod string

	// Written by the dispatch stage (dispatch.go, bindings.go,
	// contracts.go). dispatched is set once the handler was called: from
	// then on a failure may follow a side effect, so a claim whose
	// outcome is not stored is marked unknown rather than released
	// (settleClaim). transient is set when the handler's binding failed
	// in a way a retry may cure (bindings.Transient): its upstreams were
	// given the Idempotency-Key, so the claim is released and a retry
	// runs.
	dispatched bool
	transient  bool
	// target is the agent a request addresses (DESCRIBE /agents/x), for
	// the trust headers.
	target *identityv1.AgentRecord
	// The synthesized contract the request ran under or was issued, and
	// the prior_actions of the Attribution-Record.
	synthesisID       string
	contractHash      string
	negotiationOrigin string
	priors            priorList

	// rejection is the reason token of an error response, for metrics;
	// whichever stage answers with an error sets it (fail).
	rejection string

	// hooks are what the stages left for the record stage (record.go).
	hooks   []*recordHook
	hookBuf [4]*recordHook
}

// headerCarrier adapts an AGTP header to the propagation API, so a W3C
// traceparent on an AGTP request continues the caller's trace.
type headerCarrier struct{ h *agtp.Header }

func (c headerCarrier) Get(key string) string { return c.h.Get(key) }

func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.h))
	for _, f := range *c.h {
		keys = append(keys, f.Name)
	}
	return keys
}

var _ propagation.TextMapCarrier = headerCarrier{}

var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

func (p *Pipeline) begin(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *exchange {
	// Most requests carry no trace context: the propagator is asked only
	// when one of its fields is there.
	_, parent := req.Header.Lookup("traceparent")
	_, baggage := req.Header.Lookup("baggage")
	if parent || baggage {
		ctx = kit.Propagator.Extract(ctx, headerCarrier{&req.Header})
	}
	ctx, span := p.Tracer.Start(ctx, "AGTP "+req.Method, serverSpan)
	// Attributes only for a span that records them: an unsampled request
	// (or a server that exports nothing) builds none.
	if span.IsRecording() {
		span.SetAttributes(attribute.String("agtp.method", req.Method), attribute.String("agtp.transport", conn.Transport))
		if sid, ok := echoed(req.Header, agtp.HeaderSessionID); ok && sid != "" {
			span.SetAttributes(attribute.String("agtp.session_id", sid))
		}
	}
	x := &exchange{ctx: ctx, span: span, start: time.Now(), conn: conn, req: req}
	x.hooks = x.hookBuf[:0]
	if builtin.RetryOf(ctx) != "" {
		x.onRecord(&retryLinkHook)
	}
	return x
}

// onRecord leaves h for the record stage.
func (x *exchange) onRecord(h *recordHook) {
	x.hooks = append(x.hooks, h)
}

func (x *exchange) end() { x.span.End() }

// idempotencyKey is the request's Idempotency-Key: the one authorize
// settled on, else the header.
func (x *exchange) idempotencyKey() (string, bool) {
	if x.idemKey != "" {
		return x.idemKey, true
	}
	return x.req.Header.Lookup(agtp.HeaderIdempotencyKey)
}

// handlerKey is the Idempotency-Key handlers and upstreams get to
// recognise a retry by: the key the caller sent, without the namespace a
// binding keeps its keys in (BoundKeyPrefix).
func (x *exchange) handlerKey() string {
	key, _ := x.idempotencyKey()
	if x.bound != nil {
		key = strings.TrimPrefix(key, BoundKeyPrefix)
	}
	return key
}

// fail builds an error response; extra members go into the body, and the
// request's Task-ID too when it is within its bound (echoed).
func (x *exchange) fail(status int, reason, explanation string, extra map[string]any) *agtp.Response {
	x.rejection = reason
	taskID, _ := echoed(x.req.Header, agtp.HeaderTaskID)
	return answer.Error(taskID, status, reason, explanation, extra)
}
