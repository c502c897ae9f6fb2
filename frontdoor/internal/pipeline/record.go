package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	"github.com/agtpsuite/agtp/frontdoor/internal/builtin"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// The record stage (after docs/decisions.md#D-decision-order step 12): once
// a stage has decided the response, the record hooks the stages left on the
// exchange run (a request indexed for RETRY reports its handler's status,
// say), a binding shapes the answer into its protocol (agp.go), and the
// response is stamped, its Attribution-Record signed and appended by
// auditsvc together with the idempotent outcome, and the idempotency claim
// settled. A response whose record cannot be stored is not given out.

// A recordHook is work a stage leaves for the record stage: a stage adds
// its hook to the exchange (onRecord) when it takes on the obligation,
// and the record stage runs the list in order. The hooks are package
// values, so the list costs no allocation.
type recordHook struct {
	// decided sees the response as the stages decided it, before it is
	// shaped, stamped or recorded.
	decided func(p *Pipeline, x *exchange, resp *agtp.Response)
	// members adds members to the Attribution-Record.
	members func(x *exchange, payload *attribution.Payload)
	// settled runs once the record was appended, or could not be; it
	// reports whether the request's outcome is now unknown.
	settled func(p *Pipeline, x *exchange, status int, r recordResult) bool
}

// recordResult is how appending the Attribution-Record went.
type recordResult struct {
	// recorded: the record was appended. stored: an idempotent outcome
	// was sent with it; outcomeStored: auditsvc stored that outcome.
	recorded, stored, outcomeStored bool
}

// The record hooks of the stages.
var (
	// taskRunHook reports how a request indexed for RETRY ended (added by
	// the policy stage when policysvc indexed it).
	taskRunHook = recordHook{decided: (*Pipeline).completeTaskRun}
	// idempotencyHook settles the idempotency claim policysvc granted
	// (added by the policy stage with the claim).
	idempotencyHook = recordHook{settled: (*Pipeline).settleIdempotency}
	// tier2Hook records the Tier 2 members of TRANSFER and RUN (added by
	// the policy stage with their validated input).
	tier2Hook = recordHook{members: tier2Record}
	// retryLinkHook links a RETRY, and the request it re-runs, to the
	// original task (added when a request is a re-run, and by the policy
	// stage for a RETRY).
	retryLinkHook = recordHook{members: retryRecord}
)

// record runs the record stage for resp, the response the stages decided.
func (p *Pipeline) record(x *exchange, resp *agtp.Response) *agtp.Response {
	for _, h := range x.hooks {
		if h.decided != nil {
			h.decided(p, x, resp)
		}
	}
	if x.bound != nil && !x.replayed && x.bound.Shape != nil {
		resp = x.bound.Shape(x.ctx, p.view(x), resp)
	}
	return p.finish(x, resp)
}

// settle runs the settled hooks; it reports whether any left the
// request's outcome unknown.
func (p *Pipeline) settle(x *exchange, status int, r recordResult) bool {
	unknown := false
	for _, h := range x.hooks {
		if h.settled != nil && h.settled(p, x, status, r) {
			unknown = true
		}
	}
	return unknown
}

