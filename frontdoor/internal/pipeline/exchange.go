package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/agtp/transport"
	"github.com/agtpsuite/agtp/services/kit"
)

// exchange is one request's state as it moves through the pipeline.
type exchange struct {
	ctx   context.Context
	span  trace.Span
	start time.Time
	conn  *transport.ConnInfo
	req   *agtp.Request

	state    *catalogstate.State
	decision route.Decision
	matched  bool

	// caller is the record of the Agent-ID header's agent; nil when
	// anonymous.
	caller  *identityv1.AgentRecord
	agentID string
	// proof is how the caller was proven (caller.go); tokenPending marks a
	// caller whose bearer token policysvc has yet to check in Authorize.
	proof        callerproof.Proof
	tokenPending bool
	// target is the agent a request addresses (DESCRIBE /agents/x), for
	// the trust headers.
	target *identityv1.AgentRecord

	authz *policyv1.AuthorizeResponse
	claim *policyv1.IdempotencyClaim
	// replayed is set when the response is an idempotent replay.
	replayed bool
	// idempotentEndpoint is the matched endpoint's is_idempotent, set by
	// authorize: such a request may always run again.
	idempotentEndpoint bool
	// dispatched is set once the handler was called: from then on a
	// failure may follow a side effect, so a claim whose outcome is not
	// stored is marked unknown rather than released (settleClaim).
	dispatched bool
	// transient is set when the handler's binding failed in a way a retry
	// may cure (bindings.Transient): its upstreams were given the
	// Idempotency-Key, so the claim is released and a retry runs.
	transient bool
	// idemKey is the request's Idempotency-Key (the header, or a
	// REGISTER's idempotency_key parameter), set by authorize.
	idemKey string
	// input is the validated input of the method inputMethod, set by
	// authorize, for the Tier 2 members of the record (tier2.go).
	input       []byte
	inputMethod string

	// audit payload extras set by handlers.
	synthesisID       string
	contractHash      string
	negotiationOrigin string
	// priors are the Attribution-Record's prior_actions (bindings.go).
	priors priorList

	// rejection is the reason token of an error response, for metrics.
	rejection string

	// bound is set for a request of another protocol (agp.go).
	bound *Bound
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

func (p *Pipeline) begin(ctx context.Context, conn *transport.ConnInfo, req *agtp.Request) *exchange {
	ctx = kit.Propagator.Extract(ctx, headerCarrier{&req.Header})
	ctx, span := p.Tracer.Start(ctx, "AGTP "+req.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("agtp.method", req.Method),
			attribute.String("agtp.transport", conn.Transport),
		))
	if sid := req.Header.Get(agtp.HeaderSessionID); sid != "" {
		span.SetAttributes(attribute.String("agtp.session_id", sid))
	}
	return &exchange{ctx: ctx, span: span, start: time.Now(), conn: conn, req: req}
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

// fail builds an error response; extra members go into the body.
func (x *exchange) fail(status int, reason, explanation string, extra map[string]any) *agtp.Response {
	x.rejection = reason
	body := agtp.ErrorBody{Status: status, Reason: reason, Explanation: explanation, TaskID: x.req.Header.Get(agtp.HeaderTaskID), Extra: extra}
	resp, err := body.Response()
	if err != nil {
		return agtp.NewErrorResponse(agtp.StatusServerError, "internal", "error body could not be encoded")
	}
	return resp
}

// finish stamps the response, stores the idempotent outcome and the
// Attribution-Record, and records telemetry.
func (p *Pipeline) finish(x *exchange, resp *agtp.Response) *agtp.Response {
	if x.tokenPending {
		// Answered before policysvc checked the token (a 422 on the
		// input, say): the caller never proved the agent it named, so the
		// answer goes on no agent's chain.
		x.proof = callerproof.Proof{IgnoredClaim: x.agentID}
		x.caller, x.agentID, x.tokenPending = nil, "", false
	}
	p.stampStable(x, resp)

	// The stored idempotent outcome is the response before per-response
	// identifiers are added, so a replay differs only in those.
	var stored []byte
	if x.claim != nil && cacheable(resp.Status) {
		stored = encodeStored(resp)
	}

	p.stampPerResponse(x, resp)
	responseID := newResponseID()
	resp.Header.Set(agtp.HeaderResponseID, responseID)
	jws, auditID, outcomeStored, err := p.appendAudit(x, resp, responseID, stored)
	if err != nil {
		p.Log.ErrorContext(x.ctx, "attribution record not stored; refusing to answer without it", "error", err, "method", x.req.Method)
		explanation := "the attribution record for this response could not be stored, so the server does not answer it; retry later"
		var extra map[string]any
		if p.settleClaim(x, resp.Status, false) {
			explanation = "the request ran, but the attribution record of its response could not be stored, so the server does not answer it; " +
				"it is not run again: a retry with the same Idempotency-Key is refused (409 idempotency-outcome-unknown) until the server's operator resolves the key"
			extra = map[string]any{"outcome": idempotencyOutcomeUnknown}
		}
		resp = x.fail(agtp.StatusUnavailable, "audit-unavailable", explanation, extra)
		p.stampStable(x, resp)
		p.stampPerResponse(x, resp)
		resp.Header.Set(agtp.HeaderResponseID, responseID)
		// Every response carries an Attribution-Record (core §5.5.4); this
		// one is unsigned and unchained, and says so, so it can never pass
		// for an authoritative record.
		jws, auditID = p.unchainedRecord(x, resp, responseID, "audit_unavailable")
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
	} else {
		if x.claim != nil && stored == nil {
			p.settleClaim(x, resp.Status, true)
		}
		if x.claim != nil && stored != nil && !outcomeStored {
			// The record is stored but the outcome is not: the claim
			// no longer held the slot (lost with a Redis primary that
			// failed over, say). It is settled as an answer without a
			// stored outcome, so a retry of a request that ran is
			// refused as unknown instead of running again.
			p.settleClaim(x, resp.Status, false)
		}
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
	}

	// What an SRE searches by: the identifiers the response carries and
	// who the caller proved to be.
	x.span.SetAttributes(attribute.Int("agtp.status", resp.Status),
		attribute.String("agtp.response_id", resp.Header.Get(agtp.HeaderResponseID)),
		attribute.String("agtp.audit_id", resp.Header.Get(agtp.HeaderAuditID)),
		attribute.Int("agtp.verification_level", x.proof.Level))
	if x.agentID != "" {
		x.span.SetAttributes(attribute.String("agtp.agent_id", x.agentID))
	}
	if id := x.req.Header.Get(agtp.HeaderTaskID); id != "" {
		x.span.SetAttributes(attribute.String("agtp.task_id", id))
	}
	if x.matched && x.decision.Endpoint != nil {
		// Named by method and path template, as HTTP server spans are by
		// route: bounded, and the same for every request to an endpoint.
		tmpl := x.decision.Endpoint.Proto.GetPath()
		x.span.SetName(x.req.Method + " " + tmpl)
		x.span.SetAttributes(attribute.String("agtp.path_template", tmpl))
	}
	if resp.Status >= 500 {
		x.span.SetStatus(codes.Error, x.rejection)
	}
	p.metrics.record(x, resp.Status)
	return resp
}

// stampStable sets the response fields that a replay reproduces.
func (p *Pipeline) stampStable(x *exchange, resp *agtp.Response) {
	h := &resp.Header
	h.Set(agtp.HeaderServerID, p.opts.ServerID)
	for _, name := range [...]string{agtp.HeaderAgentID, agtp.HeaderTaskID, agtp.HeaderRequestID} {
		if v, ok := x.req.Header.Lookup(name); ok {
			h.Set(name, v)
		}
	}
	if p.opts.OwnerID != "" {
		h.Set(agtp.HeaderOwnerID, p.opts.OwnerID)
	}
	if x.target != nil {
		stampTrust(h, x.target)
	}
	if x.state != nil {
		if v := x.state.Snapshot.GetApiVersion(); v != "" {
			h.Set(agtp.HeaderAPIVersion, v)
		}
	}
	if x.decision.CatalogWarning != "" {
		h.Set(agtp.HeaderCatalogWarning, x.decision.CatalogWarning)
	}
	if x.decision.EndpointWarning != "" {
		h.Set(agtp.HeaderEndpointWarning, x.decision.EndpointWarning)
	}
	if x.synthesisID != "" && x.negotiationOrigin == "rcns-gate" {
		h.Set(agtp.HeaderContractSynthesized, x.synthesisID)
	}
}

// stampPerResponse sets the fields that depend on the connection, not on
// the request, so an idempotent replay does not store them.
func (p *Pipeline) stampPerResponse(x *exchange, resp *agtp.Response) {
	if x.state != nil && x.conn.Requests == 0 {
		resp.Header.Set(agtp.HeaderSupportedMethods, x.state.SupportedMethods)
	}
}

// cacheable says whether an outcome is stored for idempotent replay:
// successes and deterministic client errors
// (docs/decisions.md#D-idempotency-replay), not rate limits, conflicts of
// the moment or server failures.
func cacheable(status int) bool { return bindings.Replayable(status) }

// encodeStored serializes a response for the idempotency store.
func encodeStored(resp *agtp.Response) []byte {
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	if err := resp.Write(bw); err != nil {
		return nil
	}
	_ = bw.Flush()
	return buf.Bytes()
}

// decodeStored parses a stored response.
func decodeStored(b []byte) (*agtp.Response, error) {
	return agtp.ReadResponse(bufio.NewReader(bytes.NewReader(b)), agtp.Limits{MaxBody: 64 << 20})
}

func newResponseID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// requestHash is the SHA-256 of the request as re-serialized in wire form
// (request line, header fields in received order, body). The parser does
// not keep the raw bytes, and a deterministic re-serialization lets anyone
// holding the parsed request recompute the hash.
func requestHash(req *agtp.Request) string {
	h := sha256.New()
	bw := bufio.NewWriterSize(h, 4096)
	_ = req.Write(bw)
	_ = bw.Flush()
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func stampTrust(h *agtp.Header, rec *identityv1.AgentRecord) {
	if t := rec.GetTrustTier(); t >= 1 && t <= 3 {
		h.Set(agtp.HeaderTrustTier, strconv.Itoa(int(t)))
		if vp := rec.GetVerificationPath(); vp != "" {
			h.Set(agtp.HeaderVerificationPath, vp)
		}
		if t == 2 && rec.GetTrustWarning() != "" {
			h.Set(agtp.HeaderTrustWarning, rec.GetTrustWarning())
		}
	}
}
