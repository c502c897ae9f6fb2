// Package attributionpb converts between attribution.Payload and its typed
// protobuf form, auditv1.AttributionClaims, which the front door sends to
// auditsvc instead of a JSON object so that neither side encodes or decodes
// JSON for the record's members. It is apart from package attribution so
// that the client library and the CLI, which use attribution, do not
// depend on protobuf.
package attributionpb

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
)

// Claims returns p as a typed message, carrying what json.Marshal(p) would
// have sent as claims_json: Extra values are HTML-escaped as encoding/json
// escapes them (the named members and run_input are escaped by auditsvc's
// own encoding), so the record signs to the same bytes. p's RunInput and
// Extra values are shared when there is nothing to escape.
func Claims(p *attribution.Payload) *auditv1.AttributionClaims {
	c := &auditv1.AttributionClaims{
		ServerId:                        p.ServerID,
		Timestamp:                       p.Timestamp,
		RequestHash:                     p.RequestHash,
		Status:                          int64(p.Status),
		Method:                          p.Method,
		AgentId:                         p.AgentID,
		OwnerId:                         p.OwnerID,
		SessionId:                       p.SessionID,
		TaskId:                          p.TaskID,
		RequestId:                       p.RequestID,
		ResponseId:                      p.ResponseID,
		ResultHash:                      p.ResultHash,
		PreviousAuditId:                 p.PreviousAuditID,
		AuditRecordVersion:              p.AuditRecordVersion,
		ActionId:                        p.ActionID,
		EvaluationId:                    p.EvaluationID,
		DecisionId:                      p.DecisionID,
		RequestedMethod:                 p.RequestedMethod,
		ActingPrincipalId:               p.ActingPrincipalID,
		SynthesisId:                     p.SynthesisID,
		ContractHash:                    p.ContractHash,
		NegotiationOrigin:               p.NegotiationOrigin,
		StandingAuthorizationDecisionId: p.StandingAuthorizationDecisionID,
		MerchantId:                      p.MerchantID,
		MerchantFingerprint:             p.MerchantFingerprint,
		IntentAssertionJti:              p.IntentAssertionJTI,
		FromPrincipal:                   p.FromPrincipal,
		ToPrincipal:                     p.ToPrincipal,
		ProcedureId:                     p.ProcedureID,
		RunInput:                        p.RunInput,
		EventType:                       p.EventType,
		VerificationLevel:               int32(p.VerificationLevel),
		VerifiedBy:                      p.VerifiedBy,
		CertificateFingerprint:          p.CertificateFingerprint,
		TokenIssuer:                     p.TokenIssuer,
		UnprovenAgentId:                 p.UnprovenAgentID,
		PeerServer:                      p.PeerServer,
	}
	if len(p.PriorActions) > 0 {
		c.PriorActions = make([]*auditv1.PriorAction, len(p.PriorActions))
		for i, a := range p.PriorActions {
			c.PriorActions[i] = &auditv1.PriorAction{AgentId: a.AgentID, AuditId: a.AuditID, AgentUri: a.AgentURI}
		}
	}
	if len(p.Extra) > 0 {
		c.Extra = make(map[string][]byte, len(p.Extra))
		for k, v := range p.Extra {
			c.Extra[k] = htmlEscaped(v)
		}
	}
	return c
}

// htmlEscaped returns v with <, >, & and U+2028, U+2029 escaped as
// encoding/json's Marshal escapes them in a json.Marshaler's output.
func htmlEscaped(v []byte) []byte {
	if !bytes.ContainsAny(v, "<>&\u2028\u2029") {
		return v
	}
	var b bytes.Buffer
	json.HTMLEscape(&b, v)
	return b.Bytes()
}

// Payload returns the payload c describes. It refuses what the payload
// could not sign: a run_input or Extra value that is not JSON, and an Extra
// member named like a named member (the record would carry it twice). It
// checks nothing else; the audit service's checks apply to the result.
// c's byte values are shared, not copied.
func Payload(c *auditv1.AttributionClaims) (attribution.Payload, error) {
	p := attribution.Payload{
		ServerID:                        c.GetServerId(),
		Timestamp:                       c.GetTimestamp(),
		RequestHash:                     c.GetRequestHash(),
		Status:                          int(c.GetStatus()),
		Method:                          c.GetMethod(),
		AgentID:                         c.GetAgentId(),
		OwnerID:                         c.GetOwnerId(),
		SessionID:                       c.GetSessionId(),
		TaskID:                          c.GetTaskId(),
		RequestID:                       c.GetRequestId(),
		ResponseID:                      c.GetResponseId(),
		ResultHash:                      c.GetResultHash(),
		PreviousAuditID:                 c.GetPreviousAuditId(),
		AuditRecordVersion:              c.GetAuditRecordVersion(),
		ActionID:                        c.GetActionId(),
		EvaluationID:                    c.GetEvaluationId(),
		DecisionID:                      c.GetDecisionId(),
		RequestedMethod:                 c.GetRequestedMethod(),
		ActingPrincipalID:               c.GetActingPrincipalId(),
		SynthesisID:                     c.GetSynthesisId(),
		ContractHash:                    c.GetContractHash(),
		NegotiationOrigin:               c.GetNegotiationOrigin(),
		StandingAuthorizationDecisionID: c.GetStandingAuthorizationDecisionId(),
		MerchantID:                      c.GetMerchantId(),
		MerchantFingerprint:             c.GetMerchantFingerprint(),
		IntentAssertionJTI:              c.GetIntentAssertionJti(),
		FromPrincipal:                   c.GetFromPrincipal(),
		ToPrincipal:                     c.GetToPrincipal(),
		ProcedureID:                     c.GetProcedureId(),
		EventType:                       c.GetEventType(),
		VerificationLevel:               int(c.GetVerificationLevel()),
		VerifiedBy:                      c.GetVerifiedBy(),
		CertificateFingerprint:          c.GetCertificateFingerprint(),
		TokenIssuer:                     c.GetTokenIssuer(),
		UnprovenAgentID:                 c.GetUnprovenAgentId(),
		PeerServer:                      c.GetPeerServer(),
	}
	if r := c.GetRunInput(); len(r) > 0 {
		if !json.Valid(r) {
			return attribution.Payload{}, fmt.Errorf("run_input is not a JSON value")
		}
		p.RunInput = r
	}
	if pa := c.GetPriorActions(); len(pa) > 0 {
		p.PriorActions = make([]attribution.PriorAction, len(pa))
		for i, a := range pa {
			p.PriorActions[i] = attribution.PriorAction{AgentID: a.GetAgentId(), AuditID: a.GetAuditId(), AgentURI: a.GetAgentUri()}
		}
	}
	if ex := c.GetExtra(); len(ex) > 0 {
		// A fresh map: the audit service deletes credential-like members
		// from it.
		p.Extra = make(map[string]json.RawMessage, len(ex))
		for k, v := range ex {
			if attribution.IsKnownMember(k) {
				return attribution.Payload{}, fmt.Errorf("extra member %q is a named member", k)
			}
			if !json.Valid(v) {
				return attribution.Payload{}, fmt.Errorf("extra member %q is not a JSON value", k)
			}
			p.Extra[k] = v
		}
	}
	return p, nil
}
