package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Errors a Client returns. Transport failures are wrapped, so test them
// with errors.Is.
var (
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("agtp client: closed")
	// ErrNoResponse: the connection ended (closed or reset by the server)
	// after the request was sent and before any byte of its response
	// arrived. The server may or may not have acted on the request.
	// Idempotent requests (see Idempotent) that meet this on a reused
	// connection are retried once per pooled connection before the error
	// is returned; others are not, because they might run twice. Resend
	// them with the same Idempotency-Key to be safe.
	ErrNoResponse = errors.New("agtp client: connection closed before any response byte")
	// ErrNoAddress: the URI is Form 1 (agtp://{agent-id}), which names an
	// agent but no server; resolve it through a registry first, or use
	// Form 1a (agtp://{agent-id}@host[:port]) with a resolution hint.
	ErrNoAddress = errors.New("agtp client: the URI names no server to connect to")
	// ErrAgentMismatch: a Form 1a request was answered with an Identity
	// Document of another agent, which core §6.1.2 requires clients to
	// reject.
	ErrAgentMismatch = errors.New("agtp client: identity document is for another agent than the URI names")
	// ErrSeriesTooLong: Do read Options.MaxSeries responses to one
	// request and the server announced more; use Stream for long series.
	ErrSeriesTooLong = errors.New("agtp client: too many streamed responses for Do")
)

// noResponseError is ErrNoResponse with the facts the retry rule needs.
type noResponseError struct {
	err    error
	reused bool // the connection had carried earlier requests
	unsent bool // nothing of the request was written
}

func (e *noResponseError) Error() string {
	return ErrNoResponse.Error() + ": " + e.err.Error()
}

func (e *noResponseError) Unwrap() []error { return []error{ErrNoResponse, e.err} }

// Idempotent reports whether req may be sent again after ErrNoResponse
// without risk of acting twice: its method is idempotent in core §7.3
// (QUERY, DISCOVER, DESCRIBE, INSPECT, SUMMARIZE, PLAN, ESCALATE,
// CONFIRM), or it carries an Idempotency-Key, which makes the server
// answer a repeat from its record of the first
// (docs/decisions.md#D-idempotency-replay).
func Idempotent(req *agtp.Request) bool {
	switch req.Method {
	case agtp.MethodQuery, agtp.MethodDiscover, agtp.MethodDescribe, agtp.MethodInspect,
		agtp.MethodSummarize, agtp.MethodPlan, agtp.MethodEscalate, agtp.MethodConfirm:
		return true
	}
	return req.Header.Has(agtp.HeaderIdempotencyKey)
}

// contextError turns a failure caused by ctx (its deadline mapped onto
// the connection, or its cancellation) into ctx's error, so that callers
// can test for context.DeadlineExceeded.
func contextError(ctx context.Context, deadline time.Time, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("agtp client: %w (%v)", cerr, err)
	}
	var ne net.Error
	if !deadline.IsZero() && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(deadline) {
		return fmt.Errorf("agtp client: %w (%v)", context.DeadlineExceeded, err)
	}
	return nil
}

// isRequestInvalid reports an error agtp.Request.Write returns before
// writing anything, for a request that must not be sent.
func isRequestInvalid(err error) bool {
	return errors.Is(err, agtp.ErrInvalidMethod) || errors.Is(err, agtp.ErrInvalidTarget) ||
		errors.Is(err, agtp.ErrInvalidHeader) || errors.Is(err, agtp.ErrMissingContentType)
}
