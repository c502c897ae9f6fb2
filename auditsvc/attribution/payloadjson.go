package attribution

import (
	"encoding/json"
	"strconv"
)

// appendNamed appends the JSON object of p's named members, exactly as
// encoding/json writes payloadFields, and reports whether it could: a
// payload with run_input (raw JSON that encoding/json compacts and
// validates) is left to encoding/json. Every record is signed over this
// encoding, so it must not differ from encoding/json's by a byte
// (FuzzPayloadEncoding); writing it directly saves the reflection and the
// allocations of encoding/json on every record (docs/performance.md).
func (p *Payload) appendNamed(b []byte) ([]byte, bool) {
	if len(p.RunInput) != 0 {
		return b, false
	}
	w := memberWriter{b: append(b, '{')}
	w.str("server_id", p.ServerID)
	w.str("timestamp", p.Timestamp)
	w.str("request_hash", p.RequestHash)
	w.int("status", p.Status)
	w.str("method", p.Method)
	w.str("agent_id", p.AgentID)
	w.str("owner_id", p.OwnerID)
	w.str("session_id", p.SessionID)
	w.str("task_id", p.TaskID)
	w.str("request_id", p.RequestID)
	w.str("response_id", p.ResponseID)
	w.str("result_hash", p.ResultHash)
	w.str("previous_audit_id", p.PreviousAuditID)
	w.str("audit_record_version", p.AuditRecordVersion)
	w.str("action_id", p.ActionID)
	w.str("evaluation_id", p.EvaluationID)
	w.str("decision_id", p.DecisionID)
	w.str("requested_method", p.RequestedMethod)
	w.str("acting_principal_id", p.ActingPrincipalID)
	w.str("synthesis_id", p.SynthesisID)
	w.str("contract_hash", p.ContractHash)
	w.str("negotiation_origin", p.NegotiationOrigin)
	if len(p.PriorActions) > 0 {
		w.name("prior_actions")
		w.b = append(w.b, '[')
		for i, a := range p.PriorActions {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, `{"agent_id":`...)
			w.b = appendString(w.b, a.AgentID)
			w.b = append(w.b, `,"audit_id":`...)
			w.b = appendString(w.b, a.AuditID)
			if a.AgentURI != "" {
				w.b = append(w.b, `,"agent_uri":`...)
				w.b = appendString(w.b, a.AgentURI)
			}
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	w.str("standing_authorization_decision_id", p.StandingAuthorizationDecisionID)
	w.str("merchant_id", p.MerchantID)
	w.str("merchant_fingerprint", p.MerchantFingerprint)
	w.str("intent_assertion_jti", p.IntentAssertionJTI)
	w.str("from_principal", p.FromPrincipal)
	w.str("to_principal", p.ToPrincipal)
	w.str("procedure_id", p.ProcedureID)
	w.str("event_type", p.EventType)
	w.int("verification_level", p.VerificationLevel)
	w.str("verified_by", p.VerifiedBy)
	w.str("certificate_fingerprint", p.CertificateFingerprint)
	w.str("token_issuer", p.TokenIssuer)
	w.str("unproven_agent_id", p.UnprovenAgentID)
	w.str("peer_server", p.PeerServer)
	return append(w.b, '}'), true
}

// memberWriter appends the members of one JSON object, leaving out the
// empty ones as omitempty does.
type memberWriter struct {
	b    []byte
	more bool
}

func (w *memberWriter) name(n string) {
	if w.more {
		w.b = append(w.b, ',')
	}
	w.more = true
	w.b = append(w.b, '"')
	w.b = append(w.b, n...) // member names are plain ASCII
	w.b = append(w.b, '"', ':')
}

func (w *memberWriter) str(n, v string) {
	if v == "" {
		return
	}
	w.name(n)
	w.b = appendString(w.b, v)
}

func (w *memberWriter) int(n string, v int) {
	if v == 0 {
		return
	}
	w.name(n)
	w.b = strconv.AppendInt(w.b, int64(v), 10)
}

// appendString appends s as a JSON string. Identifiers, hashes and
// timestamps are printable ASCII that needs no escape and are copied as
// they are; anything else (a quote, a control character, '<', '>', '&',
// non-ASCII) is encoded by encoding/json itself, so its escaping rules
// (HTML-safe, invalid UTF-8 replaced) are the ones applied.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
