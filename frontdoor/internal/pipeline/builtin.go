package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/internal/callerproof"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/paging"
)

// builtin runs a protocol-native (Tier A) endpoint. They are dispatched on
// method and path template, which the catalog reserves for them.
func (p *Pipeline) builtin(x *exchange, input []byte) *agtp.Response {
	params := map[string]any{}
	_ = json.Unmarshal(input, &params)
	ep := x.decision.Endpoint.Proto
	switch ep.GetMethod() {
	case "DISCOVER":
		return p.discover(x, ep.GetPath(), params)
	case "DESCRIBE":
		return p.describe(x, ep.GetPath(), params)
	case "INSPECT":
		return p.inspect(x, params)
	case "ACTIVATE", "DEACTIVATE", "REINSTATE", "REVOKE", "DEPRECATE":
		return p.lifecycle(x, ep.GetMethod(), params)
	case "PROPOSE":
		return p.propose(x, input)
	case "QUERY":
		switch ep.GetPath() {
		case "/proposals/{proposal_id}":
			return p.proposal(x, str(params, "proposal_id"))
		case "/tasks/{task_id}":
			return p.queryTask(x, params)
		case "/notifications/{notification_id}":
			return p.queryNotification(x, params)
		case "/inbox":
			return p.queryInbox(x, params)
		}
	case "QUOTE":
		return p.quote(x, input)
	case "SUSPEND":
		return p.suspend(x, params)
	case "RESUME":
		return p.resume(x, params)
	case "ESCALATE":
		return p.escalate(x, params)
	case "CONFIRM":
		return p.confirm(x, params)
	case "NOTIFY":
		return p.notify(x, params)
	case "DELEGATE":
		return p.delegate(x, params)
	case "RETRY":
		return p.retry(x, params)
	case "MONITOR":
		return p.monitor(x, params)
	}
	return x.fail(agtp.StatusNotImplemented, "builtin-unsupported", ep.GetMethod()+" "+ep.GetPath()+" is not implemented by this front door", nil)
}

func jsonResponse(x *exchange, status int, contentType string, v any) *agtp.Response {
	b, err := json.Marshal(v)
	if err != nil {
		return x.fail(agtp.StatusServerError, "internal", "the response could not be encoded", nil)
	}
	return agtp.NewResponse(status, contentType, b)
}

