// Package attribution signs, identifies and verifies AGTP Attribution-Records
// (core §5.5.4, §8; docs/decisions.md#D-attribution-payload) and the per-agent hash chains they form.
//
// A record is a JWS Compact serialization whose payload is a JSON object
// (Payload). Its Audit-ID is the lowercase hex SHA-256 of the exact JWS
// string, and each record's previous_audit_id names the Audit-ID of the
// record before it in the same chain (ZeroAuditID for the first record).
//
// The package is public so that the front door, the client library and the
// `agtp audit verify` CLI share one implementation of the format and of the
// verification rules.
package attribution

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ZeroAuditID is the previous_audit_id of the first record in a chain.
const ZeroAuditID = "0000000000000000000000000000000000000000000000000000000000000000"

// RecordVersion is the audit_record_version this package writes.
const RecordVersion = "1"

// Values of negotiation_origin (AGTP-IDENTIFIERS).
const (
	OriginRCNSGate      = "rcns-gate"
	OriginPropose       = "propose"
	OriginPreRegistered = "pre-registered"
)

// PriorAction is one element of prior_actions: an earlier action by another
// agent that this action depends on.
type PriorAction struct {
	AgentID  string `json:"agent_id"`
	AuditID  string `json:"audit_id"`
	AgentURI string `json:"agent_uri,omitempty"`
}

// Payload is the JSON payload of an Attribution-Record. The named members
// are those of docs/decisions.md#D-attribution-payload (base fields, AGTP-IDENTIFIERS fields,
// merchant fields) plus event_type for lifecycle and other signed events.
// Members the struct does not name survive a decode/encode round trip in
// Extra, so a verifier never drops what a newer signer put in.
type Payload struct {
	ServerID           string `json:"server_id,omitempty"`
	Timestamp          string `json:"timestamp,omitempty"`
	RequestHash        string `json:"request_hash,omitempty"`
	Status             int    `json:"status,omitempty"`
	Method             string `json:"method,omitempty"`
	AgentID            string `json:"agent_id,omitempty"`
	OwnerID            string `json:"owner_id,omitempty"`
	SessionID          string `json:"session_id,omitempty"`
	TaskID             string `json:"task_id,omitempty"`
	RequestID          string `json:"request_id,omitempty"`
	ResponseID         string `json:"response_id,omitempty"`
	ResultHash         string `json:"result_hash,omitempty"`
	PreviousAuditID    string `json:"previous_audit_id,omitempty"`
	AuditRecordVersion string `json:"audit_record_version,omitempty"`

	ActionID                        string        `json:"action_id,omitempty"`
	EvaluationID                    string        `json:"evaluation_id,omitempty"`
	DecisionID                      string        `json:"decision_id,omitempty"`
	RequestedMethod                 string        `json:"requested_method,omitempty"`
	ActingPrincipalID               string        `json:"acting_principal_id,omitempty"`
	SynthesisID                     string        `json:"synthesis_id,omitempty"`
	ContractHash                    string        `json:"contract_hash,omitempty"`
	NegotiationOrigin               string        `json:"negotiation_origin,omitempty"`
	PriorActions                    []PriorAction `json:"prior_actions,omitempty"`
	StandingAuthorizationDecisionID string        `json:"standing_authorization_decision_id,omitempty"`
	MerchantID                      string        `json:"merchant_id,omitempty"`
	MerchantFingerprint             string        `json:"merchant_fingerprint,omitempty"`
	IntentAssertionJTI              string        `json:"intent_assertion_jti,omitempty"`

	// Tier 2 members (standard methods §10.3, §10.6): a TRANSFER's
	// parties, and a RUN's procedure and input parameters.
	FromPrincipal string          `json:"from_principal,omitempty"`
	ToPrincipal   string          `json:"to_principal,omitempty"`
	ProcedureID   string          `json:"procedure_id,omitempty"`
	RunInput      json.RawMessage `json:"run_input,omitempty"`

	// EventType names the event of a lifecycle record or other signed
	// event (e.g. "agent-lifecycle-suspended"); empty on response records.
	EventType string `json:"event_type,omitempty"`

	// Caller proof (docs/identity.md, "Proven callers"): the core §10.2
	// verification level, what proved the caller, the client
	// certificate's SHA-256, the proving token's issuer, an Agent-ID
	// header that proved nothing and was ignored, and the peer server
	// that vouched for the caller.
	VerificationLevel      int    `json:"verification_level,omitempty"`
	VerifiedBy             string `json:"verified_by,omitempty"`
	CertificateFingerprint string `json:"certificate_fingerprint,omitempty"`
	TokenIssuer            string `json:"token_issuer,omitempty"`
	UnprovenAgentID        string `json:"unproven_agent_id,omitempty"`
	PeerServer             string `json:"peer_server,omitempty"`

	// Extra holds members not named above, raw JSON values by member
	// name.
	Extra map[string]json.RawMessage `json:"-"`
}

// payloadFields is Payload without its methods, so that encoding/json does
// the work for the named members.
type payloadFields Payload

