package agp

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/agtpsuite/agtp/catalogsvc/endpoint"
	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
)

// A business (AGP §2) is a namespace of this server's manifest: the
// endpoints that declare it (or, without a namespace, share their first
// path segment). Its capabilities are those endpoints; AGP's adapters are
// their handler bindings. The protocol's own endpoints are not a business.

// builtinNamespace is the namespace of the protocol-native endpoints.
const builtinNamespace = "agtp.builtin"

// Platform is what every business reports as its platform.
const Platform = "agtp"

// Operation kinds of a capability.
const (
	OpDiscover = "discover"
	OpQuery    = "query"
	OpExecute  = "execute"
)

// businessOf names the business an endpoint belongs to ("" for none).
func businessOf(ep *endpoint.Endpoint) string {
	if ep == nil || ep.Def == nil || ep.Def.Namespace == builtinNamespace || strings.HasPrefix(ep.HandlerName(), "agtp.builtin.") {
		return ""
	}
	if ns := ep.Def.Namespace; ns != "" {
		return ns
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(ep.Def.Path, "/"), "/")
	if strings.HasPrefix(seg, "{") {
		return ""
	}
	return seg
}

// operationOf says whether an endpoint is reached through query (no side
// effect: semantic impact informational) or execute (anything else).
func operationOf(ep *endpoint.Endpoint) string {
	if ep.Def.Semantic.Impact == "informational" {
		return OpQuery
	}
	return OpExecute
}

// business is one namespace and its endpoints.
type business struct {
	ID        string
	Endpoints []*endpoint.Endpoint
}

// active reports whether any capability is not deprecated: a business
// whose every endpoint is deprecated is being retired and is left out of
// the public directory (AGP §7.1 lists active businesses only).
func (b *business) active() bool {
	for _, ep := range b.Endpoints {
		if ep.Def.Deprecated == nil {
			return true
		}
	}
	return false
}

// businesses lists the snapshot's businesses, sorted by id.
func businesses(st *catalogstate.State) []*business {
	if st == nil {
		return nil
	}
	byID := map[string]*business{}
	for _, ep := range st.Endpoints {
		id := businessOf(ep)
		if id == "" {
			continue
		}
		b := byID[id]
		if b == nil {
			b = &business{ID: id}
			byID[id] = b
		}
		b.Endpoints = append(b.Endpoints, ep)
	}
	out := make([]*business, 0, len(byID))
	for _, b := range byID {
		slices.SortFunc(b.Endpoints, func(x, y *endpoint.Endpoint) int { return strings.Compare(x.Def.Key(), y.Def.Key()) })
		out = append(out, b)
	}
	slices.SortFunc(out, func(x, y *business) int { return strings.Compare(x.ID, y.ID) })
	return out
}

func findBusiness(st *catalogstate.State, id string) *business {
	for _, b := range businesses(st) {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// methods lists a business's methods, sorted.
func (b *business) methods() []string {
	var ms []string
	for _, ep := range b.Endpoints {
		if !slices.Contains(ms, ep.Def.Method) {
			ms = append(ms, ep.Def.Method)
		}
	}
	slices.Sort(ms)
	return ms
}

// directoryEntry is one business of GET /agp/businesses (AGP §7.1).
type directoryEntry struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Platform    string `json:"platform"`
	Category    string `json:"category"`
	Description string `json:"description"`
}

func (b *business) entry() directoryEntry {
	return directoryEntry{
		ID: b.ID, Name: b.ID, Platform: Platform, Category: "namespace",
		Description: "AGTP namespace " + b.ID + ": " + strings.Join(b.methods(), ", "),
	}
}

// capability is AGP's InteractionCapability (agp-gateway-protocol
// §6.1): one per operation the business supports, so a stock client finds
// data.capabilities.query and data.capabilities.execute where AGP puts
// them. An operation served by several endpoints lists them the way AGP's
// own profiles list several calls: "QUERY + SUMMARIZE" and
// "/orders + /documents".
type capability struct {
	Operation    string `json:"operation"`
	Method       string `json:"method"`
	Endpoint     string `json:"endpoint"`
	AuthRequired bool   `json:"authRequired"`
	Description  string `json:"description"`
}

// endpointView is one endpoint with the AGTP contract an HTTP agent needs
// to call it, and the request members a stock client sends for it.
type endpointView struct {
	Operation      string               `json:"operation"`
	Method         string               `json:"method"`
	Endpoint       string               `json:"endpoint"`
	AuthRequired   bool                 `json:"authRequired"`
	Description    string               `json:"description"`
	Impact         string               `json:"impact"`
	Idempotent     bool                 `json:"idempotent"`
	RequiredScopes []string             `json:"requiredScopes,omitempty"`
	Deprecated     string               `json:"deprecated,omitempty"`
	InputSchema    json.RawMessage      `json:"inputSchema,omitempty"`
	OutputSchema   json.RawMessage      `json:"outputSchema,omitempty"`
	Errors         []string             `json:"errors,omitempty"`
	Request        *endpoint.AGPMapping `json:"request,omitempty"`
}

// discoverCapability is what discover itself runs as.
var discoverCapability = capability{
	Operation: OpDiscover, Method: "DISCOVER", Endpoint: "/methods", AuthRequired: true,
	Description: "The business's identity, the operations it supports and each endpoint's contract.",
}

// discoverData is the data of a discover transaction (AGP §6.1):
// business, capabilities keyed by operation, and, merged in as AGP lets
// an adapter do, endpoints keyed "METHOD /path".
func (b *business) discoverData(serverID string) map[string]any {
	caps := map[string]capability{OpDiscover: discoverCapability}
	eps := map[string]endpointView{}
	for _, op := range []string{OpQuery, OpExecute} {
		var methods, paths, descs []string
		auth := false
		for _, ep := range b.Endpoints {
			if operationOf(ep) != op {
				continue
			}
			d := ep.Def
			if !slices.Contains(methods, d.Method) {
				methods = append(methods, d.Method)
			}
			if !slices.Contains(paths, d.Path) {
				paths = append(paths, d.Path)
			}
			descs = append(descs, d.Description)
			auth = auth || !d.Anonymous
		}
		if len(methods) > 0 {
			caps[op] = capability{Operation: op, Method: strings.Join(methods, " + "), Endpoint: strings.Join(paths, " + "),
				AuthRequired: auth, Description: strings.Join(descs, " ")}
		}
	}
	for _, ep := range b.Endpoints {
		d := ep.Def
		v := endpointView{
			Operation: operationOf(ep), Method: d.Method, Endpoint: d.Path, AuthRequired: !d.Anonymous,
			Description: d.Description, Impact: d.Semantic.Impact, RequiredScopes: d.RequiredScopes,
			InputSchema: d.InputSchema, OutputSchema: d.OutputSchema, Errors: d.Errors, Request: d.AGP,
		}
		if d.Semantic.IsIdempotent != nil {
			v.Idempotent = *d.Semantic.IsIdempotent
		}
		if d.Deprecated != nil {
			v.Deprecated = ep.Warning()
		}
		eps[d.Key()] = v
	}
	status := "active"
	if !b.active() {
		status = "deprecated"
	}
	return map[string]any{
		"business": map[string]any{
			"id": b.ID, "name": b.ID, "platform": Platform, "status": status,
			"server": serverID, "methods": b.methods(),
		},
		"capabilities": caps,
		"endpoints":    eps,
	}
}
