package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
)

// defaultMaxDepth is max_synthesis_depth when the manifest gives none
// (AGTP-API §8.7 default).
const defaultMaxDepth = 10

// evaluation is one PROPOSE being evaluated.
type evaluation struct {
	st        *catalogState
	caller    *rcnsv1.Caller
	scopes    agtp.ScopeSet
	p         *proposal
	negID     string
	turn      int
	sessionID string
}

// evaluate runs steps 1-7 of AGTP-API §10.6 and instantiates the
// endpoint. The first failure decides the answer.
func (s *Server) evaluate(ctx context.Context, ev *evaluation) (*rcnsv1.ProposeResponse, error) {
	st, p, negID := ev.st, ev.p, ev.negID
	turnInfo := map[string]any{"turn": ev.turn, "max_turns": s.opts.Propose.MaxTurns}
	reject := func(reason, explanation string, extra map[string]any) *rcnsv1.ProposeResponse {
		if extra == nil {
			extra = map[string]any{}
		}
		for k, v := range turnInfo {
			extra[k] = v
		}
		return rejected(negID, reason, explanation, extra)
	}

	// The core §7.2.7 form names no path: the server picks the pattern
	// offering the method, or says which ones could be meant.
	if p.form == formSignature {
		if _, ok := p.def["path"]; !ok {
			var cands []*recipe.Pattern
			for _, pat := range s.pats.Load().list {
				if pat.Method == p.method && pat.PathExact != "" {
					cands = append(cands, pat)
				}
			}
			switch len(cands) {
			case 0:
				counter, similar := s.counter(ev, p.method, "", nil)
				return reject(agtp.ReasonCompositionImpossible, "no composition of this server's endpoints offers "+p.method, withCounter(counter, similar)), nil
			case 1:
				p.def["path"] = cands[0].PathExact
			default:
				list := make([]map[string]any, len(cands))
				for i, c := range cands {
					list[i] = patternRef(c)
				}
				return reject(agtp.ReasonAmbiguous, "several endpoints could be meant; propose again with signature.path",
					map[string]any{"candidates": list, "counter_proposal": list[0]}), nil
			}
		}
	}
	method, _ := p.def["method"].(string)
	path, _ := p.def["path"].(string)
	if method == "" || path == "" {
		return invalid(agtp.StatusBadRequest, negID, "proposal-incomplete", "the proposed endpoint needs a method and a path (strings)", nil), nil
	}

	// Step 1: the method is in the catalog or custom.
	if !agtp.ValidMethodToken(method) {
		return invalid(agtp.StatusMethodViolation, negID, agtp.ReasonMethodInvalid, fmt.Sprintf("%q is not an AGTP method: 3-32 upper-case letters (AGTP-API §3.2)", method),
			map[string]any{"method": method, "catalog_version": st.snap.GetCatalogVersion()}), nil
	}
	if _, ok := st.methods[method]; !ok {
		return invalid(agtp.StatusMethodViolation, negID, route.ReasonMethodNotInCatalog, method+" is not in the method catalog "+st.snap.GetCatalogVersion()+" and is not a custom method of this server",
			map[string]any{"method": method, "catalog_version": st.snap.GetCatalogVersion()}), nil
	}
	// Step 2: the path passes AGTP-API §5.
	tmpl, err := route.ParseTemplate(path, st.table.Verbs())
	if err != nil {
		var ge *route.GrammarError
		if errors.As(err, &ge) {
			return invalid(agtp.StatusEndpointViolation, negID, ge.Rule, ge.Error(), map[string]any{"segment": ge.Segment, "path": path}), nil
		}
		return invalid(agtp.StatusEndpointViolation, negID, route.RulePathMalformed, err.Error(), map[string]any{"path": path}), nil
	}
	if method == "DISCOVER" {
		if name := route.ReservedDiscoverConflict(path); name != "" || path == "/" {
			return invalid(agtp.StatusEndpointViolation, negID, route.RuleReservedDiscovery, "DISCOVER "+path+" is reserved for the built-ins (AGTP-API §5.9)",
				map[string]any{"segment": strings.TrimPrefix(path, "/"), "path": path}), nil
		}
	}

	pat := s.matchProposal(method, path)
	if p.form == formSignature {
		completeSignature(p, pat)
	}
	classes := proposalClasses(p, pat, tmpl)
	if pat != nil && p.dataClass != "" && len(pat.DataClasses) > 0 && !slices.Contains(pat.DataClasses, strings.ToLower(p.dataClass)) {
		pat = nil // the recipe does not read the data class the proposal names
	}

	// Steps 3 and 4: the semantic block, then the schemas.
	def := cloneDef(p.def)
	recipeName := "rcns.unmatched"
	if pat != nil {
		recipeName = pat.RecipeName
	}
	prepareDefinition(def, recipeName)
	ep, resp, err := s.validateDefinition(ctx, st, def, negID)
	if resp != nil || err != nil {
		return resp, err
	}

	// AGIS §8.3: the data manifest is the ceiling of what is negotiable.
	if st.data != nil {
		for _, cl := range classes {
			if _, ok := st.data[cl]; !ok {
				return reject(agtp.ReasonOutOfScope, "this server's data_manifest offers no data class "+cl+" (AGIS §8.3); nothing can be negotiated over it", nil), nil
			}
		}
	}
	// Step 5: credentials for sensitive data classes (core §7.5.4), then
	// Authority-Scope over every composed step and the whole (§10.7, §16.2).
	if resp := s.credentials(ev, classes); resp != nil {
		return resp, nil
	}
	if bad := validScopes(p.scopeRequested); bad != "" {
		return invalid(agtp.StatusBadRequest, negID, "invalid-parameter", "scope_requested holds a malformed scope token "+bad, nil), nil
	}
	needed := union(ep.Def.RequiredScopes, p.scopeRequested)
	if pat != nil {
		needed = union(needed, pat.RequiredScopes, stepScopes(st, pat))
	}
	if missing := uncovered(ev.scopes, needed); len(missing) > 0 {
		return authorizationRequired(negID, agtp.ReasonScopeRequired,
			"the composed endpoint needs "+strings.Join(missing, ", ")+", which Authority-Scope does not grant (AGTP-API §10.7)",
			map[string]any{"scope": missing[0], "scopes": missing}), nil
	}
	// Step 6: the endpoint can be composed from existing capabilities.
	if pat == nil {
		counter, similar := s.counter(ev, method, path, tmpl)
		return reject(agtp.ReasonCompositionImpossible, "no composition of this server's endpoints provides "+method+" "+path, withCounter(counter, similar)), nil
	}
	if why := composable(st, pat); why != "" {
		return reject(agtp.ReasonCompositionImpossible, why, nil), nil
	}
	// The members the recipe cannot run without must be required by the
	// proposed input too; optional ones the proposal leaves out are simply
	// never supplied.
	needs := requiredMembers(pat.Endpoint.InputSchema)
	props, required := recipe.SchemaProperties(mustRaw(ep.Def.InputSchema)), requiredMembers(ep.Def.InputSchema)
	for _, param := range tmpl.Params {
		required[param] = true // a path parameter is always bound
	}
	for _, m := range pat.Recipe().InputMembers() {
		if needs[m] && (!props[m] || !required[m]) {
			return reject(agtp.ReasonCompositionImpossible, "the composition needs the input member "+m+", which the proposed input_schema does not require",
				map[string]any{"counter_proposal": patternCounter(pat)}), nil
		}
	}
	// Step 7: policy admits the method and path.
	if pat.MinTrustTier > 0 && !tierPasses(ev.caller.GetTrustTier(), pat.MinTrustTier) {
		return reject(agtp.ReasonPolicyRefused, fmt.Sprintf("this composition is offered to trust tier %d or better only", pat.MinTrustTier), nil), nil
	}
	d := st.table.Decide(method, samplePath(tmpl))
	switch {
	case d.Outcome == route.Matched:
		return reject(agtp.ReasonPolicyRefused, method+" "+path+" is already served by the registered endpoint "+d.Endpoint.Method+" "+d.Endpoint.Template.Raw,
			map[string]any{"counter_proposal": map[string]any{"method": d.Endpoint.Method, "path": d.Endpoint.Template.Raw, "registered": true}}), nil
	case d.Outcome == route.MethodNotAllowed && d.Reason == route.ReasonMethodDisallowed, d.Outcome == route.MethodViolation:
		return reject(agtp.ReasonPolicyRefused, "the method policy does not admit "+method+" (AGTP-API §9)", nil), nil
	}

	return s.instantiate(ctx, ev, pat, def, needed)
}

