package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/catalogsvc/route"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/recipe"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jcs"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// defaultMaxDepth is max_synthesis_depth when the manifest gives none
// (AGTP-API §8.7 default).
const defaultMaxDepth = 10

// Propose evaluates PROPOSE (core §7.2.7, §7.5; AGTP-API §10.4-§10.8) in the
// order of AGTP-API §10.6 (docs/rcns.md, "PROPOSE"). The answer is a
// ProposeResponse whose status and body_json the front door sends as they
// are; gRPC errors mean the front door's request was malformed or a
// dependency failed.
func (s *Server) Propose(ctx context.Context, req *rcnsv1.ProposeRequest) (*rcnsv1.ProposeResponse, error) {
	c := req.GetCaller()
	if !validAgentID(c.GetAgentId()) {
		return nil, grpcerr.InvalidArgument("caller-required", "PROPOSE needs the caller's canonical Agent-ID")
	}
	negID := canonicalUUID(req.GetNegotiationId())
	if len(req.GetParametersJson()) > s.opts.Propose.MaxBodyBytes {
		return invalid(agtp.StatusBadRequest, negID, agtp.ReasonBodyTooLarge, fmt.Sprintf("the PROPOSE parameters exceed %d bytes", s.opts.Propose.MaxBodyBytes), nil), nil
	}
	st, err := s.state(ctx)
	if err != nil {
		return nil, err
	}
	// Step 0: the switch, then the body's shape.
	if !st.policies.GetSynthesisEnabled() {
		return rejected(negID, agtp.ReasonSynthesisDisabled, "this server does not synthesize endpoints (policies.synthesis_enabled is false)", nil), nil
	}
	p, berr := parseProposal(req.GetParametersJson())
	if berr != nil {
		return invalid(agtp.StatusBadRequest, negID, berr.reason, berr.explanation, nil), nil
	}
	if resp, err := s.limit(ctx, s.opts.Propose.RateLimitScope, "propose:"+c.GetAgentId(), negID); resp != nil || err != nil {
		return resp, err
	}
	// Turns (core §7.4.1): the server mints the Negotiation-ID on the first
	// turn and allows MaxTurns per ID; then the agent must ESCALATE.
	if negID == "" {
		negID = newUUID()
	}
	turn, err := s.turn(ctx, c.GetAgentId(), negID)
	if err != nil {
		return nil, err
	}
	if turn > int64(s.opts.Propose.MaxTurns) {
		return rejected(negID, agtp.ReasonPolicyRefused,
			fmt.Sprintf("this negotiation has used its %d turns; ESCALATE instead of proposing again (core §7.4.1)", s.opts.Propose.MaxTurns),
			map[string]any{"escalate": true, "turn": turn, "max_turns": s.opts.Propose.MaxTurns}), nil
	}
	sessionID := c.GetSessionId()
	if sessionID == "" {
		sessionID = p.sessionID
	}
	ev := &evaluation{st: st, caller: c, scopes: scopesOf(c), p: p, negID: negID, turn: int(turn), sessionID: sessionID}
	return s.evaluateMaybeAsync(ctx, ev)
}

// limit spends one unit of a policysvc named limit; a refusal is 429 with
// scope rcns (AGTP-API §10.1.5). The limiter failing refuses too: an
// unlimited negotiation is what the limit exists to prevent.
func (s *Server) limit(ctx context.Context, scope, key, negID string) (*rcnsv1.ProposeResponse, error) {
	if scope == "" {
		return nil, nil
	}
	ok, retry, err := s.spend(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	if ok {
		return nil, nil
	}
	return answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_RATE_LIMITED, agtp.StatusRateLimited, negID,
		failBody("rate-limited", "too many negotiations; retry later", map[string]any{"scope": "rcns", "retry_after_seconds": retry})), nil
}

func (s *Server) spend(ctx context.Context, scope, key string) (allowed bool, retryAfter int64, err error) {
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	defer cancel()
	r, err := s.policy.CheckRateLimit(pctx, &policyv1.CheckRateLimitRequest{Scope: scope, Key: key, Cost: 1})
	if err != nil {
		s.log.WarnContext(ctx, "rcns rate limit unavailable", "error", err)
		return false, 0, grpcerr.Unavailable("policy-unavailable", "the negotiation rate limit could not be checked; retry")
	}
	return r.GetAllowed(), max(r.GetRetryAfterSeconds(), 1), nil
}

