package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/auditsvc/auditclient"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
)

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
// docs/decisions.md#D-attribution-payload.
func (p *Pipeline) payload(x *exchange, resp *agtp.Response, responseID string) attribution.Payload {
	payload := attribution.Payload{
		ServerID:           p.opts.ServerID,
		Timestamp:          time.Now().UTC().Format(time.RFC3339Nano),
		RequestHash:        requestHash(x.req),
		Status:             resp.Status,
		Method:             x.req.Method,
		AgentID:            x.agentID,
		OwnerID:            x.caller.GetOwnerId(),
		SessionID:          x.req.Header.Get(agtp.HeaderSessionID),
		TaskID:             x.req.Header.Get(agtp.HeaderTaskID),
		RequestID:          x.req.Header.Get(agtp.HeaderRequestID),
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
	tier2Record(x, &payload)
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
	for i := 0; i < len(jti); i++ {
		if jti[i] < 0x20 || jti[i] > 0x7e {
			return ""
		}
	}
	return jti
}

// idempotencyOutcomeUnknown is the outcome member of an answer whose
// request's outcome is unknown.
const idempotencyOutcomeUnknown = "unknown"

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