// knownMembers lists the JSON names of Payload's named members.
var knownMembers = func() map[string]bool {
	m := map[string]bool{}
	b, _ := json.Marshal(payloadFields{
		ServerID: "x", Timestamp: "x", RequestHash: "x", Status: 1, Method: "x", AgentID: "x", OwnerID: "x",
		SessionID: "x", TaskID: "x", RequestID: "x", ResponseID: "x", ResultHash: "x", PreviousAuditID: "x",
		AuditRecordVersion: "x", ActionID: "x", EvaluationID: "x", DecisionID: "x", RequestedMethod: "x",
		ActingPrincipalID: "x", SynthesisID: "x", ContractHash: "x", NegotiationOrigin: "x",
		PriorActions: []PriorAction{{}}, StandingAuthorizationDecisionID: "x", MerchantID: "x",
		MerchantFingerprint: "x", IntentAssertionJTI: "x", FromPrincipal: "x", ToPrincipal: "x", ProcedureID: "x",
		RunInput: json.RawMessage(`{}`), EventType: "x",
		VerificationLevel: 1, VerifiedBy: "x", CertificateFingerprint: "x", TokenIssuer: "x", UnprovenAgentID: "x", PeerServer: "x",
	})
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	for k := range raw {
		m[k] = true
	}
	return m
}()

// IsKnownMember reports whether name is one of Payload's named members.
func IsKnownMember(name string) bool { return knownMembers[name] }

// foldsToMember returns the named member encoding/json decodes name into
// when name is not that member's exact spelling: the decoder matches
// names with strings.EqualFold, so "Method" and "\u017Ftatus" (with a
// long s) fill Method and Status, while a case-sensitive verifier sees
// unknown members.
func foldsToMember(name string) (string, bool) {
	if knownMembers[name] {
		return "", false
	}
	for m := range knownMembers {
		if strings.EqualFold(name, m) {
			return m, true
		}
	}
	return "", false
}

// MarshalJSON writes the named members, then the Extra members in sorted
// order. An Extra member that shadows a named member, in any case, is an
// error: the record would otherwise carry the member twice.
func (p Payload) MarshalJSON() ([]byte, error) { return p.appendJSON(nil) }

// appendJSON appends p's JSON encoding (MarshalJSON) to dst.
func (p *Payload) appendJSON(dst []byte) ([]byte, error) {
	b, ok := p.appendNamed(dst)
	if !ok {
		named, err := json.Marshal((*payloadFields)(p))
		if err != nil {
			return nil, err
		}
		b = append(dst, named...)
	}
	if len(p.Extra) == 0 {
		return b, nil
	}
	start := len(dst)
	keys := make([]string, 0, len(p.Extra))
	for k := range p.Extra {
		if _, folds := foldsToMember(k); knownMembers[k] || folds {
			return nil, fmt.Errorf("attribution: extra member %q shadows a named member", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	first := len(b)-start == 2           // "{}"
	buf := bytes.NewBuffer(b[:len(b)-1]) // drop the closing brace
	for _, k := range keys {
		v := p.Extra[k]
		if !json.Valid(v) {
			return nil, fmt.Errorf("attribution: extra member %q is not valid JSON", k)
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if err := json.Compact(buf, v); err != nil {
			return nil, fmt.Errorf("attribution: extra member %q: %w", k, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads a JSON object into the named members and Extra.
// The common case, a payload with only named members, takes one decoding
// pass; unknown members cost a second one.
func (p *Payload) UnmarshalJSON(data []byte) error {
	var f payloadFields
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	err := d.Decode(&f)
	if err == nil {
		if len(bytes.TrimSpace(data[d.InputOffset():])) != 0 {
			return errors.New("attribution: data after the payload object")
		}
		if f.Extra != nil || bytes.HasPrefix(bytes.TrimSpace(data), []byte("null")) {
			return errors.New("attribution: payload is not a JSON object")
		}
		*p = Payload(f)
		return nil
	}
	if !strings.HasPrefix(err.Error(), "json: unknown field") {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	f = payloadFields{}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	for k, v := range raw {
		if knownMembers[k] {
			continue
		}
		if f.Extra == nil {
			f.Extra = map[string]json.RawMessage{}
		}
		f.Extra[k] = v
	}
	*p = Payload(f)
	return nil
}

// CheckNoDuplicateMembers refuses a JSON object with a repeated top-level
// member name: a signed payload whose meaning depends on which duplicate a
// parser keeps is ambiguous. A name that differs from a named member only
// in case is refused too, since encoding/json reads it into that member
// and other parsers do not. data must be valid JSON.
func CheckNoDuplicateMembers(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if n := topLevelMembers(data); n != len(raw) {
		return errors.New("attribution: payload has duplicate member names")
	}
	for k := range raw {
		if m, folds := foldsToMember(k); folds {
			return fmt.Errorf("attribution: payload member %q differs from %q only in case", k, m)
		}
	}
	return nil
}

// topLevelMembers counts the members of a valid JSON object.
func topLevelMembers(data []byte) int {
	depth, n, inStr, seen := 0, 0, false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			if depth == 1 {
				seen = true
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				n++
			}
		}
	}
	if !seen {
		return 0
	}
	return n + 1
}

// IsAuditID reports whether s is 64 lowercase hex characters.
func IsAuditID(s string) bool { return isLowerHex(s, 64) }

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// secretMembers are member names that must never appear in a record
// (core §8.6: only the validated acting_principal_id goes in; digest
// companions assertion 57).
var secretMembers = []string{"authorization", "access_token", "refresh_token", "password", "secret", "api_key", "private_key", "credential", "token"}

// IsSecretMember reports whether an Extra member name looks like a
// credential that must not be written into a signed record.
func IsSecretMember(name string) bool {
	l := strings.ToLower(name)
	for _, s := range secretMembers {
		if l == s || strings.HasSuffix(l, "_"+s) || strings.HasPrefix(l, s+"_") {
			return true
		}
	}
	return false
}
