// Package recipe is the project's recipe format for composition handlers
// and runtime contract synthesis (AGTP-API §10, §12.1), which the draft
// leaves undefined (§12.1, §12.2, App. A.1).
//
// A Recipe is an ordered list of steps, each a call to an existing endpoint
// on the same server, with an input mapping that draws on the composite
// endpoint's input and on earlier steps' outputs, and an output mapping
// that builds the composite's result. A Pattern offers a recipe for a
// (method, path) that the server does not register: it is what PROPOSE and
// the RCNS gate synthesise contracts from, and what DISCOVER /patterns
// lists.
//
// # Mappings
//
// A mapping is any JSON value. An object whose only members are "$from"
// (and optionally "$as") is a reference; everything else is a literal,
// walked recursively:
//
//	input:
//	  order_id: {$from: input.order_id}          # the composite's input
//	  text: {$from: steps.0.output, $as: json}   # an earlier step's output, as JSON text
//	  format: prose                              # a literal
//
// A reference path is "input" or "steps.<i>.output", followed by member
// names separated by dots. Steps are numbered from 0 in references; a step
// may only refer to earlier steps. A reference to an absent value leaves
// the member out of its object (so optional inputs stay optional) and is
// null elsewhere. "$as: json" renders the value as its RFC 8785 canonical
// JSON text.
//
// Step paths are path templates; their parameters are filled from the
// step's own input members of the same name, percent-encoded.
package recipe

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// MaxSteps bounds a recipe; the server's max_synthesis_depth (AGTP-API
// §8.7) usually bounds it further.
const MaxSteps = 64

// maxRefDepth bounds the member names of one reference path.
const maxRefDepth = 16

// Recipe is a composition: the steps to run, in order, and how to build
// the result. It is what a contract captures at synthesis time (§10.5).
type Recipe struct {
	Name    string `json:"recipe_name"`
	Version string `json:"recipe_version"`
	Steps   []Step `json:"steps"`
	// Output maps the steps' outputs to the composite's result; nil means
	// the last step's output.
	Output any `json:"output,omitempty"`
	// TimeoutSeconds bounds the whole run; 0 leaves only the caller's
	// deadline.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Step is one call to an existing endpoint.
type Step struct {
	Method string `json:"method"`
	// Path is the callee's path template, e.g. /orders/{order_id}.
	Path string `json:"path"`
	// Input maps the composite's input and earlier outputs to the callee's
	// parameters object.
	Input map[string]any `json:"input,omitempty"`
	// TimeoutSeconds bounds this step; 0 leaves it to the runner.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// MaxTimeoutSeconds bounds a recipe's and a step's timeout_seconds.
const MaxTimeoutSeconds = 600

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Call runs one step against an existing endpoint, under the caller's
// identity and through the same gates as a direct call (scope, schema),
// and returns its output and AGTP status. A non-2xx status, or an error,
// fails the composition.
type Call func(ctx context.Context, method, path string, input map[string]any) (output any, status int, err error)

// Failure is a failed step: the details of the endpoint's named error
// composition_failed (AGTP-API §12.1, 422), with the key names the
// project settled (docs/decisions.md#D-composition).
type Failure struct {
	Recipe        string
	RecipeVersion string
	// Step is the failing step's number, counted from 1.
	Step       int
	StepMethod string
	StepPath   string
	// StepStatus is the callee's AGTP status, 0 when it was never called.
	StepStatus int
	// CapturedOutputs are the outputs of the steps that succeeded.
	CapturedOutputs []any
	Err             error
}

// ErrorName is the named error a composition failure answers with.
const ErrorName = "composition_failed"

func (f *Failure) Error() string {
	msg := fmt.Sprintf("recipe %s@%s: step %d (%s %s) failed with status %d", f.Recipe, f.RecipeVersion, f.Step, f.StepMethod, f.StepPath, f.StepStatus)
	if f.Err != nil {
		msg += ": " + f.Err.Error()
	}
	return msg
}

func (f *Failure) Unwrap() error { return f.Err }

// Details is the 422 body's details object.
func (f *Failure) Details() map[string]any {
	captured := f.CapturedOutputs
	if captured == nil {
		captured = []any{}
	}
	return map[string]any{
		"recipe":           f.Recipe,
		"recipe_version":   f.Version(),
		"step":             f.Step,
		"step_method":      f.StepMethod,
		"step_path":        f.StepPath,
		"step_status":      f.StepStatus,
		"captured_outputs": captured,
	}
}

// Version is the recipe version of the failure.
func (f *Failure) Version() string { return f.RecipeVersion }

// Run executes the recipe: each step in order, its input built from input
// (the composite's validated input) and the earlier outputs. It returns the
// composite's output, or a *Failure.
//
// A recipe's timeout_seconds bounds the run and a step's bounds the step:
// the call gets a context with that deadline.
func (r *Recipe) Run(ctx context.Context, input map[string]any, call Call) (any, error) {
	if r.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, seconds(r.TimeoutSeconds))
		defer cancel()
	}
	outputs := make([]any, 0, len(r.Steps))
	fail := func(i int, path string, status int, err error) error {
		return &Failure{Recipe: r.Name, RecipeVersion: r.Version, Step: i + 1, StepMethod: r.Steps[i].Method,
			StepPath: path, StepStatus: status, CapturedOutputs: outputs, Err: err}
	}
	for i, st := range r.Steps {
		if err := ctx.Err(); err != nil {
			return nil, fail(i, st.Path, 0, err)
		}
		in, _ := evaluate(st.Input, input, outputs)
		stepInput, _ := in.(map[string]any)
		if stepInput == nil {
			stepInput = map[string]any{}
		}
		path, err := FillPath(st.Path, stepInput)
		if err != nil {
			return nil, fail(i, st.Path, 0, err)
		}
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if st.TimeoutSeconds > 0 {
			sctx, cancel = context.WithTimeout(ctx, seconds(st.TimeoutSeconds))
		}
		out, status, err := call(sctx, st.Method, path, stepInput)
		cancel()
		if err != nil {
			return nil, fail(i, path, status, err)
		}
		if status < 200 || status > 299 {
			return nil, fail(i, path, status, nil)
		}
		outputs = append(outputs, out)
	}
	if r.Output == nil {
		if len(outputs) == 0 {
			return map[string]any{}, nil
		}
		return outputs[len(outputs)-1], nil
	}
	out, _ := evaluate(r.Output, input, outputs)
	return out, nil
}