func str(params map[string]any, name string) string {
	switch v := params[name].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// discover serves the DISCOVER built-ins (AGTP-API §5.8,
// docs/decisions.md#D-discover-root).
func (p *Pipeline) discover(x *exchange, path string, params map[string]any) *agtp.Response {
	snap := x.state.Snapshot
	switch path {
	case "/":
		if x.agentID == "" {
			return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeManifestJSON, snap.GetManifestJson())
		}
		type entry struct {
			Path string `json:"path"`
			Tier string `json:"tier"`
		}
		dir := []entry{}
		for _, e := range snap.GetEndpoints() {
			if e.GetMethod() == "DISCOVER" && e.GetPath() != "/" {
				dir = append(dir, entry{Path: e.GetPath(), Tier: tierLetter(e.GetTier().String())})
			}
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"directory": dir})
	case "/methods":
		type method struct {
			Method      string `json:"method"`
			Path        string `json:"path"`
			Description string `json:"description,omitempty"`
			Tier        string `json:"tier"`
		}
		out := []method{}
		for _, e := range snap.GetEndpoints() {
			out = append(out, method{e.GetMethod(), e.GetPath(), e.GetDescription(), tierLetter(e.GetTier().String())})
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
	case "/agents":
		agents, err := paging.All(x.ctx, func(ctx context.Context, tok string) ([]*identityv1.AgentRecord, string, error) {
			r, err := p.Identity.ListAgents(ctx, &identityv1.ListAgentsRequest{ActiveOnly: true, PageSize: listPageSize, PageToken: tok})
			return r.GetAgents(), r.GetNextPageToken(), err
		})
		if err != nil {
			return p.dependencyFailure(x, "identitysvc", err)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, agentListing(agents, str(params, "criteria"), str(params, "max_results")))
	case "/genesis":
		id := str(params, "agent_id")
		if id == "" {
			id = x.agentID
		}
		if id == "" {
			return x.fail(agtp.StatusNotFound, "genesis-not-found", "no Agent Genesis is loaded for an anonymous caller; name the agent with Agent-ID or the agent_id parameter", nil)
		}
		resp, err := p.Identity.GetGenesis(x.ctx, &identityv1.GetGenesisRequest{AgentId: id})
		if err != nil {
			return p.dependencyFailure(x, "identitysvc", err)
		}
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, resp.GetGenesisJson())
	case "/tools", "/apis":
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, []any{})
	case "/patterns":
		if p.RCNS == nil {
			return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"rcns_enabled": false, "patterns": []any{}})
		}
		// Each page's body_json lists its patterns; the body is their
		// concatenation.
		var enabled bool
		pats, err := paging.All(x.ctx, func(ctx context.Context, tok string) ([]json.RawMessage, string, error) {
			r, err := p.RCNS.ListPatterns(ctx, &rcnsv1.ListPatternsRequest{PageSize: listPageSize, PageToken: tok})
			if err != nil {
				return nil, "", err
			}
			var body struct {
				Patterns []json.RawMessage `json:"patterns"`
			}
			if err := json.Unmarshal(r.GetBodyJson(), &body); err != nil {
				return nil, "", fmt.Errorf("patterns body: %w", err)
			}
			enabled = r.GetRcnsEnabled()
			return body.Patterns, r.GetNextPageToken(), nil
		})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"rcns_enabled": enabled, "patterns": append([]json.RawMessage{}, pats...)})
	case "/contracts":
		if p.RCNS == nil {
			return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, []any{})
		}
		caller := p.rcnsCaller(x)
		cts, err := paging.All(x.ctx, func(ctx context.Context, tok string) ([]*rcnsv1.Contract, string, error) {
			r, err := p.RCNS.ListContracts(ctx, &rcnsv1.ListContractsRequest{Caller: caller, PageSize: listPageSize, PageToken: tok})
			return r.GetContracts(), r.GetNextPageToken(), err
		})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		out := []map[string]any{}
		for _, c := range cts {
			out = append(out, contractJSON(c))
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
	}
	return x.fail(agtp.StatusNotFound, "not-found", "no DISCOVER built-in at "+path, nil)
}

// agentListing is the DISCOVER /agents body: the AGTP-API §5.8.2 members
// plus the core §7.2.2 candidate members (description, principal and a
// relevance score), best match first. Without criteria every agent is
// equally relevant (1) and the registry's order stands.
func agentListing(agents []*identityv1.AgentRecord, criteria, maxResults string) []map[string]any {
	terms := criteriaTerms(criteria)
	out := []map[string]any{}
	for _, a := range agents {
		desc := identitydoc.Description(a)
		rel := relevance(terms, a.GetName(), desc, a.GetOwner(), a.GetOwnerId(), a.GetArchetype(), strings.Join(a.GetScopes(), " "))
		if rel == 0 {
			continue
		}
		e := map[string]any{
			"agent_id": a.GetAgentId(), "name": a.GetName(), "description": desc, "principal": a.GetOwner(),
			"relevance": rel, "trust_tier": a.GetTrustTier(), "verification_path": a.GetVerificationPath(),
		}
		if a.GetOwnerId() != "" {
			e["owner_id"] = a.GetOwnerId()
		}
		if a.GetTrustTier() == 2 && a.GetTrustWarning() != "" {
			e["trust_warning"] = a.GetTrustWarning()
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i]["relevance"].(float64) > out[j]["relevance"].(float64) })
	// The input schema bounds max_results to 1..1000.
	if n, err := strconv.Atoi(maxResults); err == nil && n > 0 && n < len(out) {
		out = out[:n]
	}
	return out
}

// maxCriteriaTerms bounds the work one DISCOVER's criteria can ask for.
const maxCriteriaTerms = 32

// listPageSize is the page a DISCOVER built-in asks a List RPC for when
// it needs the whole list: the largest these RPCs serve.
const listPageSize = 1000

