package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/identitydoc"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
)

// discoverRoot serves DISCOVER / (AGTP-API §5.8,
// docs/decisions.md#D-discover-root): the manifest for an anonymous
// caller, the directory of the other DISCOVER paths for an identified one.
func (bi *Registry) discoverRoot(ctx context.Context, call *Call) *agtp.Response {
	if call.AgentID == "" {
		return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeManifestJSON, call.State.Manifest)
	}
	return catalogDocument(call, docDiscoverDirectory, discoverDirectory)
}

// The documents built from the catalog snapshot alone: encoded once per
// catalog revision (catalogstate.State.Document) rather than per request.
const (
	docDiscoverDirectory catalogstate.DocumentKey = "discover-directory"
	docDiscoverMethods   catalogstate.DocumentKey = "discover-methods"
	docDescribeServer    catalogstate.DocumentKey = "describe-server"
)

// catalogDocument answers 200 with the snapshot's document key.
func catalogDocument(call *Call, key catalogstate.DocumentKey, build func(*catalogv1.Snapshot) ([]byte, error)) *agtp.Response {
	body, err := call.State.Document(key, build)
	if err != nil {
		return call.Fail(agtp.StatusServerError, "internal", "the response could not be encoded", nil)
	}
	return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, body)
}

// discoverDirectory is the DISCOVER / body for an identified caller: the
// other DISCOVER paths.
func discoverDirectory(snap *catalogv1.Snapshot) ([]byte, error) {
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
	return json.Marshal(map[string]any{"directory": dir})
}

// discoverMethods serves DISCOVER /methods lists every endpoint of the catalog.
func (bi *Registry) discoverMethods(ctx context.Context, call *Call) *agtp.Response {
	return catalogDocument(call, docDiscoverMethods, methodsDocument)
}

func methodsDocument(snap *catalogv1.Snapshot) ([]byte, error) {
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
	return json.Marshal(out)
}

// discoverAgents serves DISCOVER /agents lists the active agents, best match for criteria first.
func (bi *Registry) discoverAgents(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	agents, err := paging.All(ctx, func(ctx context.Context, tok string) ([]*identityv1.AgentRecord, string, error) {
		r, err := bi.Identity.ListAgents(ctx, &identityv1.ListAgentsRequest{ActiveOnly: true, PageSize: listPageSize, PageToken: tok})
		return r.GetAgents(), r.GetNextPageToken(), err
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, agentListing(agents, str(params, "criteria"), str(params, "max_results")))
}

// discoverGenesis serves DISCOVER /genesis returns an agent's Agent Genesis: the named one, else the caller's.
func (bi *Registry) discoverGenesis(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	id := str(params, "agent_id")
	if id == "" {
		id = call.AgentID
	}
	if id == "" {
		return call.Fail(agtp.StatusNotFound, "genesis-not-found", "no Agent Genesis is loaded for an anonymous caller; name the agent with Agent-ID or the agent_id parameter", nil)
	}
	resp, err := bi.Identity.GetGenesis(ctx, &identityv1.GetGenesisRequest{AgentId: id})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	//lint:ignore SA1019 the first release's identitysvc sends the Genesis only as bytes
	return agtp.NewResponse(agtp.StatusOK, agtp.MediaTypeJSON, jsondoc.PreferString(resp.GetGenesis(), resp.GetGenesisJson()))
}

// discoverNone serves DISCOVER /tools and /apis: this server lists none.
func (bi *Registry) discoverNone(ctx context.Context, call *Call) *agtp.Response {
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, []any{})
}

// discoverPatterns serves DISCOVER /patterns lists the RCNS patterns rcnssvc offers.
func (bi *Registry) discoverPatterns(ctx context.Context, call *Call) *agtp.Response {
	enabled, pats, err := bi.patterns(ctx)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, map[string]any{"rcns_enabled": enabled, "patterns": append([]json.RawMessage{}, pats...)})
}

// patterns lists every RCNS pattern rcnssvc offers, as it lists them
// (recipe.Pattern.Listing); none when this server runs no negotiation.
func (bi *Registry) patterns(ctx context.Context) (enabled bool, pats []json.RawMessage, err error) {
	if bi.RCNS == nil {
		return false, nil, nil
	}
	// Each page's body_json lists its patterns; the list is their
	// concatenation.
	pats, err = paging.All(ctx, func(ctx context.Context, tok string) ([]json.RawMessage, string, error) {
		r, err := bi.RCNS.ListPatterns(ctx, &rcnsv1.ListPatternsRequest{PageSize: listPageSize, PageToken: tok})
		if err != nil {
			return nil, "", err
		}
		var body struct {
			Patterns []json.RawMessage `json:"patterns"`
		}
		//lint:ignore SA1019 the first release's rcnssvc sends it only as bytes
		if err := json.Unmarshal(jsondoc.PreferString(r.GetBody(), r.GetBodyJson()), &body); err != nil {
			return nil, "", fmt.Errorf("patterns body: %w", err)
		}
		enabled = r.GetRcnsEnabled()
		return body.Patterns, r.GetNextPageToken(), nil
	})
	return enabled, pats, err
}

// discoverContracts serves DISCOVER /contracts lists the caller's synthesized contracts.
func (bi *Registry) discoverContracts(ctx context.Context, call *Call) *agtp.Response {
	if bi.RCNS == nil {
		return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, []any{})
	}
	caller := call.RCNSCaller()
	cts, err := paging.All(ctx, func(ctx context.Context, tok string) ([]*rcnsv1.Contract, string, error) {
		r, err := bi.RCNS.ListContracts(ctx, &rcnsv1.ListContractsRequest{Caller: caller, PageSize: listPageSize, PageToken: tok})
		return r.GetContracts(), r.GetNextPageToken(), err
	})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "rcnssvc", err)
	}
	out := []map[string]any{}
	for _, c := range cts {
		out = append(out, ContractJSON(c))
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, out)
}

