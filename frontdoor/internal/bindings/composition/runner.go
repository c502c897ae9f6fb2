package composition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/frontdoor/handler"
	"github.com/agtpsuite/agtp/frontdoor/internal/bindings"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/jsondoc"
)

// ErrorName is the named error of a failed composition (AGTP-API §12.1);
// composition endpoints declare it, and the front door answers it with
// 422.
const ErrorName = recipe.ErrorName

// ErrUnknownRecipe is returned when a composition endpoint names a recipe
// neither the registry nor rcnssvc knows: the operator's error.
var ErrUnknownRecipe = errors.New("composition: unknown recipe")

// Options configure a Runner.
type Options struct {
	// Recipes are the local recipes (AGTP_RECIPES_DIR, demo).
	Recipes *Registry
	// RCNS, when set, is asked for recipes the registry lacks (those a
	// persistent PROPOSE promoted).
	RCNS rcnsv1.RcnsServiceClient
	// StepTimeout bounds a step that names no timeout_seconds of its own.
	// Default 10 s. The recipe's timeout_seconds and the request's
	// deadline bound every step as well.
	StepTimeout time.Duration
	// CacheTTL is how long a recipe fetched from rcnssvc is reused.
	// Default 30 s.
	CacheTTL time.Duration
	// Log receives recipe lookups that fail.
	Log *slog.Logger
}

// Runner runs composition endpoints. It is safe for concurrent use.
type Runner struct {
	opts Options

	mu    sync.Mutex
	cache map[string]cachedRecipe
}

type cachedRecipe struct {
	rec     *recipe.Recipe
	expires time.Time
}

// New returns a Runner.
func New(opts Options) *Runner {
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = 10 * time.Second
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Recipes == nil {
		opts.Recipes = NewRegistry()
	}
	return &Runner{opts: opts, cache: map[string]cachedRecipe{}}
}

// Resolve finds a recipe: the local registry first, then rcnssvc.
func (r *Runner) Resolve(ctx context.Context, name string) (*recipe.Recipe, error) {
	if rec, ok := r.opts.Recipes.Lookup(name); ok {
		return rec, nil
	}
	if r.opts.RCNS == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownRecipe, name)
	}
	r.mu.Lock()
	c, ok := r.cache[name]
	r.mu.Unlock()
	if ok && time.Now().Before(c.expires) {
		return c.rec, nil
	}
	resp, err := r.opts.RCNS.GetRecipe(ctx, &rcnsv1.GetRecipeRequest{RecipeName: name})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w %q", ErrUnknownRecipe, name)
	}
	if err != nil {
		return nil, fmt.Errorf("composition: recipe %q from rcnssvc: %w", name, err)
	}
	//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
	raw, err := jsondoc.PreferStruct(resp.GetRecipe(), resp.GetRecipeJson())
	if err != nil {
		return nil, fmt.Errorf("composition: recipe %q from rcnssvc: %w", name, err)
	}
	rec := &recipe.Recipe{}
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, fmt.Errorf("composition: recipe %q from rcnssvc: %w", name, err)
	}
	if err := Validate(rec); err != nil {
		return nil, fmt.Errorf("composition: recipe %q from rcnssvc: %w", name, err)
	}
	r.mu.Lock()
	if len(r.cache) >= MaxRecipes {
		r.cache = map[string]cachedRecipe{}
	}
	r.cache[name] = cachedRecipe{rec: rec, expires: time.Now().Add(r.opts.CacheTTL)}
	r.mu.Unlock()
	return rec, nil
}

// Run runs the recipe name for one call of a composition endpoint.
// Before any step runs, inv.Check must admit every step whose endpoint is
// declared at the step's path template: the caller's authority has to
// cover the whole composition (AGTP-API §12.1, §16.2). Each step is then
// an inv.Invoke, which passes the pipeline's gates under the caller's
// identity. A step that fails stops the run with composition_failed,
// whose details name the recipe, the step (number, method, path), its
// status and reason, and the outputs captured before it.
func (r *Runner) Run(ctx context.Context, name string, call *handler.Call, inv bindings.Invoker) (*handler.Result, error) {
	rec, err := r.Resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.RunRecipe(ctx, rec, call, inv)
}

