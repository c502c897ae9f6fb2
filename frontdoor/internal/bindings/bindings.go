// Package bindings holds what the front door's handler-binding executors
// share (AGTP-API §12): the Invoker through which a composition or the MCP
// tool gateway calls other endpoints of the same server, the nesting depth
// of such calls, ${VAR} placeholder expansion for external_service
// bindings, and which outcomes are settled answers (Replayable) and which
// failures a retry may cure (Transient).
//
// The executors themselves are in the sub-packages: upstream
// (external_service over HTTPS and gRPC, and MCP servers over their HTTP
// transport), composition (recipes) and carried (framework payloads
// carried by EXECUTE, core §8).
package bindings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agtpsuite/agtp/frontdoor/handler"
)

// Invocation is one call of another endpoint on the same server, made
// under the caller's identity.
type Invocation struct {
	Method string
	// Path is a concrete request path, percent-encoded.
	Path string
	// Input is the parameters object, JSON.
	Input json.RawMessage
	// Key names the invocation within the call that makes it (recipe and
	// step). With the parent's Idempotency-Key it derives the step's own
	// key, so a retried composite replays the steps that already ran.
	Key string
}

// Outcome is what an invocation answered.
type Outcome struct {
	// Status is the AGTP status.
	Status int
	// Output is the result member of a success envelope.
	Output json.RawMessage
	// Reason and Explanation describe a failure; Body is the whole error
	// body.
	Reason      string
	Explanation string
	Body        json.RawMessage
	// AuditID is the Audit-ID of the invocation's Attribution-Record;
	// empty when the invocation never reached the pipeline.
	AuditID string
}

// OK reports a 2xx outcome.
func (o *Outcome) OK() bool { return o.Status >= 200 && o.Status <= 299 }

// Invoker runs other endpoints through the pipeline's own rules
// (structure, identity, scopes, input and output validation, policy,
// audit), in-process.
type Invoker interface {
	// Invoke runs one endpoint. err is reserved for failures that produce
	// no AGTP answer (the caller gave up); refusals are Outcomes.
	Invoke(ctx context.Context, in Invocation) (*Outcome, error)
	// Check reports, before anything runs, whether the caller may call
	// the endpoint declared at (method, path template): nil when it may
	// or when no endpoint is declared at exactly that template (the call
	// itself then decides), otherwise the refusal.
	Check(method, pathTemplate string) *Outcome
}

type depthKey struct{}

// Depth is how many invocations deep ctx is (0 for the caller's own
// request).
func Depth(ctx context.Context) int {
	d, _ := ctx.Value(depthKey{}).(int)
	return d
}

// Deeper returns ctx one invocation deeper.
func Deeper(ctx context.Context) context.Context {
	return context.WithValue(ctx, depthKey{}, Depth(ctx)+1)
}

var (
	placeholderRe = regexp.MustCompile(`\$\{([^}]*)\}`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Expand replaces every ${VAR} in s with lookup(VAR). Every unresolved
// or malformed placeholder is named in the error (AGTP-API §12.3: an
// unresolved placeholder fails the binding).
func Expand(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var missing []string
	out := placeholderRe.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		if !envNameRe.MatchString(name) {
			missing = append(missing, "${"+name+"} (not a variable name)")
			return ""
		}
		if lookup != nil {
			if v, ok := lookup(name); ok {
				return v
			}
		}
		missing = append(missing, "${"+name+"}")
		return ""
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("unresolved placeholder %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// Replayable reports whether an outcome with status is the request's own,
// settled answer, which is stored under its Idempotency-Key and replayed
// to a retry: successes and client errors, except 401, 409 and 429
// (credentials, conflicts of the moment and rate limits change with time).
// A 5xx never is: it says the server or something it depends on failed,
// not what the request asked for.
func Replayable(status int) bool {
	switch {
	case status >= 500:
		return false
	case status == 401, status == 409, status == 429:
		return false
	}
	return true
}

// Transient marks a binding's declared error as a failure of what the
// binding depends on (an upstream that timed out, could not be reached or
// answered 5xx; a composition step that failed that way), which a retry of
// the same request may cure: the front door answers it with e.Status (502
// or 504), never stores it under the request's Idempotency-Key, and lets a
// retry run the request again. Upstreams learn the key (their
// idempotency_header), so a call that did reach one is recognised there.
func Transient(e *handler.Error) error { return &transientError{e: e} }

// IsTransient reports whether err is, or wraps, a Transient error.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

type transientError struct{ e *handler.Error }

func (t *transientError) Error() string { return t.e.Error() }

// Unwrap exposes the declared error, which names the failure in the
// answer.
func (t *transientError) Unwrap() error { return t.e }