// criteriaTerms splits DISCOVER criteria into distinct lowercase words.
func criteriaTerms(criteria string) []string {
	var terms []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(criteria), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if !seen[w] && len(terms) < maxCriteriaTerms {
			seen[w] = true
			terms = append(terms, w)
		}
	}
	return terms
}

// relevance is the share of the terms found in the fields, rounded to two
// decimals; 1 when there are no terms.
func relevance(terms []string, fields ...string) float64 {
	if len(terms) == 0 {
		return 1
	}
	hay := strings.ToLower(strings.Join(fields, " "))
	hits := 0
	for _, t := range terms {
		if strings.Contains(hay, t) {
			hits++
		}
	}
	return math.Round(float64(hits)/float64(len(terms))*100) / 100
}

// looksLikeCanonicalID says whether a name is meant as a canonical
// Agent-ID (long and all hexadecimal, in any case): such a name that is not
// a valid ID is a malformed ID, not an unknown label.
func looksLikeCanonicalID(s string) bool {
	if len(s) < 48 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func tierLetter(enum string) string {
	return strings.TrimPrefix(enum, "ENDPOINT_TIER_")
}

// describe serves DESCRIBE: the server's capability document, or an
// agent's identity document in the requested format (core §6.1.7, §6.3).
func (p *Pipeline) describe(x *exchange, path string, params map[string]any) *agtp.Response {
	if path == "/" {
		snap := x.state.Snapshot
		methods := []string{}
		seen := map[string]bool{}
		for _, e := range snap.GetEndpoints() {
			if !seen[e.GetMethod()] {
				seen[e.GetMethod()] = true
				methods = append(methods, e.GetMethod())
			}
		}
		for _, m := range agtp.FloorMethods() {
			if !seen[m] {
				seen[m] = true
				methods = append(methods, m)
			}
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
			"methods":               methods,
			"modalities":            []string{"application/vnd.agtp+json"},
			"tools":                 []any{},
			"version":               snap.GetApiVersion(),
			"catalog_version":       snap.GetCatalogVersion(),
			"budget_units_accepted": []string{"tokens", "compute-seconds", "calls", "USD", "EUR", "GBP"},
			"zones_accepted":        []string{},
		})
	}
	if path == "/merchant" {
		return p.describeMerchant(x)
	}
	if path == "/agents" {
		doc, err := p.Identity.GetNamespaceDocument(x.ctx, &identityv1.GetNamespaceDocumentRequest{})
		if err != nil {
			return p.dependencyFailure(x, "identitysvc", err)
		}
		return agtp.NewResponse(agtp.StatusOK, doc.GetContentType(), doc.GetDocumentJson())
	}
	format := str(params, "format")
	if path == "/agents/{agent_name}/status" {
		format = "status"
	}
	name := str(params, "agent_name")
	if name == "" {
		name = str(params, "agent_id")
	}
	if looksLikeCanonicalID(name) && !agtp.IsCanonicalID(name) {
		return x.fail(agtp.StatusBadRequest, "invalid-canonical-id",
			"a canonical Agent-ID is exactly 64 lowercase hexadecimal characters (core §6.1.8.1)", nil)
	}
	req := &identityv1.ResolveAgentRequest{Name: name}
	if agtp.IsCanonicalID(name) {
		req = &identityv1.ResolveAgentRequest{AgentId: name}
	}
	rec, err := p.Identity.ResolveAgent(x.ctx, req)
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	x.target = rec.GetAgent()
	doc, err := p.Identity.GetIdentityDocument(x.ctx, &identityv1.GetIdentityDocumentRequest{AgentId: rec.GetAgent().GetAgentId(), Format: format})
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	return agtp.NewResponse(agtp.StatusOK, doc.GetContentType(), doc.GetDocumentJson())
}