// RunRecipe runs a resolved recipe (a contract's captured version, say).
func (r *Runner) RunRecipe(ctx context.Context, rec *recipe.Recipe, call *handler.Call, inv bindings.Invoker) (*handler.Result, error) {
	var input map[string]any
	if len(call.Input) > 0 {
		if err := json.Unmarshal(call.Input, &input); err != nil {
			return nil, fmt.Errorf("composition input: %w", err)
		}
	}
	outcomes := make([]*bindings.Outcome, len(rec.Steps))
	for i, st := range rec.Steps {
		if o := inv.Check(st.Method, st.Path); o != nil {
			outcomes[i] = o
			return nil, failure(&recipe.Failure{Recipe: rec.Name, RecipeVersion: rec.Version, Step: i + 1,
				StepMethod: st.Method, StepPath: st.Path, StepStatus: o.Status}, outcomes)
		}
	}
	next := 0
	out, err := rec.Run(ctx, input, func(ctx context.Context, method, path string, in map[string]any) (any, int, error) {
		// Steps run one after another, so the n-th call is step n.
		i := next
		next++
		if rec.Steps[i].TimeoutSeconds == 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.opts.StepTimeout)
			defer cancel()
		}
		body, err := json.Marshal(in)
		if err != nil {
			return nil, 0, err
		}
		o, err := inv.Invoke(ctx, bindings.Invocation{Method: method, Path: path, Input: body,
			Key: rec.Name + "@" + rec.Version + "#" + strconv.Itoa(i+1)})
		if err != nil {
			return nil, 0, err
		}
		outcomes[i] = o
		if !o.OK() {
			if ctx.Err() == context.DeadlineExceeded {
				return nil, o.Status, context.DeadlineExceeded
			}
			return nil, o.Status, nil
		}
		var v any
		if len(o.Output) > 0 {
			if err := json.Unmarshal(o.Output, &v); err != nil {
				return nil, o.Status, fmt.Errorf("step output: %w", err)
			}
		}
		return v, o.Status, nil
	})
	var f *recipe.Failure
	if errors.As(err, &f) {
		return nil, failure(f, outcomes)
	}
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("composition output: %w", err)
	}
	return &handler.Result{Output: b}, nil
}

// failure is the composition_failed error of a failed step, Transient when
// the step's failure is one a retry may cure (failureStatus). Its details
// (nested under "details", docs/decisions.md#D-named-error-body) use the
// keys the project settled (docs/decisions.md#D-composition): recipe,
// recipe_version, step (from 1), step_method, step_path, step_status,
// captured_outputs, plus step_reason (the step's AGTP reason token) and
// step_timed_out.
func failure(f *recipe.Failure, outcomes []*bindings.Outcome) error {
	d := f.Details()
	reason := ""
	if i := f.Step - 1; i >= 0 && i < len(outcomes) && outcomes[i] != nil {
		reason = outcomes[i].Reason
	}
	timedOut := errors.Is(f.Err, context.DeadlineExceeded)
	switch {
	case timedOut:
		reason = "step-timeout"
	case reason == "" && f.Err != nil:
		reason = "step-not-run"
	}
	if reason != "" {
		d["step_reason"] = reason
	}
	if timedOut {
		d["step_timed_out"] = true
	}
	msg := fmt.Sprintf("step %d (%s %s) of recipe %s failed", f.Step, f.StepMethod, f.StepPath, f.Recipe)
	if f.StepStatus != 0 {
		msg += " with status " + strconv.Itoa(f.StepStatus)
	}
	if reason != "" {
		msg += " (" + reason + ")"
	}
	if f.StepStatus == 0 && f.Err != nil && !timedOut {
		msg += ": " + f.Err.Error()
	}
	he := &handler.Error{Name: ErrorName, Message: msg, Details: map[string]any{"details": d}}
	if he.Status = failureStatus(f.StepStatus, timedOut); he.Status != 0 {
		return bindings.Transient(he)
	}
	return he
}

// failureStatus is the composite's status when a step's failure is not a
// settled answer (bindings.Replayable): 504 for a step that timed out or
// answered 504, 502 for another 5xx, the step's own status for a 401, 409
// or 429; 0 (the 422 of AGTP-API §12.1) when the step's refusal is settled
// and a retry would meet it again. A retry of the composite replays the
// steps that already ran (their keys derive from the composite's) and runs
// the failed one again.
func failureStatus(step int, timedOut bool) int {
	switch {
	case timedOut, step == http.StatusGatewayTimeout:
		return http.StatusGatewayTimeout
	case step >= 500:
		return http.StatusBadGateway
	case step != 0 && !bindings.Replayable(step):
		return step
	}
	return 0
}