// discoverUnknown answers a DISCOVER built-in bound to a path this front
// door has no document for.
func (bi *Registry) discoverUnknown(_ context.Context, call *Call) *agtp.Response {
	return call.Fail(agtp.StatusNotFound, "not-found", "no DISCOVER built-in at "+call.Template, nil)
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

func tierLetter(enum string) string {
	return strings.TrimPrefix(enum, "ENDPOINT_TIER_")
}

// describeServer serves DESCRIBE /: the server's capability document
// (core §6.1.7).
func (bi *Registry) describeServer(_ context.Context, call *Call) *agtp.Response {
	return catalogDocument(call, docDescribeServer, serverDocument)
}

func serverDocument(snap *catalogv1.Snapshot) ([]byte, error) {
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
	return json.Marshal(map[string]any{
		"methods":               methods,
		"modalities":            []string{"application/vnd.agtp+json"},
		"tools":                 []any{},
		"version":               snap.GetApiVersion(),
		"catalog_version":       snap.GetCatalogVersion(),
		"budget_units_accepted": []string{"tokens", "compute-seconds", "calls", "USD", "EUR", "GBP"},
		"zones_accepted":        []string{},
	})
}

// describeNamespace serves DESCRIBE /agents: the namespace document of
// the agents hosted here.
func (bi *Registry) describeNamespace(ctx context.Context, call *Call) *agtp.Response {
	doc, err := bi.Identity.GetNamespaceDocument(ctx, &identityv1.GetNamespaceDocumentRequest{})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
	return agtp.NewResponse(agtp.StatusOK, doc.GetContentType(), jsondoc.PreferString(doc.GetDocument(), doc.GetDocumentJson()))
}

// describeAgent serves DESCRIBE of one agent: its identity document in the
// requested format, or its status document under /status (core §6.1.7,
// §6.3).
func (bi *Registry) describeAgent(ctx context.Context, call *Call) *agtp.Response {
	params := call.Params
	format := str(params, "format")
	if call.Template == "/agents/{agent_name}/status" {
		format = "status"
	}
	name := str(params, "agent_name")
	if name == "" {
		name = str(params, "agent_id")
	}
	if looksLikeCanonicalID(name) && !agtp.IsCanonicalID(name) {
		return call.Fail(agtp.StatusBadRequest, "invalid-canonical-id",
			"a canonical Agent-ID is exactly 64 lowercase hexadecimal characters (core §6.1.8.1)", nil)
	}
	req := &identityv1.ResolveAgentRequest{Name: name}
	if agtp.IsCanonicalID(name) {
		req = &identityv1.ResolveAgentRequest{AgentId: name}
	}
	rec, err := bi.Identity.ResolveAgent(ctx, req)
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	call.Target = rec.GetAgent()
	// A suspended target answers 503 and a retired one 410, as core
	// §6.1.8.1 says for resolution; the status sub-resource still tells
	// anyone which state the agent is in.
	if d := callerpolicy.Target(rec.GetAgent()); !d.Allowed && format != "status" &&
		(d.Status == agtp.StatusUnavailable || d.Status == agtp.StatusGone) {
		return call.Fail(d.Status, d.Reason, d.Explanation, d.Fields())
	}
	// The document lists the methods this server accepts from the agent
	// it describes: Supported-Methods narrowed to its scopes
	// (docs/decisions.md#D-supported-methods).
	scopes, _ := agtp.ParseScopes(strings.Join(rec.GetAgent().GetScopes(), ", "))
	doc, err := bi.Identity.GetIdentityDocument(ctx, &identityv1.GetIdentityDocumentRequest{
		AgentId: rec.GetAgent().GetAgentId(), Format: format, Methods: call.State.MethodsFor(scopes)})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "identitysvc", err)
	}
	//lint:ignore SA1019 the first release's identitysvc sends the document only as bytes
	return agtp.NewResponse(agtp.StatusOK, doc.GetContentType(), jsondoc.PreferString(doc.GetDocument(), doc.GetDocumentJson()))
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

// describeMerchant serves this server's merchant identity (core §9) for an
// agent's counterparty verification before PURCHASE: the Merchant-ID and
// Merchant-Manifest-Fingerprint a PURCHASE must carry, the merchant's
// status and, when the operator configured the document itself, the
// Merchant Manifest Document, whose RFC 8785 form hashes to the
// fingerprint.
func (bi *Registry) describeMerchant(ctx context.Context, call *Call) *agtp.Response {
	m, err := bi.Policy.GetMerchant(ctx, &policyv1.GetMerchantRequest{})
	if err != nil {
		return bi.dependencyFailure(ctx, call, "policysvc", err)
	}
	if !m.GetConfigured() {
		return call.Fail(agtp.StatusNotFound, "merchant-not-configured", "this server has no merchant identity; it accepts no PURCHASE", nil)
	}
	out := map[string]any{
		"merchant_id":          m.GetMerchantId(),
		"manifest_fingerprint": m.GetManifestFingerprint(),
		"status":               m.GetStatus(),
	}
	doc := []byte(m.GetManifest())
	if len(doc) == 0 {
		//lint:ignore SA1019 the first release's policysvc sends the document only as bytes
		doc = m.GetManifestJson()
	}
	if len(doc) > 0 {
		out["manifest"] = json.RawMessage(doc)
	}
	return jsonResponse(call, agtp.StatusOK, agtp.MediaTypeJSON, out)
}
