package agtp

import (
	"errors"
	"strconv"
)

// ProtocolError is a message that breaks an AGTP wire rule. It carries
// the exact answer a server gives: Status and the Reason token of the
// error body (see [ErrorBody]).
//
// CloseConnection reports whether the byte stream is still framed. When
// false, the whole offending message was consumed, the next read starts
// at the next message, and the server may keep the connection; when true,
// the server answers and then closes.
//
// Errors from ReadResponse use the same type; there Status is only the
// status a server would have used.
type ProtocolError struct {
	Status          int
	Reason          string
	Explanation     string
	CloseConnection bool
}

func (e *ProtocolError) Error() string {
	return "agtp: " + strconv.Itoa(e.Status) + " " + e.Reason + ": " + e.Explanation
}

// Response returns the error response for e, with an [ErrorBody].
func (e *ProtocolError) Response() *Response {
	return NewErrorResponse(e.Status, e.Reason, e.Explanation)
}

func badRequest(reason, explanation string, closeConn bool) *ProtocolError {
	return &ProtocolError{Status: StatusBadRequest, Reason: reason, Explanation: explanation, CloseConnection: closeConn}
}

// Reasons this package produces for malformed input.
const (
	ReasonInvalidRequestLine          = "invalid-request-line"
	ReasonInvalidStatusLine           = "invalid-status-line"
	ReasonMethodInvalid               = "method-invalid" // with 459
	ReasonInvalidHeader               = "invalid-header"
	ReasonRetiredHeader               = "retired-header"
	ReasonTransferEncodingUnsupported = "transfer-encoding-unsupported"
	ReasonContentLengthRequired       = "content-length-required"
	ReasonInvalidContentLength        = "invalid-content-length"
	ReasonRequestLineTooLong          = "request-line-too-long"
	ReasonHeaderSectionTooLarge       = "header-section-too-large"
	ReasonTooManyHeaderFields         = "too-many-header-fields"
	ReasonBodyTooLarge                = "body-too-large"
	ReasonInvalidCanonicalID          = "invalid-canonical-id" // core §6.1.8.1
	ReasonInvalidURIForm              = "invalid-uri-form"     // core §6.1.8.3
	ReasonInvalidAuthorityScope       = "invalid-authority-scope"
	ReasonInvalidBudget               = "invalid-budget"
	ReasonTooEarly                    = "too-early" // with 425, see AllowedIn0RTT
)

// Reason vocabularies the drafts define for other codes (core §5.6,
// §11.3), collected so that every component spells them the same way.
const (
	// 401
	ReasonAgentUnauthenticated     = "agent-unauthenticated"
	ReasonOAuthRequired            = "oauth-required"
	ReasonOAuthInvalid             = "oauth-invalid"
	ReasonACLAnonymousBlocked      = "acl-anonymous-blocked"
	ReasonGenesisIssuerCertMissing = "genesis-issuer-cert-required"
	// 262
	ReasonScopeRequired              = "scope-required"
	ReasonWildcardsRequired          = "wildcards-required"
	ReasonCredentialsMissing         = "credentials-missing"
	ReasonAnonymousDiscoveryDisabled = "anonymous-discovery-disabled"
	ReasonScopeClaimInvalid          = "scope-claim-invalid"
	// 463 (and composition-impossible for 464)
	ReasonOutOfScope            = "out-of-scope"
	ReasonPolicyRefused         = "policy-refused"
	ReasonCompositionImpossible = "composition-impossible"
	ReasonAmbiguous             = "ambiguous"
	ReasonSynthesisDisabled     = "synthesis-disabled"
	// 464
	ReasonRCNSDisabled          = "rcns-disabled"
	ReasonTrustTierInsufficient = "trust-tier-insufficient"
	ReasonSynthesisError        = "synthesis-error"
	ReasonContractNotYours      = "contract-not-yours"
	ReasonContractRevoked       = "contract-revoked"
	// 500
	ReasonPackageIntegrityFailure = "package-integrity-failure"
	// 409 (docs/decisions.md#D-idempotency-key, #D-idempotency-in-flight)
	ReasonIdempotencyKeyReused = "idempotency-key-reused"
	ReasonIdempotencyInFlight  = "idempotency-in-flight"
)

// Errors returned by Write for messages that must not be sent.
var (
	ErrInvalidStatus      = errors.New("agtp: invalid status code or status text")
	ErrInvalidMethod      = errors.New("agtp: method is not a token")
	ErrInvalidTarget      = errors.New("agtp: invalid request target")
	ErrInvalidHeader      = errors.New("agtp: invalid header field")
	ErrMissingContentType = errors.New("agtp: a message with a body must carry Content-Type")
	ErrBodyNotAllowed     = errors.New("agtp: 204 No Content must not carry a body")
)
