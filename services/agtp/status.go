package agtp

// Status codes of core §5.6 and §11.3, plus the HTTP-meaning codes the
// drafts use without listing (301 in §6.1.6, 501 in §5.5.3) and 425 for
// requests refused in QUIC 0-RTT data (docs/decisions.md#D-zero-rtt).
const (
	StatusOK                     = 200
	StatusAccepted               = 202
	StatusNoContent              = 204
	StatusNegotiationInProgress  = 261
	StatusAuthorizationRequired  = 262
	StatusProposalApproved       = 263
	StatusMovedPermanently       = 301
	StatusBadRequest             = 400
	StatusUnauthorized           = 401
	StatusForbidden              = 403
	StatusNotFound               = 404
	StatusMethodNotAllowed       = 405
	StatusTimeout                = 408
	StatusConflict               = 409
	StatusGone                   = 410
	StatusUnprocessable          = 422
	StatusTooEarly               = 425
	StatusRateLimited            = 429
	StatusScopeViolation         = 455
	StatusBudgetExceeded         = 456
	StatusZoneViolation          = 457
	StatusCounterpartyUnverified = 458
	StatusMethodViolation        = 459
	StatusEndpointViolation      = 460
	StatusRCNSContractAvailable  = 461
	StatusProposalRejected       = 463
	StatusRCNSNoContract         = 464
	StatusServerError            = 500
	StatusNotImplemented         = 501
	StatusUnavailable            = 503
	StatusDelegationFailure      = 550
	StatusAuthorityChainBroken   = 551
)

// StatusText returns the name core §5.6 gives code ("Reserved" for 462,
// 465 and 552-555), or "" for a code AGTP does not define. The text is
// informational only: no decision may rest on it (core §5.5.2).
func StatusText(code int) string {
	switch code {
	case StatusOK:
		return "OK"
	case StatusAccepted:
		return "Accepted"
	case StatusNoContent:
		return "No Content"
	case StatusNegotiationInProgress:
		return "Negotiation In Progress"
	case StatusAuthorizationRequired:
		return "Authorization Required"
	case StatusProposalApproved:
		return "Proposal Approved"
	case StatusMovedPermanently:
		return "Moved Permanently"
	case StatusBadRequest:
		return "Bad Request"
	case StatusUnauthorized:
		return "Unauthorized"
	case StatusForbidden:
		return "Forbidden"
	case StatusNotFound:
		return "Not Found"
	case StatusMethodNotAllowed:
		return "Method Not Allowed"
	case StatusTimeout:
		return "Timeout"
	case StatusConflict:
		return "Conflict"
	case StatusGone:
		return "Gone"
	case StatusUnprocessable:
		return "Unprocessable"
	case StatusTooEarly:
		return "Too Early"
	case StatusRateLimited:
		return "Rate Limited"
	case StatusScopeViolation:
		return "Scope Violation"
	case StatusBudgetExceeded:
		return "Budget Exceeded"
	case StatusZoneViolation:
		return "Zone Violation"
	case StatusCounterpartyUnverified:
		return "Counterparty Unverified"
	case StatusMethodViolation:
		return "Method Violation"
	case StatusEndpointViolation:
		return "Endpoint Violation"
	case StatusRCNSContractAvailable:
		return "RCNS Contract Available"
	case StatusProposalRejected:
		return "Proposal Rejected"
	case StatusRCNSNoContract:
		return "RCNS No Contract"
	case StatusServerError:
		return "Server Error"
	case StatusNotImplemented:
		return "Not Implemented"
	case StatusUnavailable:
		return "Unavailable"
	case StatusDelegationFailure:
		return "Delegation Failure"
	case StatusAuthorityChainBroken:
		return "Authority Chain Broken"
	}
	if IsReserved(code) {
		return "Reserved"
	}
	return ""
}

// IsSuccess reports whether code is 2xx (including 261-263).
func IsSuccess(code int) bool { return 200 <= code && code <= 299 }

// IsRedirect reports whether code is 3xx.
func IsRedirect(code int) bool { return 300 <= code && code <= 399 }

// IsClientError reports whether code is 4xx.
func IsClientError(code int) bool { return 400 <= code && code <= 499 }

// IsServerError reports whether code is 5xx.
func IsServerError(code int) bool { return 500 <= code && code <= 599 }

// IsAGTPSpecific reports whether code is in the AGTP-only ranges 261-263,
// 455-465 and 550-555. Core §5.6 calls these operational signals that
// MUST be logged.
func IsAGTPSpecific(code int) bool {
	return 261 <= code && code <= 263 || 455 <= code && code <= 465 || 550 <= code && code <= 555
}

// IsReserved reports whether code is allocated but reserved (462, 465,
// 552-555); such codes must not be emitted.
func IsReserved(code int) bool {
	return code == 462 || code == 465 || 552 <= code && code <= 555
}
