package builtin

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/intent"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	"github.com/agtpsuite/agtp/services/agtp"
)

// plannedStep is one call of a plan (core §7.2.6 ordered_steps: an AGTP
// method invocation specification): the endpoint, the inputs the caller
// must supply, and the part of the goal it serves.
type plannedStep struct {
	Step   int    `json:"step"`
	Clause string `json:"clause"`
	found
}

// plan serves PLAN / (core §7.2.6): the goal (or intent) split into its
// parts and each resolved to a call the caller may make, in the goal's
// order; calls that a registered composition or RCNS pattern makes in
// that order become that one call. Nothing runs. available_methods narrows
// the calls to those methods; a goal nothing answers is 422
// goal-unplannable, and an RCNS pattern list that cannot be read is 503.
func (bi *Registry) plan(ctx context.Context, call *Call) *agtp.Response {
	goal := strings.TrimSpace(str(call.Params, "goal"))
	if goal == "" {
		goal = strings.TrimSpace(str(call.Params, "intent"))
	}
	if goal == "" {
		return call.Fail(agtp.StatusUnprocessable, "goal-required", "PLAN / plans a goal: send goal, a sentence saying what you want done (core §7.2.6)", nil)
	}
	methods := stringList(call.Params, "available_methods")
	keep := func(ep *endpoint.Endpoint) bool { return len(methods) == 0 || slices.Contains(methods, ep.Def.Method) }
	u := bi.usableEndpoints(ctx, call, keep)
	pats, err := bi.usablePatterns(ctx, call, u, methods)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	preps := slices.Clone(u.preps)
	for _, c := range pats {
		preps = append(preps, intent.Prepare(c))
	}
	p := intent.NewPrepared(preps).Plan(goal)
	if len(p.Steps) == 0 {
		return call.Fail(agtp.StatusUnprocessable, "goal-unplannable",
			"no endpoint this caller may use answers any part of the goal", map[string]any{"unmatched": nonNil(p.Unmatched)})
	}
	steps := make([]plannedStep, len(p.Steps))
	var calls int
	var lo, expected, hi, confidence float64
	for i, s := range p.Steps {
		f := u.found(s.Match)
		f.RequiredInputs = nonNil(s.Inputs)
		steps[i] = plannedStep{Step: i + 1, Clause: s.Clause, found: f}
		// A composite costs what its calls cost.
		runs := s.Match.Candidate.Steps
		if len(runs) == 0 {
			runs = []string{s.Match.Candidate.Key()}
		}
		for _, r := range runs {
			method, path, _ := strings.Cut(r, " ")
			l, e, h, _ := bi.Costs.seconds(method, path)
			lo, expected, hi = lo+l, expected+e, hi+h
			calls++
		}
		confidence += s.Match.Confidence
	}
	// The plan's confidence: how well its steps matched their parts, times
	// the share of the goal's parts that found a step.
	// the share of the goal's parts that found a step: the mean over all
	// parts, an unmatched part counting 0).
	confidence /= float64(len(steps) + len(p.Unmatched))
	assumptions := []string{
		"nothing has run: each step is a call this caller may make now, under its current Authority-Scope",
		"required_inputs are the members each call needs; the caller supplies them, from an earlier step's result where the goal chains them",
		"estimated_cost is the handler compute time this server observed for each call (as QUOTE estimates it), one call per endpoint a step runs",
	}
	if slices.ContainsFunc(steps, func(s plannedStep) bool { return s.Kind == intent.KindPattern }) {
		assumptions = append(assumptions, "a pattern step is served by RCNS synthesis: the call needs Allow-RCNS: true or a PROPOSE first (docs/rcns.md)")
	}
	if _, ok := call.Params["constraints"]; ok {
		assumptions = append(assumptions, "constraints were read; the plan is narrowed by the caller's authority and available_methods only")
	}
	return envelopeResponse(call, map[string]any{
		"goal":          p.Goal,
		"ordered_steps": steps,
		"unmatched":     nonNil(p.Unmatched),
		"estimated_cost": map[string]any{
			"calls":           map[string]int{"min": calls, "expected": calls, "max": calls},
			"compute_seconds": map[string]float64{"min": round6(lo), "expected": round6(expected), "max": round6(hi)},
		},
		"confidence":  round2(confidence),
		"assumptions": assumptions,
	})
}

// patternListing is an RCNS pattern as DISCOVER /patterns lists it
// (recipe.Pattern.Listing).
type patternListing struct {
	RecipeName     string   `json:"recipe_name"`
	Method         string   `json:"method"`
	PathExact      string   `json:"path_exact"`
	Description    string   `json:"description"`
	RequiredScopes []string `json:"required_scopes"`
	MinTrustTier   int32    `json:"min_trust_tier"`
	Steps          []struct {
		Method string `json:"method"`
		Path   string `json:"path"`
	} `json:"steps"`
}

// usablePatterns are the RCNS patterns a plan may use: an identified
// caller's, when negotiation is enabled, for a path template (a pattern
// matched by a regular expression names no path a plan can give), of an
// available method, whose trust tier admits the caller (1 is the most
// trusted, docs/decisions.md#D-rcns-trust-tier), whose scopes the caller
// holds, and whose every step is an endpoint the caller may use.
func (bi *Registry) usablePatterns(ctx context.Context, call *Call, u usable, methods []string) ([]intent.Candidate, error) {
	if call.AgentID == "" || bi.RCNS == nil {
		return nil, nil
	}
	enabled, raw, err := bi.patterns(ctx)
	if err != nil || !enabled {
		return nil, err
	}
	scopes, err := agtp.ParseScopeList(call.Scopes)
	if err != nil {
		scopes = nil
	}
	tier := call.Caller.GetTrustTier()
	var out []intent.Candidate
	for _, r := range raw {
		var p patternListing
		if json.Unmarshal(r, &p) != nil || p.PathExact == "" || len(methods) > 0 && !slices.Contains(methods, p.Method) {
			continue
		}
		if p.MinTrustTier > 0 && (tier == 0 || tier > p.MinTrustTier) {
			continue
		}
		required, err := agtp.ParseScopeList(p.RequiredScopes)
		if err != nil {
			continue
		}
		if _, ok := scopes.CoversAll(required); !ok {
			continue
		}
		tp, err := route.ParseTemplate(p.PathExact, nil)
		if err != nil {
			continue
		}
		c := intent.Candidate{Kind: intent.KindPattern, Name: p.RecipeName, Method: p.Method, Path: p.PathExact,
			Description: p.Description, RequiredScopes: p.RequiredScopes, Required: tp.Params}
		ok := true
		for _, s := range p.Steps {
			key := s.Method + " " + s.Path
			if u.eps[key] == nil {
				ok = false
				break
			}
			c.Steps = append(c.Steps, key)
		}
		if ok && len(c.Steps) > 0 {
			out = append(out, c)
		}
	}
	return out, nil
}