// finish stamps the response, stores the idempotent outcome and the
// Attribution-Record, and records telemetry.
func (p *Pipeline) finish(x *exchange, resp *agtp.Response) *agtp.Response {
	if x.tokenPending {
		// Answered before policysvc checked the token (a 422 on the
		// input, say): the caller never proved the agent it named, so the
		// answer goes on no agent's chain.
		x.forgetCaller(callerproof.Proof{IgnoredClaim: x.agentID})
	}
	p.stampStable(x, resp)
	if err := resp.Check(); err != nil {
		// The writer would refuse this response (a handler's header value
		// with a control character, a body without Content-Type, ...):
		// it is replaced here, while the 500 can still be signed and
		// chained, rather than by the transport's unrecorded one
		// (docs/decisions.md#D-internal-error).
		p.Log.ErrorContext(x.ctx, "response refused by the wire writer; answering 500", "method", x.req.Method, "status", resp.Status, "error", err)
		resp = internalError(x)
		p.stampStable(x, resp)
	}

	// The stored idempotent outcome is the response before per-response
	// identifiers are added, so a replay differs only in those.
	var stored []byte
	if x.claim != nil && cacheable(resp.Status) {
		stored = encodeStored(resp)
	}

	p.stampPerResponse(x, resp)
	responseID := answer.NewID()
	resp.Header.Set(agtp.HeaderResponseID, responseID)
	jws, auditID, outcomeStored, err := p.appendAudit(x, resp, responseID, stored)
	if err != nil {
		p.Log.ErrorContext(x.ctx, "attribution record not stored; refusing to answer without it", "error", err, "method", x.req.Method)
		explanation := "the attribution record for this response could not be stored, so the server does not answer it; retry later"
		var extra map[string]any
		if p.settle(x, resp.Status, recordResult{stored: stored != nil}) {
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
		p.settle(x, resp.Status, recordResult{recorded: true, stored: stored != nil, outcomeStored: outcomeStored})
		resp.Header.Set(agtp.HeaderAttributionRecord, jws)
		resp.Header.Set(agtp.HeaderAuditID, auditID)
	}

	if x.span.IsRecording() {
		p.describeSpan(x, resp)
	}
	p.metrics.record(x, resp.Status)
	return resp
}

// describeSpan names a recorded span by its endpoint and adds what an SRE
// searches by: the identifiers the response carries and who the caller
// proved to be.
func (p *Pipeline) describeSpan(x *exchange, resp *agtp.Response) {
	x.span.SetAttributes(attribute.Int("agtp.status", resp.Status),
		attribute.String("agtp.response_id", resp.Header.Get(agtp.HeaderResponseID)),
		attribute.String("agtp.audit_id", resp.Header.Get(agtp.HeaderAuditID)),
		attribute.Int("agtp.verification_level", x.proof.Level))
	if x.agentID != "" {
		x.span.SetAttributes(attribute.String("agtp.agent_id", x.agentID))
	}
	// Through echoed: a Task-ID the wire stage refused (too long, not
	// printable ASCII) goes on no span either.
	if id, ok := echoed(x.req.Header, agtp.HeaderTaskID); ok && id != "" {
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
}

// stampStable sets the response fields that a replay reproduces. The
// request's fields are echoed within their bounds (echoed).
func (p *Pipeline) stampStable(x *exchange, resp *agtp.Response) {
	h := &resp.Header
	h.Set(agtp.HeaderServerID, p.opts.ServerID)
	for _, name := range [...]string{agtp.HeaderAgentID, agtp.HeaderTaskID, agtp.HeaderRequestID} {
		if v, ok := echoed(x.req.Header, name); ok {
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

// appendAudit has auditsvc sign the response's Attribution-Record and
// append it to the caller's chain (the server's chain for anonymous
// traffic, except refusals), storing the idempotent outcome in the same
// atomic step.
func (p *Pipeline) appendAudit(x *exchange, resp *agtp.Response, responseID string, stored []byte) (jws, auditID string, outcomeStored bool, err error) {
	// Typed claims, not claims_json: auditsvc signs the same payload bytes
	// either way, and neither side pays for a JSON encode and decode.
	payload := p.payload(x, resp, responseID)
	// The Response-ID names the append, so that the retry below appends
	// once even when the first attempt landed and only its answer was
	// lost (docs/audit.md, "Retried requests"); the retry resends this
	// very message, timestamp included.
	in := &auditv1.SignAndAppendRequest{ChainAgentId: x.agentID, Claims: attributionpb.Claims(&payload), RequestId: responseID}
	// A refusal of an anonymous request is signed but not chained: one
	// stored record per anonymous 404 or 429 would let strangers grow the
	// audit store without bound. auditsvc counts them into a summary
	// record instead (docs/audit.md, "Anonymous refusals").
	in.Unchained = x.agentID == "" && resp.Status >= 400 && stored == nil
	if stored != nil && x.claim != nil {
		in.IdempotentOutcome = &auditv1.IdempotentOutcome{
			Slot: x.claim.GetSlot(), Token: x.claim.GetToken(), TtlSeconds: x.claim.GetTtlSeconds(), Response: stored,
		}
	}
	// The record must be stored even when the client's deadline has
	// passed: the work it attributes has happened.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 5*time.Second)
	defer cancel()
	// A lost connection (an auditsvc replica restarting, say) sends it
	// once more, to the same or another replica.
	out, err := auditclient.SignAndAppend(ctx, p.Audit, in)
	if err != nil {
		return "", "", false, fmt.Errorf("sign and append: %w", err)
	}
	return out.GetAttributionRecord(), out.GetAuditId(), out.GetOutcomeStored(), nil
}

// unchainedRecord is the Attribution-Record of a response that cannot
// have a stored one (auditsvc unreachable, or a wire error answered by the
// transport): alg none, previous_audit_id all zeros and the marker member
// set, so no verifier can take it for a chained, authoritative record.
func (p *Pipeline) unchainedRecord(x *exchange, resp *agtp.Response, responseID, marker string) (jws, auditID string) {
	payload := p.payload(x, resp, responseID)
	payload.PreviousAuditID = strings.Repeat("0", 64)
	payload.Extra = map[string]json.RawMessage{marker: json.RawMessage("true")}
	jws, auditID, err := unsignedSigner.SignPayload(&payload)
	if err != nil {
		return "", ""
	}
	return jws, auditID
}

var unsignedSigner = attribution.NewSigner(nil)

// payload builds the Attribution-Record members of
// docs/decisions.md#D-attribution-payload. The request's fields are
// recorded within their bounds (echoed); request_hash commits to the
// whole request either way.
func (p *Pipeline) payload(x *exchange, resp *agtp.Response, responseID string) attribution.Payload {
	sessionID, _ := echoed(x.req.Header, agtp.HeaderSessionID)
	taskID, _ := echoed(x.req.Header, agtp.HeaderTaskID)
	requestID, _ := echoed(x.req.Header, agtp.HeaderRequestID)
	payload := attribution.Payload{
		ServerID:           p.opts.ServerID,
		Timestamp:          time.Now().UTC().Format(time.RFC3339Nano),
		RequestHash:        requestHash(x.req),
		Status:             resp.Status,
		Method:             x.req.Method,
		AgentID:            x.agentID,
		OwnerID:            x.caller.GetOwnerId(),
		SessionID:          sessionID,
		TaskID:             taskID,
		RequestID:          requestID,
		ResponseID:         responseID,
		ResultHash:         sha256Hex(resp.Body),
		AuditRecordVersion: "1",
		SynthesisID:        x.synthesisID,
		ContractHash:       x.contractHash,
		NegotiationOrigin:  x.negotiationOrigin,
		PriorActions:       x.priors,

		VerificationLevel:      x.proof.Level,
		VerifiedBy:             x.proof.By,
		CertificateFingerprint: x.proof.CertFingerprint,
		TokenIssuer:            x.proof.TokenIssuer,
		UnprovenAgentID:        x.proof.IgnoredClaim,
		PeerServer:             x.proof.PeerServer,
	}
	if x.matched && x.decision.RequestedMethod != x.decision.Method {
		payload.Method = x.decision.Method
		payload.RequestedMethod = x.decision.RequestedMethod
	}
	for _, h := range x.hooks {
		if h.members != nil {
			h.members(x, &payload)
		}
	}
	if x.authz != nil {
		payload.ActingPrincipalID = x.authz.GetActingPrincipalId()
		// A PURCHASE whose counterparty policysvc verified names both
		// parties (core §9).
		if id := x.authz.GetMerchantId(); id != "" {
			payload.MerchantID = id
			payload.MerchantFingerprint = x.authz.GetMerchantFingerprint()
			payload.IntentAssertionJTI = intentAssertionJTI(x.req.Header.Get(agtp.HeaderIntentAssertion))
		}
	}
	return payload
}

// maxJTILen bounds the jti copied into a record.
const maxJTILen = 256

// intentAssertionJTI returns the jti claim of an Intent-Assertion JWT
// (core §9), or "" when the value is not a compact JWS with a printable
// string jti. The assertion is evidence for the payment network, which
// verifies it; the record only names which assertion the agent presented.
func intentAssertionJTI(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		JTI any `json:"jti"`
	}
	if json.Unmarshal(raw, &claims) != nil {
		return ""
	}
	jti, ok := claims.JTI.(string)
	if !ok || jti == "" || len(jti) > maxJTILen {
		return ""
	}
	if !agtp.PrintableASCII(jti) {
		return ""
	}
	return jti
}

// idempotencyOutcomeUnknown is the outcome member of an answer whose
// request's outcome is unknown.
const idempotencyOutcomeUnknown = "unknown"

// settleIdempotency ends the request's idempotency claim once the record
// stage knows whether its outcome was stored: a claim whose outcome went
// into the store with the record needs nothing more.
func (p *Pipeline) settleIdempotency(x *exchange, status int, r recordResult) bool {
	switch {
	case x.claim == nil:
		return false
	case !r.recorded:
		return p.settleClaim(x, status, false)
	case !r.stored:
		return p.settleClaim(x, status, true)
	case !r.outcomeStored:
		// The record is stored but the outcome is not: the claim no
		// longer held the slot (lost with a Redis primary that failed
		// over, say). It is settled as an answer without a stored
		// outcome, so a retry of a request that ran is refused as
		// unknown instead of running again.
		return p.settleClaim(x, status, false)
	}
	return false
}

// settleClaim ends a claim whose outcome was not stored. It is released,
// so a retry runs the request, when the handler never ran (a refusal
// decided before dispatch), when the endpoint is idempotent, when the
// binding failed in a way a retry may cure (its upstreams had the key to
// recognise the retry), or when the handler answered and the answer is
// merely not one to replay (a 409 or 429 of its own). It is marked unknown
// when the handler ran, or may have run, and its outcome is not known: a
// 5xx after dispatch (a timeout, a failure after a side effect) or an
// answer whose record could not be stored (recorded false). It reports
// whether the claim was marked unknown.
func (p *Pipeline) settleClaim(x *exchange, status int, recorded bool) bool {
	if x.claim == nil {
		return false
	}
	if !x.dispatched || x.idempotentEndpoint || x.transient || (recorded && status < 500) {
		p.releaseClaim(x)
		return false
	}
	return p.markUnknown(x, status)
}

// markUnknown has policysvc hold the claim as an unknown outcome, so a
// retry with the same key is refused instead of doing the request twice.
// The log names the agent and key an operator resolves.
func (p *Pipeline) markUnknown(x *exchange, status int) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 2*time.Second)
	defer cancel()
	key, _ := x.idempotencyKey()
	out, err := p.Policy.MarkIdempotencyUnknown(ctx, &policyv1.MarkIdempotencyUnknownRequest{Claim: x.claim})
	if err != nil {
		p.Log.ErrorContext(ctx, "idempotency claim not marked unknown; a retry may run the request again once its lease lapses",
			"error", err, "agent_id", x.agentID, "idempotency_key", key, "method", x.req.Method, "path", x.req.Path)
		return false
	}
	if !out.GetMarked() {
		// Its outcome was stored after all (the record landed), or the
		// lease lapsed and another request holds the key.
		return false
	}
	p.Log.WarnContext(ctx, "request outcome unknown: retries with its Idempotency-Key are refused until the operator resolves it",
		"agent_id", x.agentID, "idempotency_key", key, "method", x.req.Method, "path", x.req.Path, "status", status)
	return true
}

// releaseClaim gives up an idempotency claim whose request produced no
// cacheable outcome, so a retry runs again.
func (p *Pipeline) releaseClaim(x *exchange) {
	if x.claim == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 2*time.Second)
	defer cancel()
	if _, err := p.Policy.ReleaseIdempotency(ctx, &policyv1.ReleaseIdempotencyRequest{Claim: x.claim}); err != nil {
		p.Log.WarnContext(ctx, "idempotency claim not released; it expires with its lease", "error", err)
	}
}

// requestHash is the SHA-256 of the request as re-serialized in wire form
// (request line, header fields in received order, body). The parser does
// not keep the raw bytes, and a deterministic re-serialization lets anyone
// holding the parsed request recompute the hash.
func requestHash(req *agtp.Request) string {
	hw := hashWriters.Get().(*hashWriter)
	defer hashWriters.Put(hw)
	hw.h.Reset()
	hw.bw.Reset(hw.h)
	_ = req.Write(hw.bw)
	_ = hw.bw.Flush()
	var sum [sha256.Size]byte
	return hex.EncodeToString(hw.h.Sum(sum[:0]))
}

// hashWriter is a SHA-256 behind a buffer, pooled: the request hash
// would otherwise cost a 4 KiB buffer per request.
type hashWriter struct {
	h  hash.Hash
	bw *bufio.Writer
}

var hashWriters = sync.Pool{New: func() any {
	h := sha256.New()
	return &hashWriter{h: h, bw: bufio.NewWriterSize(h, 4096)}
}}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// maxRecordedPrincipal and maxRecordedRunInput bound what a record copies
// from a request; beyond them the record carries the SHA-256 instead, so
// it still commits to the value.
const (
	maxRecordedPrincipal = 1024
	maxRecordedRunInput  = 16 << 10
)

// tier2Record fills the Tier 2 members of an Attribution-Record from the
// validated input: TRANSFER's from_principal and to_principal (standard
// methods §10.6) and RUN's procedure and input parameters (§10.3).
func tier2Record(x *exchange, payload *attribution.Payload) {
	if x.input == nil {
		return
	}
	switch x.inputMethod {
	case "TRANSFER":
		var in struct {
			From string `json:"from_principal"`
			To   string `json:"to_principal"`
		}
		if json.Unmarshal(x.input, &in) == nil {
			payload.FromPrincipal, payload.ToPrincipal = recorded(in.From), recorded(in.To)
		}
	case "RUN":
		payload.ProcedureID = x.req.Path
		var in map[string]any
		if json.Unmarshal(x.input, &in) != nil {
			return
		}
		redactSecrets(in)
		b, err := json.Marshal(in)
		if err != nil {
			return
		}
		if c, err := jcs.Canonicalize(b); err == nil {
			b = c
		}
		if len(b) > maxRecordedRunInput {
			sum := sha256.Sum256(b)
			b, _ = json.Marshal(map[string]string{"sha256": hex.EncodeToString(sum[:])})
		}
		payload.RunInput = b
	}
}

func recorded(v string) string {
	if len(v) <= maxRecordedPrincipal {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// redactSecrets replaces credential-like members (the names a record must
// never carry, core §8.6) at any depth; like freeFormMember it has no
// cutoff for a member to hide below.
func redactSecrets(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if attribution.IsSecretMember(k) {
				t[k] = "[redacted]"
				continue
			}
			redactSecrets(e)
		}
	case []any:
		for _, e := range t {
			redactSecrets(e)
		}
	}
}

// recordOriginalTaskID is the Attribution-Record member that links a
// RETRY, and the request it re-ran, to the original task.
const recordOriginalTaskID = "original_task_id"

// completeTaskRun tells policysvc how an indexed non-idempotent request
// ended, so that a RETRY never repeats one that succeeded. It is the
// handler's status, not the one sent: a 503 audit-unavailable still
// follows a side effect. Idempotent requests are re-run whatever their
// status, so they cost nothing here.
func (p *Pipeline) completeTaskRun(x *exchange, resp *agtp.Response) {
	token := x.authz.GetTaskRunToken()
	if token == "" || x.replayed {
		return
	}
	if x.matched && x.decision.Endpoint != nil && x.decision.Endpoint.Proto.GetIsIdempotent() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), 2*time.Second)
	defer cancel()
	in := &policyv1.CompleteTaskRunRequest{AgentId: x.agentID, TaskId: x.req.Header.Get(agtp.HeaderTaskID), Token: token, Status: int32(resp.Status)}
	if _, err := p.Policy.CompleteTaskRun(ctx, in); err != nil {
		// The entry keeps an unknown outcome: a RETRY of it runs only
		// under its Idempotency-Key.
		p.Log.WarnContext(ctx, "task outcome not recorded for RETRY", "error", err, "agent_id", x.agentID)
	}
}

// retryRecord links a record to the original task: the RETRY's own (from
// its validated input) and the re-run's (from its context).
func retryRecord(x *exchange, payload *attribution.Payload) {
	orig := builtin.RetryOf(x.ctx)
	if orig == "" && x.inputMethod == "RETRY" && x.input != nil {
		var in struct {
			Orig string `json:"original_task_id"`
		}
		if json.Unmarshal(x.input, &in) == nil {
			orig = in.Orig
		}
	}
	if orig == "" || len(orig) > maxTaskIDLen {
		return
	}
	v, err := json.Marshal(orig)
	if err != nil {
		return
	}
	if payload.Extra == nil {
		payload.Extra = map[string]json.RawMessage{}
	}
	payload.Extra[recordOriginalTaskID] = v
}