// describeMerchant serves this server's merchant identity (core §9) for an
// agent's counterparty verification before PURCHASE: the Merchant-ID and
// Merchant-Manifest-Fingerprint a PURCHASE must carry, the merchant's
// status and, when the operator configured the document itself, the
// Merchant Manifest Document, whose RFC 8785 form hashes to the
// fingerprint.
func (p *Pipeline) describeMerchant(x *exchange) *agtp.Response {
	m, err := p.Policy.GetMerchant(x.ctx, &policyv1.GetMerchantRequest{})
	if err != nil {
		return p.dependencyFailure(x, "policysvc", err)
	}
	if !m.GetConfigured() {
		return x.fail(agtp.StatusNotFound, "merchant-not-configured", "this server has no merchant identity; it accepts no PURCHASE", nil)
	}
	out := map[string]any{
		"merchant_id":          m.GetMerchantId(),
		"manifest_fingerprint": m.GetManifestFingerprint(),
		"status":               m.GetStatus(),
	}
	if doc := m.GetManifestJson(); len(doc) > 0 {
		out["manifest"] = json.RawMessage(doc)
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
}

// inspect reads the audit store (core §7.2.4).
func (p *Pipeline) inspect(x *exchange, params map[string]any) *agtp.Response {
	target := str(params, "target")
	caller := inspectCaller(x)
	// The ACL is checked before any lookup, so a refused caller cannot
	// learn whether a record exists.
	if err := p.acl.Precheck(caller); err != nil {
		return p.dependencyFailure(x, "inspect", err)
	}
	switch target {
	case "audit":
		id := str(params, "audit_id")
		if !agtp.IsCanonicalID(id) {
			return x.fail(agtp.StatusBadRequest, "audit-id-required", "target=audit needs audit_id: 64 lowercase hexadecimal characters", nil)
		}
		r, err := p.Audit.GetRecord(x.ctx, &auditv1.GetRecordRequest{AuditId: id})
		if err != nil {
			return p.dependencyFailure(x, "auditsvc", err)
		}
		rec := r.GetRecord()
		if err := p.acl.Allow(caller, rec.GetChainAgentId()); err != nil {
			return p.dependencyFailure(x, "inspect", err)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{
			"audit_id": rec.GetAuditId(), "jws": rec.GetJws(), "payload": json.RawMessage(rec.GetPayloadJson()),
			"chain_agent_id": rec.GetChainAgentId(), "sequence": rec.GetSequence(),
		})
	case "chain_head":
		id := str(params, "agent_id")
		if id == "" {
			return x.fail(agtp.StatusBadRequest, "agent-id-required", "target=chain_head needs agent_id", nil)
		}
		if err := p.acl.Allow(caller, id); err != nil {
			return p.dependencyFailure(x, "inspect", err)
		}
		r, err := p.Audit.GetChainHead(x.ctx, &auditv1.GetChainHeadRequest{AgentId: id})
		if err != nil {
			return p.dependencyFailure(x, "auditsvc", err)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"agent_id": id, "audit_id": r.GetAuditId(), "length": r.GetLength()})
	case "lifecycle":
		id := str(params, "agent_id")
		if id == "" {
			return x.fail(agtp.StatusBadRequest, "agent-id-required", "target=lifecycle needs agent_id", nil)
		}
		if err := p.acl.Allow(caller, id); err != nil {
			return p.dependencyFailure(x, "inspect", err)
		}
		limit, _ := strconv.Atoi(str(params, "limit"))
		r, err := p.Audit.ListLifecycleEvents(x.ctx, &auditv1.ListLifecycleEventsRequest{AgentId: id, PageSize: int32(limit)})
		if err != nil {
			return p.dependencyFailure(x, "auditsvc", err)
		}
		events := []map[string]any{}
		for _, e := range r.GetEvents() {
			events = append(events, map[string]any{"audit_id": e.GetAuditId(), "format": e.GetFormat(), "envelope": e.GetEnvelope(),
				"event_type": e.GetEventType(), "payload": json.RawMessage(e.GetPayloadJson())})
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"agent_id": id, "events": events})
	case "contract":
		if p.RCNS == nil {
			return x.fail(agtp.StatusNotFound, "contract-not-found", "this server has no synthesized contracts", nil)
		}
		r, err := p.RCNS.GetContract(x.ctx, &rcnsv1.GetContractRequest{SynthesisId: str(params, "synthesis_id"), Caller: p.rcnsCaller(x), Inspect: true})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		if r.GetContract() == nil {
			return x.fail(agtp.StatusNotFound, "contract-not-found", "no contract with that synthesis_id", nil)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, contractJSON(r.GetContract()))
	case "rcns-attempt":
		if p.RCNS == nil {
			return x.fail(agtp.StatusNotFound, "attempt-not-found", "this server keeps no RCNS attempts", nil)
		}
		r, err := p.RCNS.GetAttempt(x.ctx, &rcnsv1.GetAttemptRequest{AttemptId: str(params, "attempt_id")})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, r.GetAttemptJson())
	case "":
		return x.fail(agtp.StatusBadRequest, "target-required", "INSPECT needs target: audit, chain_head, lifecycle, contract or rcns-attempt", nil)
	}
	return x.fail(agtp.StatusUnprocessable, "target-unknown", "INSPECT target "+strconv.Quote(target)+" is not one of audit, chain_head, lifecycle, contract, rcns-attempt", nil)
}

