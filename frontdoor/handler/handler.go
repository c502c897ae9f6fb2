// Package handler is the SDK for registered_function endpoint handlers:
// Go functions compiled into a front door and bound to endpoints by name
// (AGTP-API §12, handler binding kind registered_function).
//
// An operator builds a front door with their own handlers by registering
// them on a Registry before the front door starts:
//
//	reg := handler.NewRegistry()
//	reg.Register("orders.get", handler.Typed(func(ctx context.Context, c *handler.Call, in GetOrder) (Order, error) {
//		...
//	}))
//
// and naming "orders.get" in the endpoint's handler binding, then passing
// the registry to the front door:
//
//	svc, err := frontdoor.New(ctx, cfg, frontdoor.WithHandlers(reg))
//
// A function receives the validated input and a Call saying who calls
// (Caller), in which session and task, with which Idempotency-Key; ctx
// carries the request's deadline and its trace span (TraceID, or
// go.opentelemetry.io/otel/trace.SpanFromContext for child spans). It
// returns the output, which the front door validates against the
// endpoint's output schema, or an *Error naming one of the endpoint's
// declared errors.
package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
)

// Caller is who is calling, as the front door established it.
type Caller struct {
	// AgentID is the caller's canonical Agent-ID; empty when anonymous.
	AgentID string
	// Owner is the principal accountable for the caller.
	Owner string
	// Scopes are the scopes the request runs with.
	Scopes []string
	// ActingPrincipalID comes from a validated Authorization credential.
	ActingPrincipalID string
}

// Call is one invocation of an endpoint handler.
type Call struct {
	Method string
	// Path is the request path; PathTemplate the matched template.
	Path         string
	PathTemplate string
	// Input is the validated input object: the path parameters, the query
	// parameters and the body's parameters merged (body wins), as JSON.
	Input json.RawMessage
	// CoreParams are the core per-method parameters the request sent
	// (core §7.2: QUERY's intent, scope, format and confidence_threshold;
	// SUMMARIZE's source, length, focus, format and audience; PLAN's goal,
	// intent, constraints and available_methods; EXECUTE's action; any
	// method's context), as a JSON object, validated by the draft's rules
	// and kept out of Input; nil when it sent none. A member the
	// endpoint's input schema declares is the endpoint's: it is in Input
	// and never here.
	CoreParams json.RawMessage
	// PathParams are the template parameters of the path.
	PathParams map[string]string
	Caller     Caller
	SessionID  string
	TaskID     string
	RequestID  string
	// ContentType is the carried Content-Type (EXECUTE dispatch).
	ContentType string
	// IdempotencyKey is the request's Idempotency-Key, if it had one; a
	// handler with side effects elsewhere can pass it on so that a retry
	// does not repeat them.
	IdempotencyKey string
}

// TraceID is the W3C trace ID of the request ctx belongs to (32 lowercase
// hex digits), or "" when it is not traced; for log lines that need to
// be found next to the request's spans.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// PriorAction is an earlier action the result depends on: its agent and
// the Audit-ID of its Attribution-Record.
type PriorAction = attribution.PriorAction

// Result is a handler's successful outcome.
type Result struct {
	// Status defaults to 200.
	Status int
	// Output is the result object, validated against the endpoint's
	// output schema.
	Output json.RawMessage
	// PriorActions are recorded as the Attribution-Record's prior_actions
	// (AGTP-IDENTIFIERS): actions, here or on other servers, that this
	// one builds on. Composition steps are added by the front door.
	PriorActions []PriorAction
}

// Error is a declared error of an endpoint (AGTP-API §6: the endpoint's
// errors list). The front door answers it with 422 naming the error,
// unless Status says otherwise.
type Error struct {
	Name    string
	Message string
	Status  int
	Details map[string]any
}

func (e *Error) Error() string { return e.Name + ": " + e.Message }

// Errorf returns a declared error.
func Errorf(name, format string, args ...any) *Error {
	return &Error{Name: name, Message: fmt.Sprintf(format, args...)}
}

// Func is a registered function.
type Func func(ctx context.Context, call *Call) (*Result, error)

// Typed adapts a function with typed input and output.
func Typed[In, Out any](f func(ctx context.Context, call *Call, in In) (Out, error)) Func {
	return func(ctx context.Context, call *Call) (*Result, error) {
		var in In
		if len(call.Input) > 0 {
			if err := json.Unmarshal(call.Input, &in); err != nil {
				return nil, &Error{Name: "invalid_input", Message: err.Error(), Status: 422}
			}
		}
		out, err := f(ctx, call, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("marshal output: %w", err)
		}
		return &Result{Output: b}, nil
	}
}

// Registry binds names to functions. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	funcs map[string]Func
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{funcs: map[string]Func{}} }

// Register binds name to f; registering a name twice is a programming
// error and panics, so a mistake shows at start-up.
func (r *Registry) Register(name string, f Func) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.funcs[name]; dup {
		panic("handler: " + name + " registered twice")
	}
	r.funcs[name] = f
}

// Lookup returns the function bound to name.
func (r *Registry) Lookup(name string) (Func, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f, ok := r.funcs[name]
	return f, ok
}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.funcs))
	for n := range r.funcs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
