// Package answer holds what the front door's pipeline stages and its
// built-in methods share to answer a request: the AGTP error body, the
// mapping of a failed internal call to an AGTP status, JSON bodies, and
// the identifiers and keys both mint. It keeps the two packages from
// growing copies of each other.
package answer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
)

// Reason tokens of the input stage's refusals, which the AGP binding
// translates into its own error codes (frontdoor/internal/agp).
const (
	ReasonInputInvalid           = "input-invalid"
	ReasonUnsupportedContentType = "unsupported-content-type"
)

// Error builds an AGTP error response (core §5.7 error body); extra
// members go into the body. taskID is the request's Task-ID, echoed in
// the body.
func Error(taskID string, status int, reason, explanation string, extra map[string]any) *agtp.Response {
	body := agtp.ErrorBody{Status: status, Reason: reason, Explanation: explanation, TaskID: taskID, Extra: extra}
	resp, err := body.Response()
	if err != nil {
		return agtp.NewErrorResponse(agtp.StatusServerError, "internal", "error body could not be encoded")
	}
	return resp
}

// Failure is the AGTP refusal a failed internal call turns into.
type Failure struct {
	Status      int
	Reason      string
	Explanation string
	Extra       map[string]any
}

// Dependency maps a failed call to an internal service to the answer the
// caller gets. The service's own AGTP reason (from grpcerr) is passed on
// for refusals; an unreachable service is a 503 naming which part is
// missing; internal details are logged and masked.
func Dependency(ctx context.Context, log *slog.Logger, service string, err error) Failure {
	code, reason, explanation, meta := grpcerr.Reason(err)
	status := grpcerr.StatusFor(code)
	switch {
	case code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled:
		log.WarnContext(ctx, "internal service unavailable", "service", service, "error", err)
		return Failure{Status: agtp.StatusUnavailable, Reason: service + "-unavailable",
			Explanation: "a part of this server (" + service + ") is not reachable; retry shortly"}
	case status >= 500:
		log.ErrorContext(ctx, "internal service failed", "service", service, "error", err)
		return Failure{Status: agtp.StatusServerError, Reason: "internal", Explanation: "the request failed inside the server"}
	}
	extra := map[string]any{}
	for k, v := range meta {
		extra[k] = v
	}
	return Failure{Status: status, Reason: reason, Explanation: explanation, Extra: extra}
}

// JSON encodes v as a response body of the given media type.
func JSON(status int, contentType string, v any) (*agtp.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s body: %w", contentType, err)
	}
	return agtp.NewResponse(status, contentType, b), nil
}

// NewID is a fresh time-ordered identifier (a UUIDv7): Response-IDs,
// RCNS attempt IDs, the Task-ID of a RETRY's re-run.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// DecodeJSON decodes exactly one JSON value, numbers kept as json.Number.
// A number longer than endpoint.MaxNumberBytes or beyond a 64-bit
// float's finite range is refused (docs/wire.md "Numbers in JSON bodies"): schema
// validation would turn it into an exact rational, whose cost grows with
// the exponent. The error reads after "the body is ".
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if err := endpoint.CheckNumbers(v); err != nil {
		return nil, fmt.Errorf("refused: %w", err)
	}
	return v, nil
}

// DerivedKey is an invocation's Idempotency-Key: bound to the parent's
// key and to the invocation's place in the parent, so a retried parent
// replays the invocations that already ran.
func DerivedKey(parent, key string) string {
	sum := sha256.Sum256([]byte(parent + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// InheritedHeaders are the request fields a request run on a caller's
// behalf (a composition step, an MCP tool call, RETRY's re-run) carries
// over from the request that ran it: who calls, under which authority, in
// which session and task, with which credentials.
var InheritedHeaders = []string{
	agtp.HeaderAgentID, agtp.HeaderAuthorityScope, agtp.HeaderSessionID, agtp.HeaderTaskID,
	agtp.HeaderAuthorization, agtp.HeaderDelegationChain, agtp.HeaderBudgetLimit, agtp.HeaderZoneID,
	agtp.HeaderMerchantID, agtp.HeaderMerchantManifestFingerprint, agtp.HeaderIntentAssertion,
}