func (s *Server) grantsPersistence(ev *evaluation) bool {
	return ev.caller.GetOperator() || holds(ev.scopes, s.opts.Propose.PersistScope)
}

// credentials is step 5's first half (core §7.5.4): a data class the
// manifest marks requires_authorization is negotiated only by a caller
// holding a scope in that class's domain (location:read for location).
func (s *Server) credentials(ev *evaluation, classes []string) *rcnsv1.ProposeResponse {
	if ev.st.data == nil {
		return nil
	}
	for _, cl := range classes {
		dc, ok := ev.st.data[cl]
		if !ok || !dc.RequiresAuthorization {
			continue
		}
		granted := false
		for _, sc := range ev.scopes {
			if d := sc.Domain(); d == cl || d == "*" {
				granted = true
				break
			}
		}
		if !granted {
			return authorizationRequired(ev.negID, agtp.ReasonCredentialsMissing,
				"the data class "+cl+" requires authorization: hold a "+cl+":* scope to negotiate over it (core §7.5.4)",
				map[string]any{"data_class": cl, "scope": cl + ":read"})
		}
	}
	return nil
}

// matchProposal returns the pattern offering a proposed (method, path).
func (s *Server) matchProposal(method, path string) *recipe.Pattern {
	var regexMatch *recipe.Pattern
	for _, pat := range s.pats.Load().list {
		if pat.MatchTemplate(method, path) {
			if pat.PathExact != "" {
				return pat
			}
			if regexMatch == nil {
				regexMatch = pat
			}
		}
	}
	return regexMatch
}

