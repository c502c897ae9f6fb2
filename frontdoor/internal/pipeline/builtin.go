package pipeline

import (
	"crypto/ed25519"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agtpsuite/agtp/auditsvc/inspect"
	"github.com/agtpsuite/agtp/frontdoor/agtp"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
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
		}
	case "QUOTE":
		return p.quote(x, params)
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

// discover serves the DISCOVER built-ins (AGTP-API §5.8, DECISIONS.md).
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
		resp, err := p.Identity.ListAgents(x.ctx, &identityv1.ListAgentsRequest{ActiveOnly: true})
		if err != nil {
			return p.dependencyFailure(x, "identitysvc", err)
		}
		out := []map[string]any{}
		for _, a := range resp.GetAgents() {
			e := map[string]any{"agent_id": a.GetAgentId(), "name": a.GetName(), "trust_tier": a.GetTrustTier(), "verification_path": a.GetVerificationPath()}
			if a.GetOwnerId() != "" {
				e["owner_id"] = a.GetOwnerId()
			}
			if a.GetTrustTier() == 2 && a.GetTrustWarning() != "" {
				e["trust_warning"] = a.GetTrustWarning()
			}
			out = append(out, e)
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
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
		r, err := p.RCNS.ListPatterns(x.ctx, &rcnsv1.ListPatternsRequest{})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, r.GetBodyJson())
	case "/contracts":
		if p.RCNS == nil {
			return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, []any{})
		}
		resp, err := p.RCNS.ListContracts(x.ctx, &rcnsv1.ListContractsRequest{Caller: p.rcnsCaller(x)})
		if err != nil {
			return p.dependencyFailure(x, "rcnssvc", err)
		}
		out := []map[string]any{}
		for _, c := range resp.GetContracts() {
			out = append(out, contractJSON(c))
		}
		return jsonResponse(x, agtp.StatusOK, agtp.MediaTypeJSON, out)
	}
	return x.fail(agtp.StatusNotFound, "not-found", "no DISCOVER built-in at "+path, nil)
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
		r, err := p.Audit.ListLifecycleEvents(x.ctx, &auditv1.ListLifecycleEventsRequest{AgentId: id, Limit: int32(limit)})
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
// TLS client certificate, and the Agent-ID only when it came with one.
func inspectCaller(x *exchange) inspect.Caller {
	if x.conn == nil || x.conn.TLS == nil || len(x.conn.TLS.PeerCertificates) == 0 {
		return inspect.Caller{}
	}
	return inspect.Caller{AgentID: x.agentID, KeyFingerprint: inspect.KeyFingerprint(x.conn.TLS.PeerCertificates[0].RawSubjectPublicKeyInfo)}
}

// clientKeyFingerprint is the Genesis-issuer form of the TLS client
// certificate's key (core §7.2.19): SHA-256 of the raw Ed25519 key. Other
// key types get the SPKI's hash, which can never match an issuer.
func clientKeyFingerprint(x *exchange) string {
	if x.conn == nil || x.conn.TLS == nil || len(x.conn.TLS.PeerCertificates) == 0 {
		return ""
	}
	cert := x.conn.TLS.PeerCertificates[0]
	if k, ok := cert.PublicKey.(ed25519.PublicKey); ok {
		return genesis.Fingerprint(k)
	}
	return inspect.KeyFingerprint(cert.RawSubjectPublicKeyInfo)
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
