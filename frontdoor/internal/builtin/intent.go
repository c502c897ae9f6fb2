package builtin

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/intent"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/services/agtp"
)

// The floor methods on / that answer from the caller's own endpoints
// (core §7.2.1, §7.2.5, §7.2.6, §7.2.8; docs/intent.md): QUERY / resolves
// an intent, PLAN / plans a goal, SUMMARIZE / and EXECUTE / list what the
// caller can summarize or execute. They see only the endpoints the caller
// may use (catalogstate.MayUse: the method policy, anonymous access and
// its scopes, and for a composition every step too), never the protocol
// built-ins, and run nothing.

// FunctionPrefix names the registered functions of the protocol-native
// (Tier A) endpoints, which the front door implements itself.
const FunctionPrefix = "agtp.builtin."

// ResolvesIntent reports whether the built-in at (method, template) is
// one of the floor methods on / that answer from the caller's endpoints:
// discovery, as far as policies.anonymous_discovery goes.
func ResolvesIntent(method, template string) bool {
	if template != "/" {
		return false
	}
	switch method {
	case agtp.MethodQuery, agtp.MethodPlan, agtp.MethodSummarize, agtp.MethodExecute:
		return true
	}
	return false
}

// Bounds of the answers.
const (
	defaultResults = 10
	// maxListed bounds a SUMMARIZE / or EXECUTE / listing.
	maxListed = 100
)

// usable is what the caller may use: its endpoints (the protocol
// built-ins left out), each prepared for the intent engine.
type usable struct {
	preps []*intent.Prepared
	// eps maps a candidate's "METHOD /path" to its endpoint.
	eps map[string]*endpoint.Endpoint
}

// preparedSet is the catalog snapshot's endpoints prepared for the intent
// engine, aligned with State.Endpoints (nil for the protocol built-ins).
type preparedSet struct {
	state *catalogstate.State
	eps   []*intent.Prepared
}

// preparedFor returns the snapshot's prepared endpoints, preparing them
// on the snapshot's first use: a snapshot's texts are analysed once, not
// on every request.
func (bi *Registry) preparedFor(st *catalogstate.State) []*intent.Prepared {
	if cur := bi.prepared.Load(); cur != nil && cur.state == st {
		return cur.eps
	}
	set := &preparedSet{state: st, eps: make([]*intent.Prepared, len(st.Endpoints))}
	for i, ep := range st.Endpoints {
		if !strings.HasPrefix(ep.HandlerName(), FunctionPrefix) {
			set.eps[i] = intent.Prepare(intent.FromEndpoint(ep))
		}
	}
	bi.prepared.Store(set)
	return set.eps
}

// usableEndpoints collects the endpoints the caller may use for which
// keep holds. A composition is usable when its every step is too; its
// candidate lists the steps when its recipe resolves.
func (bi *Registry) usableEndpoints(ctx context.Context, call *Call, keep func(*endpoint.Endpoint) bool) usable {
	scopes, err := agtp.ParseScopeList(call.Scopes)
	if err != nil {
		scopes = nil
	}
	st := call.State
	identified := call.AgentID != ""
	prepared := bi.preparedFor(st)
	u := usable{eps: map[string]*endpoint.Endpoint{}}
	for i, ep := range st.Endpoints {
		p := prepared[i]
		if p == nil || !keep(ep) || !st.MayUse(ep, identified, scopes) {
			continue
		}
		c := p.Candidate()
		if c.Kind == intent.KindComposition && bi.Recipe != nil {
			rec, err := bi.Recipe(ctx, c.Name)
			if err != nil {
				bi.Log.DebugContext(ctx, "composition left without steps in intent resolution", "recipe", c.Name, "error", err)
			} else {
				var steps []string
				ok := true
				for _, s := range rec.Steps {
					step := st.Table.Endpoint(s.Method, s.Path)
					if step == nil || !st.MayUse(st.Endpoints[step.Index], identified, scopes) {
						ok = false
						break
					}
					steps = append(steps, s.Method+" "+s.Path)
				}
				if !ok {
					continue
				}
				p = p.WithSteps(steps)
			}
		}
		u.preps = append(u.preps, p)
		u.eps[c.Key()] = ep
	}
	return u
}

// found is one endpoint (or composite) of an answer: what it is, what its
// semantic block says, what it takes, and why it was chosen.
type found struct {
	Kind           intent.Kind        `json:"kind"`
	Method         string             `json:"method"`
	Path           string             `json:"path"`
	Recipe         string             `json:"recipe,omitempty"`
	Description    string             `json:"description,omitempty"`
	Semantic       *endpoint.Semantic `json:"semantic,omitempty"`
	InputSchema    json.RawMessage    `json:"input_schema,omitempty"`
	RequiredInputs []string           `json:"required_inputs"`
	RequiredScopes []string           `json:"required_scopes"`
	Steps          []string           `json:"steps,omitempty"`
	Deprecated     bool               `json:"deprecated,omitempty"`
	Score          float64            `json:"score"`
	Confidence     float64            `json:"confidence"`
	MatchedTerms   []string           `json:"matched_terms"`
	// MatchedFields names, for each matched word stem, the fields of the
	// endpoint it was found in.
	MatchedFields map[string][]string `json:"matched_fields"`
}