func (s *Server) turn(ctx context.Context, agentID, negID string) (int64, error) {
	key := rediskeys.RCNSNegotiation(agentID, negID)
	pipe := s.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.PExpire(ctx, key, s.opts.Propose.NegotiationTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, grpcerr.Internal(fmt.Errorf("negotiation turn: %w", err))
	}
	return incr.Val(), nil
}

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
	ep, resp := s.validateDefinition(st, def, negID)
	if resp != nil {
		return resp, nil
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

// instantiate turns an approved proposal into a contract, promotes it
// into the catalog when persistence was asked for and granted, audits it,
// and answers 263.
func (s *Server) instantiate(ctx context.Context, ev *evaluation, pat *recipe.Pattern, def map[string]any, scopes []string) (*rcnsv1.ProposeResponse, error) {
	p, negID := ev.p, ev.negID
	if len(scopes) > 0 {
		def["required_scopes"] = scopes
	} else {
		delete(def, "required_scopes")
	}
	def["handler"] = map[string]any{"type": endpoint.HandlerComposition, "recipe": pat.RecipeName}
	ep, err := recipe.CompileDefinition(def, endpoint.Context{})
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("instantiate %s: %w", pat.RecipeName, err))
	}
	now := s.now()
	ttl := s.opts.Propose.SessionTTL
	persistent := false
	var refused map[string]any
	var apiVersion string
	if p.persistent {
		if s.grantsPersistence(ev) {
			ttl = s.opts.Propose.PersistentTTL
			pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
			r, perr := s.catalog.PutEndpoint(pctx, &catalogv1.PutEndpointRequest{DefinitionJson: ep.JSON, Tier: catalogv1.EndpointTier_ENDPOINT_TIER_C})
			cancel()
			if perr != nil {
				_, reason, explanation, _ := grpcerr.Reason(perr)
				refused = map[string]any{"reason": reason, "explanation": "the catalog refused the promotion: " + explanation}
				ttl = s.opts.Propose.SessionTTL
			} else {
				persistent, apiVersion = true, r.GetApiVersion()
			}
		} else {
			refused = map[string]any{"reason": "persistence-not-authorized", "explanation": "persistent:true needs " + s.opts.Propose.PersistScope + " (core §7.5.5); the endpoint is session-scoped"}
		}
	}
	if p.requestedDuration > 0 && p.requestedDuration < ttl {
		ttl = p.requestedDuration
	}
	session := ev.sessionID
	if persistent {
		session = ""
	}
	c := s.newContract(pat, ev.caller.GetAgentId(), session, originPropose, ep.JSON, now, ttl)
	c.rec.Persistent = persistent
	c.state, c.event, c.changedMs = stateActive, eventAccepted, now.UnixMilli()
	unpromote := func() {
		if persistent {
			s.deleteEndpoint(context.WithoutCancel(ctx), c.rec.Method, c.rec.Path)
		}
	}
	if _, err := s.create(ctx, c, false); err != nil {
		unpromote()
		if errors.Is(err, errContractLimit) {
			return rejected(negID, agtp.ReasonPolicyRefused, fmt.Sprintf("you hold %d live contracts, the most allowed; release one (SUSPEND synthesis_id) first", s.opts.Contracts.MaxPerAgent), nil), nil
		}
		return nil, grpcerr.Internal(err)
	}
	if err := s.emit(ctx, &c.rec, eventAccepted, "", ev.caller.GetAgentId()); err != nil {
		// No unaudited contract: take it back.
		s.forget(context.WithoutCancel(ctx), &c.rec, true)
		unpromote()
		return nil, err
	}
	if err := s.clearEvent(ctx, c.rec.SynthesisID, eventAccepted); err != nil {
		s.log.WarnContext(ctx, "contract event flag not cleared", "synthesis_id", c.rec.SynthesisID, "error", err)
	}
	s.keepRecipe(ctx, pat, c.rec.Recipe)

	r := c.rec
	body := map[string]any{
		"method":             r.Method,
		"path":               r.Path,
		"synthesis_id":       r.SynthesisID,
		"endpoint":           json.RawMessage(r.Endpoint),
		"recipe_lineage":     map[string]any{"recipe_name": r.RecipeName, "recipe_version": r.RecipeVersion},
		"expires_at":         rfc3339(r.ExpiresMs),
		"persistent":         persistent,
		"granted_duration":   formatDuration(ttl),
		"contract_hash":      r.ContractHash,
		"negotiation_origin": r.Origin,
		"instantiated_endpoint": map[string]any{
			"method":         r.Method,
			"path":           r.Path,
			"semantic":       json.RawMessage(mustMarshal(ep.Def.Semantic)),
			"input":          json.RawMessage(ep.Def.InputSchema),
			"output":         json.RawMessage(ep.Def.OutputSchema),
			"errors":         ep.Def.Errors,
			"proposed":       true,
			"scope_required": nonNil(ep.Def.RequiredScopes),
			"expires":        map[bool]string{true: "persistent", false: "session"}[persistent],
		},
	}
	if r.SessionID != "" {
		body["session_id"] = r.SessionID
	}
	if refused != nil {
		body["persistent_refused"] = refused
	}
	if apiVersion != "" {
		body["agtp_api_version"] = apiVersion
	}
	resp := answer(rcnsv1.ProposeOutcome_PROPOSE_OUTCOME_APPROVED, agtp.StatusProposalApproved, negID, body)
	resp.Contract = c.proto(s.now().UnixMilli())
	return resp, nil
}

