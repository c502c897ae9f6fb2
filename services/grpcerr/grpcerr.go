// Package grpcerr is the one way internal services turn failures into gRPC
// status errors, and the one way the front door reads them back.
//
// Every error an internal service returns to a caller carries a gRPC code and
// an AGTP reason token (in a google.rpc.ErrorInfo detail, domain "agtp").
// The front door maps the code to an AGTP status through StatusFor and puts
// the reason token into the error body, so callers see a specific reason
// instead of a generic failure. Internal errors are masked: the caller gets
// "internal" and the cause is logged by the server.
package grpcerr

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain for reasons defined by this suite.
const Domain = "agtp"

// New returns a status error with the code, the AGTP reason token and a
// human explanation. Metadata members (string-valued) travel in the
// ErrorInfo and end up in the AGTP error body.
func New(code codes.Code, reason, explanation string, metadata ...string) error {
	st := status.New(code, explanation)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: Domain}
	if len(metadata) > 0 {
		info.Metadata = make(map[string]string, len(metadata)/2)
		for i := 0; i+1 < len(metadata); i += 2 {
			info.Metadata[metadata[i]] = metadata[i+1]
		}
	}
	withInfo, err := st.WithDetails(info)
	if err != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// Newf is New with a formatted explanation.
func Newf(code codes.Code, reason, format string, args ...any) error {
	return New(code, reason, fmt.Sprintf(format, args...))
}

// InvalidArgument is a malformed request (AGTP 400).
func InvalidArgument(reason, explanation string, metadata ...string) error {
	return New(codes.InvalidArgument, reason, explanation, metadata...)
}

// NotFound is an unknown record, agent or endpoint (AGTP 404).
func NotFound(reason, explanation string, metadata ...string) error {
	return New(codes.NotFound, reason, explanation, metadata...)
}

// FailedPrecondition is well-formed but semantically impossible (AGTP 422).
func FailedPrecondition(reason, explanation string, metadata ...string) error {
	return New(codes.FailedPrecondition, reason, explanation, metadata...)
}

// Conflict is a conflict with current state (AGTP 409).
func Conflict(reason, explanation string, metadata ...string) error {
	return New(codes.Aborted, reason, explanation, metadata...)
}

// PermissionDenied is an authenticated caller without authority (AGTP 403).
func PermissionDenied(reason, explanation string, metadata ...string) error {
	return New(codes.PermissionDenied, reason, explanation, metadata...)
}

// Unauthenticated is a caller that could not be authenticated (AGTP 401).
func Unauthenticated(reason, explanation string, metadata ...string) error {
	return New(codes.Unauthenticated, reason, explanation, metadata...)
}

// Unavailable is a dependency that is down (AGTP 503).
func Unavailable(reason, explanation string, metadata ...string) error {
	return New(codes.Unavailable, reason, explanation, metadata...)
}

// Internal wraps an unexpected failure. The cause stays in the server's log
// (through the logging interceptor); the caller sees only "internal".
func Internal(cause error) error {
	return &internalError{cause: cause}
}

type internalError struct{ cause error }

func (e *internalError) Error() string { return "internal: " + e.cause.Error() }
func (e *internalError) Unwrap() error { return e.cause }

// GRPCStatus masks the cause towards the caller.
func (e *internalError) GRPCStatus() *status.Status {
	st, _ := status.New(codes.Internal, "internal error").WithDetails(&errdetails.ErrorInfo{Reason: "internal", Domain: Domain})
	return st
}

// FromContext turns a context error into the matching status error, so a
// cancelled or timed-out call is not reported as an internal failure.
func FromContext(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return New(codes.DeadlineExceeded, "deadline-exceeded", "the request's deadline passed")
	case errors.Is(err, context.Canceled):
		return New(codes.Canceled, "canceled", "the request was canceled")
	}
	return nil
}

// Reason returns the AGTP reason token, explanation and metadata carried by
// err, and its gRPC code.
func Reason(err error) (code codes.Code, reason, explanation string, metadata map[string]string) {
	st, ok := status.FromError(err)
	if !ok {
		return codes.Unknown, "internal", "internal error", nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return st.Code(), info.GetReason(), st.Message(), info.GetMetadata()
		}
	}
	return st.Code(), defaultReason(st.Code()), st.Message(), nil
}

// StatusFor is the single table from gRPC codes to AGTP status codes.
func StatusFor(code codes.Code) int {
	switch code {
	case codes.OK:
		return 200
	case codes.InvalidArgument, codes.OutOfRange:
		return 400
	case codes.Unauthenticated:
		return 401
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.Aborted:
		return 409
	case codes.FailedPrecondition:
		return 422
	case codes.ResourceExhausted:
		return 429
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return 503
	case codes.Unimplemented:
		return 501
	default:
		return 500
	}
}

func defaultReason(code codes.Code) string {
	switch code {
	case codes.Unavailable:
		return "service-unavailable"
	case codes.DeadlineExceeded:
		return "deadline-exceeded"
	case codes.Canceled:
		return "canceled"
	case codes.Unimplemented:
		return "not-implemented"
	case codes.ResourceExhausted:
		return "rate-limited"
	case codes.NotFound:
		return "not-found"
	case codes.InvalidArgument:
		return "invalid-argument"
	case codes.PermissionDenied:
		return "forbidden"
	case codes.Unauthenticated:
		return "unauthenticated"
	}
	return "internal"
}