// inspectCaller is the verified identity INSPECT's read ACL judges: the
// TLS client certificate's key, and the Agent-ID only when the caller
// proved it with a certificate (an Agent Certificate, or one for the
// Genesis issuer key: the cross-check core §7.2.4 asks for). A header
// claim or a token authenticates no one to read a chain.
func inspectCaller(x *exchange) inspect.Caller {
	peer := peerOf(x)
	if peer == nil {
		return inspect.Caller{}
	}
	c := inspect.Caller{KeyFingerprint: peer.SPKIFingerprint}
	if x.proof.Level == callerproof.LevelCertificate {
		c.AgentID = x.agentID
	}
	return c
}

// clientKeyFingerprint is the Genesis-issuer form of the TLS client
// certificate's key (core §7.2.19), "" without one.
func clientKeyFingerprint(x *exchange) string {
	if peer := peerOf(x); peer != nil {
		return peer.KeyFingerprint
	}
	return ""
}

var lifecycleTransitions = map[string]identityv1.LifecycleTransition{
	"ACTIVATE":   identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE,
	"DEACTIVATE": identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEACTIVATE,
	"REINSTATE":  identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REINSTATE,
	"REVOKE":     identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_REVOKE,
	"DEPRECATE":  identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_DEPRECATE,
}

// lifecycle runs one of the five lifecycle methods through identitysvc,
// with the TLS client identity for genesis_issuer authorisation.
func (p *Pipeline) lifecycle(x *exchange, method string, params map[string]any) *agtp.Response {
	if method == "REVOKE" {
		switch str(params, "target") {
		case "contract":
			return p.revokeContract(x, params)
		case "stale-contracts":
			return p.revokeStaleContracts(x, params)
		}
	}
	target := str(params, "agent_id")
	if target == "" {
		return x.fail(agtp.StatusBadRequest, "agent-id-required", method+" needs the agent_id parameter", nil)
	}
	if method == "REVOKE" && str(params, "target") == "" && str(params, "reason") == "" {
		return x.fail(agtp.StatusBadRequest, "reason-required", "REVOKE needs a reason (core §7.2.16)", nil)
	}
	r, err := p.Identity.TransitionLifecycle(x.ctx, &identityv1.TransitionLifecycleRequest{
		AgentId:              target,
		Transition:           lifecycleTransitions[method],
		Reason:               str(params, "reason"),
		Actor:                str(params, "actor"),
		SuccessorAgentId:     str(params, "successor_agent_id"),
		ClientKeyFingerprint: clientKeyFingerprint(x),
		CallerAgentId:        x.agentID,
	})
	if err != nil {
		return p.dependencyFailure(x, "identitysvc", err)
	}
	body := map[string]any{
		"agent_id":        target,
		"status":          stateName(r.GetStatus()),
		"previous_status": stateName(r.GetPreviousStatus()),
		"event_type":      r.GetEventType(),
	}
	if r.GetNoop() {
		body["noop"] = true
	} else {
		body["audit_id"] = r.GetAuditId()
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, body)
}

func stateName(s identityv1.AgentStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "AGENT_STATUS_"))
}