// newContract builds a contract record for a pattern's recipe.
func (s *Server) newContract(pat *recipe.Pattern, agentID, session, origin string, endpointJSON []byte, now time.Time, ttl time.Duration) *contract {
	rc, _ := json.Marshal(pat.Recipe())
	r := record{
		SynthesisID:   newID(prefixSynthesis),
		AgentID:       agentID,
		SessionID:     session,
		RecipeName:    pat.RecipeName,
		RecipeVersion: pat.RecipeVersion,
		Origin:        origin,
		IssuedMs:      now.UnixMilli(),
		ExpiresMs:     now.Add(ttl).UnixMilli(),
		Endpoint:      endpointJSON,
		Recipe:        rc,
	}
	var head struct {
		Method string `json:"method"`
		Path   string `json:"path"`
	}
	_ = json.Unmarshal(endpointJSON, &head)
	r.Method, r.Path = head.Method, head.Path
	r.ContractHash = contractHash(endpointJSON, r.RecipeName, r.RecipeVersion)
	return &contract{rec: r}
}

// contractHash is the SHA-256 of the canonical contract, the endpoint plus
// its lineage (AGTP-API §10.1.3), in RFC 8785 form, as 64 lowercase hex.
func contractHash(endpointJSON []byte, name, version string) string {
	b, err := jcs.Marshal(map[string]any{
		"endpoint":       json.RawMessage(endpointJSON),
		"recipe_lineage": map[string]any{"recipe_name": name, "recipe_version": version},
	})
	if err != nil {
		b = endpointJSON
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keepRecipe stores the captured recipe version once, so GetRecipe can
// serve it after the pattern changes.
func (s *Server) keepRecipe(ctx context.Context, pat *recipe.Pattern, recipeJSON []byte) {
	if err := s.rdb.SetNX(ctx, rediskeys.RCNSRecipe(pat.RecipeName, pat.RecipeVersion), recipeJSON, 0).Err(); err != nil {
		s.log.WarnContext(ctx, "captured recipe not kept", "recipe", pat.RecipeName, "version", pat.RecipeVersion, "error", err)
	}
}

func (s *Server) deleteEndpoint(ctx context.Context, method, path string) {
	pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
	defer cancel()
	if _, err := s.catalog.DeleteEndpoint(pctx, &catalogv1.DeleteEndpointRequest{Method: method, Path: path}); err != nil {
		s.log.ErrorContext(ctx, "promoted endpoint not removed from the catalog", "method", method, "path", path, "error", err)
	}
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

// completeSignature builds the endpoint of a core §7.2.7 proposal: its
// intent, outcome and schemas over the rest of the pattern's contract.
func completeSignature(p *proposal, pat *recipe.Pattern) {
	sem := map[string]any{"actor": "agent", "capability": "domain_spanning", "confidence": 0.5, "impact": "reversible", "is_idempotent": false}
	in := any(map[string]any{"type": "object", "additionalProperties": false})
	out := any(map[string]any{"type": "object"})
	var errs any = []any{}
	description := ""
	if pat != nil {
		_ = json.Unmarshal(pat.Endpoint.Semantic, &sem)
		in, out = json.RawMessage(pat.Endpoint.InputSchema), json.RawMessage(pat.Endpoint.OutputSchema)
		list := make([]any, len(pat.Endpoint.Errors))
		for i, e := range pat.Endpoint.Errors {
			list[i] = e
		}
		errs = list
		description = pat.Endpoint.Description
	}
	sem["intent"] = p.intent
	if o, ok := p.signature["outcome"].(string); ok && o != "" {
		sem["outcome"] = o
	} else if _, ok := sem["outcome"]; !ok {
		sem["outcome"] = "The proposed operation has completed."
	}
	if v := firstOf(p.signature, "input_schema", "params", "input"); v != nil {
		in = schemaOf(v, true)
	}
	if v := firstOf(p.signature, "output_schema", "response", "output"); v != nil {
		out = schemaOf(v, false)
	}
	if description == "" {
		description = p.intent
	}
	if len(description) > 1000 {
		description = description[:1000]
	}
	p.def["description"] = description
	p.def["semantic"] = sem
	p.def["input_schema"] = in
	p.def["output_schema"] = out
	p.def["errors"] = errs
}

func firstOf(m map[string]any, names ...string) any {
	for _, n := range names {
		if v, ok := m[n]; ok && v != nil {
			return v
		}
	}
	return nil
}

// schemaOf reads a §7.2.7 signature member: a JSON Schema when it has a
// type, else a map of parameter names to their schemas.
func schemaOf(v any, input bool) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if _, isSchema := obj["type"]; isSchema {
		return obj
	}
	s := map[string]any{"type": "object", "properties": obj}
	if input {
		s["additionalProperties"] = false
	}
	return s
}

func cloneDef(d map[string]any) map[string]any {
	out := make(map[string]any, len(d)+2)
	for k, v := range d {
		out[k] = v
	}
	return out
}

// prepareDefinition fills what the server decides: the composition
// binding and its error, and a description from the intent when the
// proposer gave none.
func prepareDefinition(def map[string]any, recipeName string) {
	if _, ok := def["description"]; !ok {
		if sem, ok := def["semantic"].(map[string]any); ok {
			if intent, ok := sem["intent"].(string); ok {
				def["description"] = intent
			}
		}
	}
	var errs []string
	if arr, ok := def["errors"].([]any); ok {
		for _, e := range arr {
			if s, ok := e.(string); ok {
				errs = append(errs, s)
			} else {
				errs = nil
				def["errors"] = arr // leave a malformed list for validation to report
				break
			}
		}
		if errs != nil || len(arr) == 0 {
			def["errors"] = recipe.WithCompositionError(errs)
		}
	} else if v, ok := def["errors"]; !ok || v == nil {
		def["errors"] = recipe.WithCompositionError(nil)
	}
	def["handler"] = map[string]any{"type": endpoint.HandlerComposition, "recipe": recipeName}
}

// validateDefinition is steps 3 and 4: every failure of the definition,
// reported under the earliest step it belongs to.
func (s *Server) validateDefinition(st *catalogState, def map[string]any, negID string) (*endpoint.Endpoint, *rcnsv1.ProposeResponse) {
	ep, err := recipe.CompileDefinition(def, endpoint.Context{
		Method: func(name string) ([]string, bool) { c, ok := st.methods[name]; return c, ok },
		Verbs:  st.table.Verbs(),
	})
	if err == nil {
		return ep, nil
	}
	var fes endpoint.Errors
	var fe *endpoint.FieldError
	switch {
	case errors.As(err, &fes):
	case errors.As(err, &fe):
		fes = endpoint.Errors{fe}
	default:
		return nil, invalid(agtp.StatusBadRequest, negID, "endpoint-invalid", err.Error(), nil)
	}
	stage := func(f string) int {
		switch {
		case f == "semantic" || strings.HasPrefix(f, "semantic."):
			return 3
		case strings.HasPrefix(f, "input_schema") || strings.HasPrefix(f, "output_schema"):
			return 4
		}
		return 5
	}
	first := 5
	for _, e := range fes {
		first = min(first, stage(e.Field))
	}
	var violations []map[string]string
	for _, e := range fes {
		if stage(e.Field) == first {
			violations = append(violations, map[string]string{"field": e.Field, "rule": e.Rule, "message": e.Msg})
		}
	}
	reason, what := "endpoint-invalid", "the proposed endpoint definition is invalid (AGTP-API §6)"
	switch first {
	case 3:
		reason, what = "semantic-invalid", "the semantic block is incomplete or has invalid values (AGTP-API §7.1, §10.6 step 3)"
	case 4:
		reason, what = "schema-invalid", "input_schema or output_schema is not a valid JSON Schema 2020-12 object as AGTP-API §6.4 requires (§10.6 step 4)"
	}
	return nil, invalid(agtp.StatusBadRequest, negID, reason, what, map[string]any{"violations": violations})
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

func union(lists ...[]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, v := range l {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	sort.Strings(out)
	return out
}

func uncovered(set agtp.ScopeSet, needed []string) []string {
	var missing []string
	for _, n := range needed {
		if !holds(set, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

func validScopes(list []string) string {
	for _, sc := range list {
		if _, err := agtp.ParseScope(sc); err != nil {
			return sc
		}
	}
	return ""
}

func patternRef(p *recipe.Pattern) map[string]any {
	m := map[string]any{"method": p.Method, "recipe_lineage": map[string]any{"recipe_name": p.RecipeName, "recipe_version": p.RecipeVersion}}
	if p.PathExact != "" {
		m["path"] = p.PathExact
	} else {
		m["path_regex"] = p.PathRegex
	}
	if p.Description != "" {
		m["description"] = p.Description
	}
	return m
}

// patternCounter is a counter-proposal: the pattern's own endpoint, which
// the agent can PROPOSE as it is on its next turn.
func patternCounter(p *recipe.Pattern) map[string]any {
	m := patternRef(p)
	if p.PathExact != "" {
		def := p.Definition(p.PathExact, p.RequiredScopes)
		delete(def, "handler")
		m["endpoint"] = def
	}
	return m
}

// counter picks a counter-proposal among the patterns the caller could
// be granted (AGTP-API §10.6: a related endpoint the server would accept)
// and lists registered endpoints near the proposed path (it "SHOULD
// reference manifest entries with a similar capability").
func (s *Server) counter(ev *evaluation, method, path string, t *route.Template) (map[string]any, []map[string]any) {
	first := ""
	if t != nil {
		for _, seg := range t.Segments {
			if !seg.IsParam() {
				first = seg.Literal
				break
			}
		}
	}
	firstOfPath := func(p string) string {
		for _, seg := range agtp.SplitPath(p) {
			if !strings.HasPrefix(seg, "{") {
				return seg
			}
		}
		return ""
	}
	var best *recipe.Pattern
	bestScore := 0
	for _, pat := range s.pats.Load().list {
		if pat.MinTrustTier > 0 && !tierPasses(ev.caller.GetTrustTier(), pat.MinTrustTier) {
			continue
		}
		if ev.st.data != nil && !allIn(pat.DataClasses, ev.st.data) {
			continue
		}
		if composable(ev.st, pat) != "" {
			continue
		}
		score := 0
		if pat.Method == method {
			score++
		}
		if first != "" && firstOfPath(pat.Path()) == first {
			score += 2
		}
		if score > bestScore {
			best, bestScore = pat, score
		}
	}
	var counter map[string]any
	if best != nil {
		counter = patternCounter(best)
	}
	var similar []map[string]any
	if first != "" {
		for _, e := range ev.st.table.Endpoints() {
			if e.Tier == catalogv1.EndpointTier_ENDPOINT_TIER_B && firstOfPath(e.Template.Raw) == first {
				similar = append(similar, map[string]any{"method": e.Method, "path": e.Template.Raw, "description": e.Proto.GetDescription()})
				if len(similar) == 5 {
					break
				}
			}
		}
	}
	return counter, similar
}

func withCounter(counter map[string]any, similar []map[string]any) map[string]any {
	extra := map[string]any{}
	if counter != nil {
		extra["counter_proposal"] = counter
	}
	if len(similar) > 0 {
		extra["similar_endpoints"] = similar
	}
	return extra
}

func allIn(classes []string, data map[string]dataClass) bool {
	for _, c := range classes {
		if _, ok := data[c]; !ok {
			return false
		}
	}
	return true
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

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}

func mustRaw(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