// FillPath substitutes a path template's parameters from values,
// percent-encoding each; a missing or non-scalar value is an error.
func FillPath(template string, values map[string]any) (string, error) {
	if !strings.Contains(template, "{") {
		return template, nil
	}
	segs := agtp.SplitPath(template)
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		if len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' {
			name := s[1 : len(s)-1]
			v, ok := scalar(values[name])
			if !ok || v == "" {
				return "", fmt.Errorf("path parameter %s has no scalar value in the step input", name)
			}
			b.WriteString(url.PathEscape(v))
			continue
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case bool:
		return strconv.FormatBool(x), true
	case interface{ String() string }:
		return x.String(), true
	}
	return "", false
}

// MatchPath matches a concrete request path against a path template and
// returns the bound parameters (percent-decoded).
func MatchPath(template, path string) (map[string]string, bool) {
	t, err := route.ParseTemplate(template, nil)
	if err != nil {
		return nil, false
	}
	return matchTemplate(t, path)
}

func matchTemplate(t *route.Template, path string) (map[string]string, bool) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	segs := agtp.SplitPath(path)
	if len(segs) != len(t.Segments) {
		return nil, false
	}
	var params map[string]string
	for i, ts := range t.Segments {
		v, ok := route.DecodeSegment(segs[i])
		if !ok {
			return nil, false
		}
		if ts.IsParam() {
			if v == "" {
				return nil, false
			}
			if params == nil {
				params = make(map[string]string, len(t.Params))
			}
			params[ts.Param] = v
			continue
		}
		if v != ts.Literal {
			return nil, false
		}
	}
	return params, true
}

// ref is a parsed reference.
type ref struct {
	step    int // -1 for input
	members []string
	asJSON  bool
}

// parseRef recognises a reference object; ok is false for a literal.
func parseRef(v any) (r ref, ok bool, err error) {
	m, isObj := v.(map[string]any)
	if !isObj {
		return r, false, nil
	}
	from, has := m["$from"]
	if !has {
		for k := range m {
			if strings.HasPrefix(k, "$") {
				return r, false, fmt.Errorf("member %q: only $from and $as start with $", k)
			}
		}
		return r, false, nil
	}
	for k := range m {
		if k != "$from" && k != "$as" {
			return r, false, fmt.Errorf("a reference has only $from and $as, not %q", k)
		}
	}
	s, isStr := from.(string)
	if !isStr {
		return r, false, errors.New("$from must be a string")
	}
	if as, has := m["$as"]; has {
		if as != "json" {
			return r, false, errors.New(`$as must be "json"`)
		}
		r.asJSON = true
	}
	parts := strings.Split(s, ".")
	switch {
	case parts[0] == "input":
		r.step = -1
		r.members = parts[1:]
	case parts[0] == "steps" && len(parts) >= 3 && parts[2] == "output":
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 0 || n >= MaxSteps || strconv.Itoa(n) != parts[1] {
			return r, false, fmt.Errorf("$from %q: bad step number", s)
		}
		r.step = n
		r.members = parts[3:]
	default:
		return r, false, fmt.Errorf(`$from %q: must start with "input" or "steps.<i>.output"`, s)
	}
	if len(r.members) > maxRefDepth {
		return r, false, fmt.Errorf("$from %q: too deep", s)
	}
	for _, p := range r.members {
		if p == "" {
			return r, false, fmt.Errorf("$from %q: empty member name", s)
		}
	}
	return r, true, nil
}

