package agp

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/services/agtp"
)

// ContentType is the media type of every AGP body.
const ContentType = "application/json"

// AGP error codes (AGP §19.1) and the ones this binding adds.
const (
	CodeValidation         = "VALIDATION_ERROR"
	CodeBusinessNotFound   = "BUSINESS_NOT_FOUND"
	CodeCapabilityNotFound = "CAPABILITY_NOT_FOUND"
	CodeWrongOperation     = "OPERATION_NOT_SUPPORTED"
	CodeAdapterError       = "ADAPTER_ERROR"
	CodeAdapterTimeout     = "ADAPTER_TIMEOUT"
	CodeTransactionUnknown = "TRANSACTION_NOT_FOUND"
	CodeInternal           = "INTERNAL_ERROR"
	CodeUnauthorized       = "UNAUTHORIZED"
	CodeForbidden          = "FORBIDDEN"
	CodeRateLimited        = "RATE_LIMITED"
	CodeUnavailable        = "SERVICE_UNAVAILABLE"
	// CodeRouteNotFound and CodeMethodNotAllowed answer a request no AGP
	// route takes: an unknown path under /agp/ or /keys, or a known one
	// with another method (405, with Allow).
	CodeRouteNotFound    = "NOT_FOUND"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// CodeAgentMismatch: an admin key tried to manage the keys of an agent
	// other than its own.
	CodeAgentMismatch = "AGENT_MISMATCH"
)

// maxMessage bounds an error message (AGP §19.1 truncates adapter errors
// to 500 characters; every message is held to it).
const maxMessage = 500

// errorBody is AGP §5.2's error response.
type errorBody struct {
	Error      string         `json:"error"`
	Message    string         `json:"message,omitempty"`
	Code       string         `json:"code,omitempty"`
	RequestID  string         `json:"requestId,omitempty"`
	RetryAfter int64          `json:"retryAfter,omitempty"`
	Details    map[string]any `json:"details,omitempty"`
}

// apiError is an AGP error before it is encoded.
type apiError struct {
	Status     int
	Code       string
	Error      string
	Message    string
	RetryAfter int64
	Details    map[string]any
}

func (e *apiError) body(requestID string) []byte {
	msg := e.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	short := e.Error
	if short == "" {
		short = http.StatusText(e.Status)
	}
	if short == "" {
		// AGTP's own codes (461, 463, 464) have no HTTP text, and AGP
		// §5.2 requires the member.
		short = agtp.StatusText(e.Status)
	}
	if short == "" {
		short = "Error"
	}
	b, _ := json.Marshal(errorBody{Error: short, Message: msg, Code: e.Code, RequestID: requestID, RetryAfter: e.RetryAfter, Details: e.Details})
	return b
}

// response is the error as the AGTP response the pipeline signs.
func (e *apiError) response(requestID string) *agtp.Response {
	return agtp.NewResponse(e.Status, ContentType, e.body(requestID))
}

// succeeded says whether an AGTP status is a success for AGP: the 2xx
// range short of AGTP's own 26x codes (262 is a scope refusal).
func succeeded(status int) bool { return status >= 200 && status < 260 }

// structural are the AGTP reasons of a call that names no endpoint.
func structural(status int) bool {
	switch status {
	case agtp.StatusNotFound, agtp.StatusMethodNotAllowed, agtp.StatusMethodViolation, agtp.StatusEndpointViolation:
		return true
	}
	return false
}

