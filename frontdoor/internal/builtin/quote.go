package builtin

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/frontdoor/internal/answer"
	"github.com/agtpsuite/agtp/frontdoor/internal/coreparam"
	"github.com/agtpsuite/agtp/services/agtp"
)

// Costs learns what each endpoint costs from the calls it serves, so
// QUOTE (Tier 2, standard methods §5.1) answers from observation: the
// handler's compute time per call, smoothed, with the range seen.
type Costs struct {
	mu        sync.Mutex
	endpoints map[string]*endpointCost
}

type endpointCost struct {
	n             int64
	mean          float64 // seconds, exponentially weighted
	min, max      float64
	lastUpdatedAt time.Time
}

// NewCosts starts with no observations.
func NewCosts() *Costs { return &Costs{endpoints: map[string]*endpointCost{}} }

func costKey(method, template string) string { return method + " " + template }

// Observe records one handler run.
func (c *Costs) Observe(method, template string, d time.Duration) {
	sec := d.Seconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.endpoints[costKey(method, template)]
	if e == nil {
		if len(c.endpoints) >= 10000 {
			return
		}
		e = &endpointCost{min: sec, max: sec, mean: sec}
		c.endpoints[costKey(method, template)] = e
	}
	e.n++
	const alpha = 0.05
	e.mean += alpha * (sec - e.mean)
	e.min, e.max = math.Min(e.min, sec), math.Max(e.max, sec)
	e.lastUpdatedAt = time.Now()
}

func (c *Costs) estimate(method, template string) (endpointCost, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.endpoints[costKey(method, template)]
	if !ok {
		return endpointCost{}, false
	}
	return *e, true
}

// seconds is the compute time one call of an endpoint is expected to
// take (min, expected, max) and the runs it was observed over; an endpoint
// never observed gets a prior of 1 ms expected, within 0 to 10 ms.
func (c *Costs) seconds(method, template string) (lo, expected, hi float64, n int64) {
	e, seen := c.estimate(method, template)
	if !seen {
		return 0, 0.001, 0.01, 0
	}
	return e.min, e.mean, e.max, e.n
}

// quote answers QUOTE (standard methods §5.1) in both its forms:
// QUOTE / with {method, path, parameters}, and QUOTE /path with {method,
// parameters}, the request's own path and query naming the quoted call
// (the structure stage matches it to this built-in). method and parameters
// are required, and path in the first form (400 naming the missing one,
// companions assertion 24); then the structural decision for the quoted
// call: a path no endpoint has, or a method the path does not serve (or
// the server does not know), is 404; a path the grammar refuses is 422
// with the status the call would get. Then the parameters as the call
// would be checked: its core parameters by their rules, the rest against
// the target's input schema (422 with the violations). Then the estimate,
// in the Cost-Estimate header and the body. Nothing is run.
func (bi *Registry) quote(_ context.Context, call *Call) *agtp.Response {
	input := call.Input
	var params map[string]any
	if v, err := answer.DecodeJSON(input); err == nil {
		params, _ = v.(map[string]any)
	}
	method, path := str(params, "method"), str(params, "path")
	if call.Path != call.Template {
		target := call.Path
		if call.RawQuery != "" {
			target += "?" + call.RawQuery
		}
		if path != "" && path != target {
			return call.Fail(agtp.StatusBadRequest, "quote-path-conflict",
				"QUOTE "+call.Path+" quotes a call on "+target+"; the body's path "+path+" names another", map[string]any{"path": path})
		}
		path = target
	}
	proposed, hasParams := params["parameters"].(map[string]any)
	switch {
	case method == "":
		return call.Fail(agtp.StatusBadRequest, "method-required", "QUOTE needs method: the method of the call to estimate", nil)
	case path == "":
		return call.Fail(agtp.StatusBadRequest, "path-required", "QUOTE / needs path: the path of the call to estimate (or send QUOTE to that path)", nil)
	case !hasParams:
		return call.Fail(agtp.StatusBadRequest, "parameters-required", "QUOTE needs parameters: the arguments the call would receive ({} for none)", nil)
	}
	d := call.State.Table.Decide(method, path)
	switch d.Outcome {
	case route.Matched:
	case route.NotFound:
		return call.Fail(agtp.StatusNotFound, "quote-target-unknown", "no endpoint has the path "+d.Path, map[string]any{"path": d.Path})
	case route.MethodNotAllowed, route.MethodViolation:
		extra := map[string]any{"method": method, "path": d.Path}
		if len(d.AllowedMethods) > 0 {
			extra["allowed_methods_for_path"] = d.AllowedMethods
		}
		return call.Fail(agtp.StatusNotFound, "quote-method-unsupported", method+" "+d.Path+" is not served here: "+d.Explanation(), extra)
	default:
		return call.Fail(agtp.StatusUnprocessable, "quote-target-invalid", method+" "+path+" could not be called: "+d.Explanation(), map[string]any{"target_status": d.Status()})
	}
	var query url.Values
	if _, raw, ok := strings.Cut(path, "?"); ok {
		var err error
		if query, err = url.ParseQuery(raw); err != nil {
			return call.Fail(agtp.StatusBadRequest, "path-invalid", "the query string of path is not valid percent-encoded form data", nil)
		}
	}
	ep := call.State.Endpoints[d.Endpoint.Index]
	quoted := make(map[string]any, len(proposed))
	for k, v := range proposed {
		quoted[k] = v
	}
	if _, bad := coreparam.Split(ep.Def.Method, coreparam.RootForm(ep), ep.Declares, query, quoted); bad != nil {
		return call.Fail(agtp.StatusUnprocessable, "quote-parameters-invalid", method+" "+path+" would refuse these parameters: "+(&endpoint.Report{Violations: bad}).Error(), map[string]any{"violations": bad})
	}
	if _, report := ep.BuildInput(d.Params(), query, quoted); report != nil {
		return call.Fail(agtp.StatusUnprocessable, "quote-parameters-invalid", method+" "+path+" would refuse these parameters: "+report.Error(), map[string]any{"violations": report.Violations})
	}
	template := d.Endpoint.Proto.GetPath()
	lo, expected, hi, n := bi.Costs.seconds(d.Method, template)
	confidence := math.Round(float64(n)/float64(n+20)*100) / 100
	if n == 0 {
		confidence = 0.1
	}
	resp := envelopeResponse(call, map[string]any{
		"method": d.Method,
		"path":   template,
		"estimated_cost": map[string]any{
			"calls":           map[string]int{"min": 1, "expected": 1, "max": 1},
			"compute_seconds": map[string]float64{"min": round6(lo), "expected": round6(expected), "max": round6(hi)},
		},
		"observations": n,
		"confidence":   confidence,
	})
	resp.Header.Set(agtp.HeaderCostEstimate, fmt.Sprintf("calls=1, compute-seconds=%s", strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", expected), "0"), ".")))
	return resp
}

func round6(f float64) float64 { return math.Round(f*1e6) / 1e6 }