// evaluate builds a value from a mapping; present is false when the whole
// value is an absent reference.
func evaluate(m any, input map[string]any, outputs []any) (v any, present bool) {
	if r, ok, err := parseRef(m); err == nil && ok {
		var cur any
		if r.step < 0 {
			cur = input
		} else {
			if r.step >= len(outputs) {
				return nil, false
			}
			cur = outputs[r.step]
		}
		for _, name := range r.members {
			obj, isObj := cur.(map[string]any)
			if !isObj {
				return nil, false
			}
			if cur, ok = obj[name]; !ok {
				return nil, false
			}
		}
		if r.asJSON {
			b, err := jcs.Marshal(cur)
			if err != nil {
				return nil, false
			}
			return string(b), true
		}
		return cur, true
	}
	switch x := m.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, sub := range x {
			if v, ok := evaluate(sub, input, outputs); ok {
				out[k] = v
			}
		}
		return out, true
	case []any:
		out := make([]any, len(x))
		for i, sub := range x {
			out[i], _ = evaluate(sub, input, outputs)
		}
		return out, true
	}
	return m, true
}

// refs walks a mapping and calls fn for every reference.
func refs(m any, fn func(ref) error) error {
	r, ok, err := parseRef(m)
	if err != nil {
		return err
	}
	if ok {
		return fn(r)
	}
	switch x := m.(type) {
	case map[string]any:
		for k, sub := range x {
			if err := refs(sub, fn); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case []any:
		for i, sub := range x {
			if err := refs(sub, fn); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	}
	return nil
}

// InputMembers returns the names of the composite's input members the
// recipe reads (the first member of every input reference).
func (r *Recipe) InputMembers() []string {
	seen := map[string]bool{}
	var out []string
	visit := func(x ref) error {
		if x.step < 0 && len(x.members) > 0 && !seen[x.members[0]] {
			seen[x.members[0]] = true
			out = append(out, x.members[0])
		}
		return nil
	}
	for _, st := range r.Steps {
		_ = refs(map[string]any(st.Input), visit)
	}
	_ = refs(r.Output, visit)
	return out
}

// Validate checks a recipe's structure: steps, methods, path templates,
// references (only to earlier steps), and that every path parameter of a
// step is given in its input.
func (r *Recipe) Validate() error {
	var errs []error
	if len(r.Steps) == 0 {
		errs = append(errs, errors.New("steps: a recipe has at least one step"))
	}
	if len(r.Steps) > MaxSteps {
		errs = append(errs, fmt.Errorf("steps: at most %d", MaxSteps))
	}
	if r.TimeoutSeconds < 0 || r.TimeoutSeconds > MaxTimeoutSeconds {
		errs = append(errs, fmt.Errorf("timeout_seconds: from 0 (none) to %d", MaxTimeoutSeconds))
	}
	for i, st := range r.Steps {
		field := fmt.Sprintf("steps[%d]", i)
		if st.TimeoutSeconds < 0 || st.TimeoutSeconds > MaxTimeoutSeconds {
			errs = append(errs, fmt.Errorf("%s.timeout_seconds: from 0 (none) to %d", field, MaxTimeoutSeconds))
		}
		if !agtp.ValidMethodToken(st.Method) {
			errs = append(errs, fmt.Errorf("%s.method: %q is not an AGTP method token", field, st.Method))
		}
		t, err := route.ParseTemplate(st.Path, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.path: %w", field, err))
		} else {
			for _, p := range t.Params {
				if _, ok := st.Input[p]; !ok {
					errs = append(errs, fmt.Errorf("%s.input: path parameter %s is not mapped", field, p))
				}
			}
		}
		if err := refs(map[string]any(st.Input), func(x ref) error {
			if x.step >= i {
				return fmt.Errorf("refers to step %d, which has not run yet", x.step)
			}
			return nil
		}); err != nil {
			errs = append(errs, fmt.Errorf("%s.input: %w", field, err))
		}
	}
	if err := refs(r.Output, func(x ref) error {
		if x.step >= len(r.Steps) {
			return fmt.Errorf("refers to step %d of %d", x.step, len(r.Steps))
		}
		return nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("output: %w", err))
	}
	return errors.Join(errs...)
}