// proposalClasses are the data classes a proposal reads: the one it names,
// else its recipe's, else the path's first literal segment.
func proposalClasses(p *proposal, pat *recipe.Pattern, t *route.Template) []string {
	if p.dataClass != "" {
		return []string{strings.ToLower(p.dataClass)}
	}
	if pat != nil && len(pat.DataClasses) > 0 {
		return pat.DataClasses
	}
	for _, seg := range t.Segments {
		if !seg.IsParam() {
			return []string{strings.ToLower(seg.Literal)}
		}
	}
	return nil
}

// composable checks a pattern's steps against the current catalog: each
// is a registered operator endpoint the method policy admits, and there
// are at most max_synthesis_depth of them. "" means composable.
func composable(st *catalogState, pat *recipe.Pattern) string {
	maxDepth := int(st.policies.GetMaxSynthesisDepth())
	if maxDepth <= 0 {
		maxDepth = defaultMaxDepth
	}
	if len(pat.Steps) > maxDepth {
		return fmt.Sprintf("the composition needs %d steps; max_synthesis_depth is %d", len(pat.Steps), maxDepth)
	}
	for i, step := range pat.Steps {
		e := st.table.Endpoint(step.Method, step.Path)
		if e == nil {
			return fmt.Sprintf("step %d of the composition, %s %s, is not registered on this server", i+1, step.Method, step.Path)
		}
		if e.Tier != catalogv1.EndpointTier_ENDPOINT_TIER_B {
			return fmt.Sprintf("step %d of the composition, %s %s, is not an operator endpoint (compositions do not call built-ins or other synthesized endpoints)", i+1, step.Method, step.Path)
		}
		if d := st.table.Decide(step.Method, samplePath(e.Template)); d.Outcome != route.Matched {
			return fmt.Sprintf("step %d of the composition, %s %s, is not admitted by the method policy", i+1, step.Method, step.Path)
		}
	}
	return ""
}

// stepScopes are the required scopes of a pattern's registered steps.
func stepScopes(st *catalogState, pat *recipe.Pattern) []string {
	var out []string
	for _, step := range pat.Steps {
		if e := st.table.Endpoint(step.Method, step.Path); e != nil {
			out = append(out, e.Proto.GetRequiredScopes()...)
		}
	}
	return out
}

// samplePath is a concrete path of a template, for the structural
// decision: every parameter becomes a value no method name can equal.
func samplePath(t *route.Template) string {
	if len(t.Segments) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, seg := range t.Segments {
		b.WriteByte('/')
		if seg.IsParam() {
			b.WriteString("x")
		} else {
			b.WriteString(seg.Literal)
		}
	}
	return b.String()
}

func requiredMembers(schema json.RawMessage) map[string]bool {
	var sc struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(schema, &sc)
	out := make(map[string]bool, len(sc.Required))
	for _, r := range sc.Required {
		out[r] = true
	}
	return out
}

func mustRaw(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}