// anonymousDiscoveryClosed applies policies.anonymous_discovery=false
// (AGTP-API §8.7): an anonymous call to a read-only discovery built-in
// (DISCOVER and DESCRIBE, Tier A) gets 262 anonymous-discovery-disabled (api
// assertion 65, docs/decisions.md#D-anonymous-discovery) rather than the
// plain 401 any other non-anonymous endpoint gives. /contracts is per caller
// and never anonymous, so it keeps the 401.
func (p *Pipeline) anonymousDiscoveryClosed(x *exchange, ep *catalogv1.Endpoint) *agtp.Response {
	if x.state.Snapshot.GetPolicies().GetAnonymousDiscovery() || ep.GetTier() != catalogv1.EndpointTier_ENDPOINT_TIER_A ||
		ep.GetMethod() != agtp.MethodDiscover && ep.GetMethod() != agtp.MethodDescribe || ep.GetPath() == "/contracts" {
		return nil
	}
	if namesAgent(x) {
		return nil
	}
	return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonAnonymousDiscoveryDisabled,
		"this server does not serve discovery to anonymous callers (policies.anonymous_discovery is false); send an Agent-ID", nil)
}

// explicitScopeMissing applies policies.scope_required_for_invocation
// (AGTP-API §8.7): when it is true, an identified caller invoking an
// endpoint that declares required_scopes must carry Authority-Scope; the
// handler is not run and the answer is 262 scope-required naming the first
// required scope. When it is false (the default, docs/frontdoor.md), a
// request without Authority-Scope inherits the identity document's scopes
// (core §5.5.3).
func (p *Pipeline) explicitScopeMissing(x *exchange, ep *catalogv1.Endpoint) *agtp.Response {
	if !x.state.Snapshot.GetPolicies().GetScopeRequiredForInvocation() || len(ep.GetRequiredScopes()) == 0 || x.agentID == "" {
		return nil
	}
	if _, present := x.req.Header.Lookup(agtp.HeaderAuthorityScope); present {
		return nil
	}
	return x.fail(agtp.StatusAuthorizationRequired, agtp.ReasonScopeRequired,
		"this server requires Authority-Scope on every scope-gated call (policies.scope_required_for_invocation); claim "+strings.Join(ep.GetRequiredScopes(), ", "),
		map[string]any{"scope": ep.GetRequiredScopes()[0]})
}

// queryInbox serves QUERY /inbox: the caller's own inbox only, so an agent
// reads what other agents sent it without an operator in between.
func (p *Pipeline) queryInbox(x *exchange, params map[string]any) *agtp.Response {
	if r := p.mechanicsReady(x, "QUERY /inbox"); r != nil {
		return r
	}
	limit, _ := params["limit"].(float64) // the input schema bounds it to 1..100
	r, err := p.Tasks.ListInbox(x.ctx, &taskv1.ListInboxRequest{AgentId: x.agentID, PageToken: str(params, "cursor"), PageSize: int32(limit)})
	if err != nil {
		return p.dependencyFailure(x, "policysvc", err)
	}
	now := time.Now()
	entries := make([]map[string]any, 0, len(r.GetEntries()))
	for _, e := range r.GetEntries() {
		if e.GetExpiry() != nil && e.GetExpiry().AsTime().Before(now) {
			continue // core §7.2.12: an expired notification is not delivered
		}
		entry := map[string]any{
			"notification_id": e.GetNotificationId(), "sender_agent_id": e.GetSenderAgentId(),
			"urgency": e.GetUrgency(), "delivery_guarantee": e.GetDeliveryGuarantee(),
			"received_at": e.GetReceivedAt().AsTime().UTC().Format(time.RFC3339Nano),
			"content":     json.RawMessage(e.GetContentJson()),
		}
		if !json.Valid(e.GetContentJson()) {
			entry["content"] = nil
		}
		if e.GetExpiry() != nil {
			entry["expiry"] = e.GetExpiry().AsTime().UTC().Format(time.RFC3339Nano)
		}
		entries = append(entries, entry)
	}
	out := map[string]any{"entries": entries}
	if c := r.GetNextPageToken(); c != "" {
		out["next_cursor"] = c
	}
	return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
}
