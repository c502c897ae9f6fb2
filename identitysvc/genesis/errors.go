package genesis

import "fmt"

// Reason tokens of Genesis failures. Services turn them into gRPC errors
// with grpcerr; the CLI prints them.
const (
	// ReasonMalformed: not JSON, not an object, not I-JSON, or too large.
	ReasonMalformed = "genesis-malformed"
	// ReasonFieldMissing: a required member is absent or empty.
	ReasonFieldMissing = "genesis-field-missing"
	// ReasonFieldInvalid: a member has the wrong type or value.
	ReasonFieldInvalid = "genesis-field-invalid"
	// ReasonHashMismatch: agent_id differs from the recomputed hash.
	ReasonHashMismatch = "genesis-hash-mismatch"
	// ReasonSignatureInvalid: the signature does not verify with
	// issuer_public_key.
	ReasonSignatureInvalid = "genesis-signature-invalid"
)

// Error is a Genesis that failed parsing, validation or verification.
type Error struct {
	// Reason is one of the Reason* tokens.
	Reason string
	// Field names the offending member, when there is one.
	Field string
	// Msg explains the failure to a human.
	Msg string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("genesis: %s: %s: %s", e.Reason, e.Field, e.Msg)
	}
	return fmt.Sprintf("genesis: %s: %s", e.Reason, e.Msg)
}

func missing(field string) *Error {
	return &Error{Reason: ReasonFieldMissing, Field: field, Msg: "required member is missing or empty"}
}

func invalid(field, format string, args ...any) *Error {
	return &Error{Reason: ReasonFieldInvalid, Field: field, Msg: fmt.Sprintf(format, args...)}
}
