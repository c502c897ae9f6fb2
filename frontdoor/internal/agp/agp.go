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
	"log/slog"
	"net/http"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/catalogstate"
	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
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
	// MaxBody bounds a request body (default 1 MiB).
	MaxBody int64
	Log     *slog.Logger
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
	if o.Version == "" {
		o.Version = "0.1"
	}
	return &Handler{o: o, keys: &keyCache{ttl: o.KeyCacheTTL, max: 10000}}
}

// Register adds AGP's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /agp/discover", h.discover)
	mux.HandleFunc("POST /agp/query", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpQuery) })
	mux.HandleFunc("POST /agp/execute/prepare", h.prepare)
	mux.HandleFunc("POST /agp/execute", func(w http.ResponseWriter, r *http.Request) { h.operate(w, r, OpExecute) })
	mux.HandleFunc("GET /agp/status/{id}", h.status)
	mux.HandleFunc("GET /agp/businesses", h.directory)
	mux.HandleFunc("GET /health", h.health)
	mux.HandleFunc("POST /keys", h.createKey)
	mux.HandleFunc("GET /keys", h.listKeys)
	mux.HandleFunc("GET /keys/me", h.keyMe)
	mux.HandleFunc("DELETE /keys/{id}", h.revokeKey)
}
