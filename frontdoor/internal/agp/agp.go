// Package agp serves the Agent Gateway Protocol (AGP 0.1, docs/agp.md) on
// the front door's HTTPS side, for agent platforms that speak only
// HTTP/JSON. Every AGP operation is translated into an AGTP request and run
// through the same pipeline (pipeline.ServeBound): structural decision,
// caller, input schema, policysvc Authorize (scopes, rate limits,
// idempotency), handler, and auditsvc SignAndAppend. So an HTTP-only
// agent and an AGTP agent reach the same endpoints under the same policy,
// and every AGP response is signed and chained to the caller's Agent-ID.
// API keys, confirmation tokens and transaction records live in
// policysvc's AgpService. docs/agp.md has the design.
package agp

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/kit"
)

// Header names of AGP.
const (
	HeaderRequestID         = "X-Request-Id"
	HeaderConfirmationToken = "X-Confirmation-Token"
	HeaderIdempotencyKey    = "Idempotency-Key"
)

// Key scopes (AGP §4.5); "*" grants all.
const (
	ScopeDiscover = "discover"
	ScopeQuery    = "query"
	ScopeExecute  = "execute"
	ScopeAdmin    = "admin"
)

// methodQuote is the AGTP method prepare runs as (Tier 2 QUOTE: a call
// described, nothing run).
const methodQuote = "QUOTE"

// idempotencyPrefix keeps AGP's Idempotency-Key space apart from the
// same agent's AGTP keys: a replay must come back in the protocol it was
// stored in.
const idempotencyPrefix = "agp:"

// maxIdempotencyKey leaves room for the prefix within AGTP's 255.
const maxIdempotencyKey = 255 - len(idempotencyPrefix)

// Options configure the AGP binding.
type Options struct {
	// ServerID is reported as each business's server.
	ServerID string
	// Version is reported by GET /health.
	Version string
	// Pipeline runs the operations.
	Pipeline *pipeline.Pipeline
	// Catalog is the front door's catalog snapshot.
	Catalog *catalogstate.Store
	// Keys is policysvc's AgpService.
	Keys agpv1.AgpServiceClient
	// KeyCacheTTL is how long a resolved API key is trusted without asking
	// policysvc again (default 10s; negative disables the cache). Keys are
	// cached only while WatchKeys runs and its stream is live; a change
	// evicts them at once, so this is only a safety net.
	KeyCacheTTL time.Duration
	// Agents looks up the agent of an admin key, which must be a caller
	// the pipeline would serve (callerpolicy.Caller) for /keys to act for
	// it (default: the pipeline's agent cache). Without either, /keys
	// refuses every admin call (503).
	Agents AgentLookup
	// MaxBody bounds a request body (default 1 MiB).
	MaxBody int64
	Log     *slog.Logger
}

// AgentLookup finds an agent's record, nil when it is not registered: the
// front door's agent cache (agentcache.Cache).
type AgentLookup interface {
	Lookup(ctx context.Context, agentID string) (*identityv1.AgentRecord, error)
}

// Handler serves AGP.
type Handler struct {
	o    Options
	keys *keyCache
}

// KeyCacheStats counts the API keys answered from the key cache (hits)
// and those looked up at policysvc (misses).
func (h *Handler) KeyCacheStats() *kit.CacheStats { return &h.keys.stats }

// New builds the handler.
func New(o Options) *Handler {
	if o.KeyCacheTTL == 0 {
		o.KeyCacheTTL = 10 * time.Second
	}
	if o.MaxBody <= 0 {
		o.MaxBody = agtp.DefaultMaxBody
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Agents == nil && o.Pipeline != nil && o.Pipeline.Agents != nil {
		o.Agents = o.Pipeline.Agents
	}
	if o.Version == "" {
		o.Version = "0.1"
	}
	return &Handler{o: o, keys: &keyCache{ttl: o.KeyCacheTTL, max: 10000}}
}

// route is one of AGP's HTTP routes.
type route struct {
	method, pattern string
	serve           http.HandlerFunc
}

func (h *Handler) routes() []route {
	return []route{
		{"POST", "/agp/discover", h.discover},
		{"POST", "/agp/query", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpQuery) }},
		{"POST", "/agp/execute/prepare", h.prepare},
		{"POST", "/agp/execute", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpExecute) }},
		{"GET", "/agp/status/{id}", h.status},
		{"GET", "/agp/businesses", h.directory},
		{"GET", "/health", h.health},
		{"POST", "/keys", h.createKey},
		{"GET", "/keys", h.listKeys},
		{"GET", "/keys/me", h.keyMe},
		{"DELETE", "/keys/{id}", h.revokeKey},
	}
}

// unroutedPatterns catch what no route takes under AGP's paths (another
// method, an unknown path), so that it is answered in AGP's error form
// too, not with net/http's text.
var unroutedPatterns = [...]string{"/agp", "/agp/", "/health", "/keys", "/keys/"}

// Register adds AGP's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, rt := range h.routes() {
		mux.HandleFunc(rt.method+" "+rt.pattern, rt.serve)
	}
	for _, p := range unroutedPatterns {
		mux.HandleFunc(p, h.unrouted)
	}
}

// unrouted answers a request under AGP's paths that no route takes: 405
// with Allow when a route serves its path with other methods, else 404;
// both an AGP error with its code and requestId, and X-Request-Id.
func (h *Handler) unrouted(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, "")
	allow := h.allowed(r.URL.EscapedPath())
	if len(allow) == 0 {
		c.writeError(&apiError{Status: http.StatusNotFound, Code: CodeRouteNotFound, Error: "Not found",
			Message: "No AGP route has this path; GET /agp/businesses lists the businesses, and POST /agp/discover, /agp/query, /agp/execute/prepare and /agp/execute operate on them."})
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	c.writeError(&apiError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Error: "Method not allowed",
		Message: r.Method + " is not served on this path; use " + strings.Join(allow, " or ") + ".",
		Details: map[string]any{"allow": allow}})
}

// allowed lists the methods AGP's routes serve on path (GET with HEAD,
// as net/http does), in a fixed order.
func (h *Handler) allowed(path string) []string {
	var out []string
	for _, rt := range h.routes() {
		if !matchPattern(rt.pattern, path) || slices.Contains(out, rt.method) {
			continue
		}
		out = append(out, rt.method)
		if rt.method == http.MethodGet && !slices.Contains(out, http.MethodHead) {
			out = append(out, http.MethodHead)
		}
	}
	slices.Sort(out)
	return out
}

// matchPattern reports whether path matches a route's pattern, whose
// {name} segments match any one non-empty segment.
func matchPattern(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i, p := range ps {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if p != xs[i] {
			return false
		}
	}
	return true
}