// fromAGTP maps an AGTP error answer to AGP's error model (AGP §19).
func fromAGTP(resp *agtp.Response) *apiError {
	var eb agtp.ErrorBody
	if err := json.Unmarshal(resp.Body, &eb); err != nil || eb.Reason == "" {
		eb = agtp.ErrorBody{Status: resp.Status, Reason: "internal", Explanation: "the request failed"}
	}
	status, reason, msg := resp.Status, eb.Reason, eb.Explanation
	details := map[string]any{"agtpStatus": status, "agtpReason": reason}
	e := &apiError{Status: status, Code: codeOf(reason), Message: msg, Details: details}
	switch {
	case reason == answer.ReasonInputInvalid:
		e.Status, e.Code, e.Error = http.StatusBadRequest, CodeValidation, "Validation failed"
		if v, ok := eb.Extra["violations"]; ok {
			details["violations"] = v
		}
	case status == agtp.StatusBadRequest || reason == answer.ReasonUnsupportedContentType:
		e.Status, e.Code, e.Error = http.StatusBadRequest, CodeValidation, "Validation failed"
	case structural(status):
		e.Status, e.Code, e.Error = http.StatusBadRequest, CodeCapabilityNotFound, "Capability not found"
	case status == agtp.StatusUnauthorized, reason == callerpolicy.ReasonAgentRetired:
		e.Status, e.Code, e.Error = http.StatusUnauthorized, CodeUnauthorized, "Unauthorized"
	case status == agtp.StatusAuthorizationRequired:
		// Authority-Scope refusals (262): the key's agent lacks a scope the
		// endpoint requires.
		e.Status, e.Code, e.Error = http.StatusForbidden, CodeForbidden, "Forbidden"
		if s, ok := eb.Extra["scope"].(string); ok {
			e.Message = "Missing required scope: " + s
			details["scope"] = s
		}
	case status == http.StatusForbidden, status >= 455 && status <= 458, reason == callerpolicy.ReasonAgentSuspended:
		e.Status, e.Error = http.StatusForbidden, "Forbidden"
	case status == agtp.StatusRateLimited:
		e.Status, e.Code, e.Error = http.StatusTooManyRequests, CodeRateLimited, "Rate limit exceeded"
		e.RetryAfter = int64Of(eb.Extra["retry_after_seconds"])
		if l, ok := eb.Extra["limit"].(string); ok {
			details["limit"] = l
		}
	case status == agtp.StatusConflict:
		e.Error = "Conflict"
		if r, ok := eb.Extra["retry_after_seconds"]; ok {
			e.RetryAfter = int64Of(r)
		}
	case reason == "handler-timeout" || reason == "upstream_timeout":
		e.Status, e.Code, e.Error = http.StatusGatewayTimeout, CodeAdapterTimeout, "Adapter timeout"
	case reason == "output-invalid" || strings.HasPrefix(reason, "upstream_") || reason == "composition_failed":
		e.Status, e.Code, e.Error = http.StatusBadGateway, CodeAdapterError, "Adapter error"
	case status == agtp.StatusUnprocessable:
		// A handler's declared error: the business said no.
		e.Error = "Unprocessable"
	case status == agtp.StatusUnavailable:
		e.Status, e.Code, e.Error = http.StatusServiceUnavailable, CodeUnavailable, "Service unavailable"
	case status >= 500:
		e.Status, e.Code, e.Error = http.StatusInternalServerError, CodeInternal, "Internal error"
	}
	if e.Status < 400 || e.Status > 599 {
		e.Status = http.StatusInternalServerError
	}
	return e
}

// codeOf turns an AGTP reason token into an AGP code: idempotency-key-reused
// becomes IDEMPOTENCY_KEY_REUSED.
func codeOf(reason string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(reason))
}

func int64Of(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case json.Number:
		i, _ := n.Int64()
		return i
	case int64:
		return n
	case int:
		return int64(n)
	}
	return 0
}

// operationEnvelope is AGP §5.1's transaction envelope.
type operationEnvelope struct {
	TransactionID string          `json:"transactionId"`
	Status        string          `json:"status"`
	Data          json.RawMessage `json:"data"`
}

// resultOf takes the result out of core §5.7's response envelope.
func resultOf(body []byte) json.RawMessage {
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &env); err != nil || len(env.Result) == 0 {
		return json.RawMessage(body)
	}
	return env.Result
}