func (u usable) found(m intent.Match) found {
	c := m.Candidate
	f := found{
		Kind: c.Kind, Method: c.Method, Path: c.Path, Recipe: c.Name, Description: c.Description,
		RequiredInputs: nonNil(c.Required), RequiredScopes: nonNil(c.RequiredScopes), Steps: c.Steps, Deprecated: c.Deprecated,
		Score: m.Score, Confidence: m.Confidence, MatchedTerms: nonNil(m.Terms), MatchedFields: m.Fields,
	}
	if f.MatchedFields == nil {
		f.MatchedFields = map[string][]string{}
	}
	if ep := u.eps[c.Key()]; ep != nil && c.Kind != intent.KindPattern {
		sem := ep.Def.Semantic
		f.Semantic, f.InputSchema = &sem, ep.Def.InputSchema
	}
	return f
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// inScope applies QUERY's scope parameter (core §7.2.1, the data domains
// to include): an endpoint is in a domain named by its namespace, its
// first path segment or the resource of a required scope ("orders" of
// orders:read). A domain is compared without any ":action" part, so
// "orders:read" names the orders domain. No scope keeps everything.
func inScope(domains []string) func(*endpoint.Endpoint) bool {
	if len(domains) == 0 {
		return func(*endpoint.Endpoint) bool { return true }
	}
	want := map[string]bool{}
	for _, d := range domains {
		d, _, _ = strings.Cut(strings.TrimSpace(d), ":")
		want[strings.ToLower(d)] = true
	}
	return func(ep *endpoint.Endpoint) bool {
		d := ep.Def
		first, _, _ := strings.Cut(strings.TrimPrefix(d.Path, "/"), "/")
		if want[strings.ToLower(d.Namespace)] || want[strings.ToLower(first)] {
			return true
		}
		for _, s := range d.RequiredScopes {
			res, _, _ := strings.Cut(s, ":")
			if want[strings.ToLower(res)] {
				return true
			}
		}
		return false
	}
}

// stringList reads a parameter that is one string (comma separated) or an
// array of strings.
func stringList(params map[string]any, name string) []string {
	switch v := params[name].(type) {
	case string:
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// queryIntent serves QUERY / (core §7.2.1): the endpoints the caller may
// use, ranked against its intent, best first, each with its semantic
// block, input schema, required scopes, score, confidence and the words
// that matched. confidence_threshold drops matches below it; scope
// narrows the endpoints to data domains. An intent nothing answers is a
// result set of none.
func (bi *Registry) queryIntent(ctx context.Context, call *Call) *agtp.Response {
	text := strings.TrimSpace(str(call.Params, "intent"))
	if text == "" {
		return call.Fail(agtp.StatusUnprocessable, "intent-required", "QUERY / resolves an intent: send intent, a sentence saying what you need (core §7.2.1)", nil)
	}
	limit, ok := intParam(call.Params, "max_results", 1, intent.MaxResults)
	if !ok {
		return call.Fail(agtp.StatusUnprocessable, "max-results-invalid", "max_results must be an integer from 1 to 50", nil)
	}
	if limit == 0 {
		limit = defaultResults
	}
	threshold, _ := call.Params["confidence_threshold"].(float64)
	u := bi.usableEndpoints(ctx, call, inScope(stringList(call.Params, "scope")))
	results := []found{}
	for _, m := range intent.NewPrepared(u.preps).Rank(text, limit) {
		if m.Confidence >= threshold {
			results = append(results, u.found(m))
		}
	}
	return envelopeResponse(call, map[string]any{
		"intent":           text,
		"results":          results,
		"result_count":     len(results),
		"candidates":       len(u.preps),
		"catalog_revision": call.State.Snapshot.GetRevision(),
	})
}

// listMethod serves SUMMARIZE / and EXECUTE /: the endpoints of that
// method the caller may use, with their semantic blocks and inputs. With
// a text to serve (SUMMARIZE's source and focus, EXECUTE's action) the
// ones it matches come first, best first; the rest follow in "METHOD
// /path" order with a score of 0.
func (bi *Registry) listMethod(ctx context.Context, call *Call) *agtp.Response {
	var text string
	switch call.Method {
	case agtp.MethodSummarize:
		text = strings.TrimSpace(str(call.Params, "focus") + " " + str(call.Params, "source"))
	default:
		text = strings.TrimSpace(str(call.Params, "action"))
	}
	u := bi.usableEndpoints(ctx, call, func(ep *endpoint.Endpoint) bool { return ep.Def.Method == call.Method })
	var ranked []intent.Match
	if text != "" {
		ranked = intent.NewPrepared(u.preps).Rank(text, intent.MaxResults)
	}
	listed := map[string]bool{}
	out := []found{}
	for _, m := range ranked {
		listed[m.Candidate.Key()] = true
		out = append(out, u.found(m))
	}
	rest := make([]intent.Candidate, len(u.preps))
	for i, p := range u.preps {
		rest[i] = p.Candidate()
	}
	slices.SortFunc(rest, func(a, b intent.Candidate) int { return strings.Compare(a.Key(), b.Key()) })
	for _, c := range rest {
		if !listed[c.Key()] {
			out = append(out, u.found(intent.Match{Candidate: c}))
		}
	}
	truncated := len(out) > maxListed
	if truncated {
		out = out[:maxListed]
	}
	return envelopeResponse(call, map[string]any{
		"method":         call.Method,
		"endpoints":      out,
		"endpoint_count": len(out),
		"truncated":      truncated,
	})
}

// round2 rounds a share to two decimals.
func round2(f float64) float64 { return math.Round(f*100) / 100 }
