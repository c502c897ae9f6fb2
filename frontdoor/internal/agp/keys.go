package agp

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/policysvc/agpkey"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/paging"
)

// maxKeyLen bounds a presented API key.
const maxKeyLen = 256

// presentedKey returns the API key of a request: X-Api-Key, else
// Authorization: Bearer (AGP §4.1). ok is false when neither is present.
func presentedKey(r *http.Request) (key string, ok bool) {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return strings.TrimSpace(k), true
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", false
	}
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(token), true
}

func wellFormedKey(k string) bool {
	if k == "" || len(k) > maxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// hasScope reports whether a key holds scope (or "*").
func hasScope(k *agpv1.ApiKey, scope string) bool {
	return slices.Contains(k.GetScopes(), scope) || slices.Contains(k.GetScopes(), "*")
}

// keyCache remembers resolved keys, so an AGP request costs no extra hop
// to policysvc in the steady state. It keeps entries only while policysvc's
// WatchKeyEvents stream is live (WatchKeys): a revoked or replaced key is
// evicted as soon as its change arrives, and when the stream breaks the
// whole cache is dropped and nothing is cached until it is back, so a
// missed change cannot keep a revoked key working. The TTL is a safety net
// on top. Unknown keys are not cached: they are refused after a lookup
// every time.
type keyCache struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[string]cachedKey
	// watching is true while the key watch is live.
	watching bool
	// gen changes on every eviction and reset. A lookup remembers it
	// before asking policysvc and its answer is kept only if it has not
	// changed, so a key revoked while its lookup was in flight is not put
	// back after the eviction.
	gen uint64
	// stats counts the well-formed keys answered from the cache and those
	// looked up at policysvc (KeyCacheStats).
	stats kit.CacheStats
}

type cachedKey struct {
	key     *agpv1.ApiKey
	expires time.Time
}

func (c *keyCache) get(hash string) *agpv1.ApiKey {
	if c.ttl <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[hash]
	if !ok {
		return nil
	}
	if time.Now().After(e.expires) {
		delete(c.m, hash)
		return nil
	}
	return e.key
}

// generation is taken before a lookup and handed to put.
func (c *keyCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps a lookup's answer, unless the watch is down or a change
// arrived since the lookup began (gen).
func (c *keyCache) put(gen uint64, hash string, k *agpv1.ApiKey) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.watching || gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= c.max {
		// Bounded: start over rather than track recency; the next
		// requests refill it with one lookup each.
		c.m = map[string]cachedKey{}
	}
	c.m[hash] = cachedKey{key: k, expires: time.Now().Add(c.ttl)}
}

// evict drops the entries of a changed key: by the secrets' hashes the
// change names, and any entry of the same key id.
func (c *keyCache) evict(id string, hashes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, h := range hashes {
		delete(c.m, h)
	}
	if id == "" {
		return
	}
	for h, e := range c.m {
		if e.key.GetId() == id {
			delete(c.m, h)
		}
	}
}

// reset drops every entry and records whether the watch is live.
func (c *keyCache) reset(watching bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.m = nil
	c.watching = watching
}

// WatchKeys follows policysvc's key changes until ctx is done, evicting
// each changed key from the cache; while the watch is down the cache is
// empty and every request asks policysvc.
func (h *Handler) WatchKeys(ctx context.Context) error {
	agpkey.Follow(ctx, h.o.Keys, h.o.Log, agpkey.Watcher{
		Subscribed:  func() { h.keys.reset(true) },
		Interrupted: func() { h.keys.reset(false) },
		Changed: func(ev *agpv1.WatchKeyEventsResponse) {
			h.keys.evict(ev.GetKeyId(), ev.GetKeySha256()...)
			// Info: changes are rare, and an operator revoking a key
			// wants to see it reach every front door.
			h.o.Log.Info("agp key change applied; cached key dropped", "key_id", ev.GetKeyId(), "change", ev.GetChange().String())
		},
	})
	return nil
}

// authResult is the outcome of authenticating a request.
type authResult struct {
	key *agpv1.ApiKey
	// err is set when the caller is not authenticated (401) or the key
	// store is unreachable (503).
	err *apiError
}

func unauthorized(msg string) *apiError {
	return &apiError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Error: "Unauthorized", Message: msg}
}

// authenticate resolves the request's API key.
func (h *Handler) authenticate(ctx context.Context, r *http.Request) authResult {
	k, present := presentedKey(r)
	if !present {
		return authResult{err: unauthorized("Send an API key in X-Api-Key or Authorization: Bearer.")}
	}
	if !wellFormedKey(k) {
		return authResult{err: unauthorized("The API key is malformed.")}
	}
	hash := agpkey.Hash(k)
	key := h.keys.get(hash)
	h.keys.stats.Count(key != nil)
	if key != nil {
		return authResult{key: key}
	}
	gen := h.keys.generation()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := h.o.Keys.ResolveApiKey(ctx, &agpv1.ResolveApiKeyRequest{KeySha256: hash})
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return authResult{err: unauthorized("The API key is not valid.")}
		}
		h.o.Log.WarnContext(ctx, "agp key store unavailable", "error", err)
		return authResult{err: &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Error: "Service unavailable", Message: "API keys cannot be checked right now; retry shortly."}}
	}
	h.keys.put(gen, hash, out.GetKey())
	return authResult{key: out.GetKey()}
}

// Key management (AGP §14): an API key with the admin scope manages keys
// over HTTPS; operators also reach policysvc's AgpService directly over
// mTLS (REST /v1/agp/keys, and the agtp CLI). These answers are not AGP
// operations and are not run through the pipeline; policysvc logs every
// change.

// keyView is a key as AGP shows it (never its secret).
func keyView(k *agpv1.ApiKey) map[string]any {
	return map[string]any{
		"id": k.GetId(), "label": k.GetLabel(), "agentId": k.GetAgentId(), "scopes": k.GetScopes(), "global": k.GetGlobal(),
		"createdAt": k.GetCreatedAt().AsTime().UTC().Format(time.RFC3339),
	}
}

// admin authenticates the caller and requires the admin scope.
func (c *call) admin() bool {
	a := c.h.authenticate(c.r.Context(), c.r)
	if a.err != nil {
		c.writeError(a.err)
		return false
	}
	c.key = a.key
	if !hasScope(c.key, ScopeAdmin) {
		c.writeError(&apiError{Status: http.StatusForbidden, Code: CodeForbidden, Error: "Forbidden", Message: "Missing required scope: admin"})
		return false
	}
	if e := c.h.keyAgent(c.r.Context(), c.key); e != nil {
		c.writeError(e)
		return false
	}
	return true
}

// keyAgent checks that the agent a key acts as is a caller the pipeline
// would serve: registered and active (or deprecated, still served), by
// the caller stage's own rule (callerpolicy.Caller) on the front door's
// cached record. Key management does not run through the pipeline, so
// without this a suspended, retired or unknown agent's admin key would
// still mint, list and revoke keys. Any other state is 401 UNAUTHORIZED,
// naming the agent's state; an identitysvc that does not answer is 503.
func (h *Handler) keyAgent(ctx context.Context, k *agpv1.ApiKey) *apiError {
	if h.o.Agents == nil {
		h.o.Log.ErrorContext(ctx, "agp key management has no agent lookup; refused")
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Error: "Service unavailable", Message: "The key's agent cannot be checked right now; retry shortly."}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rec, err := h.o.Agents.Lookup(ctx, k.GetAgentId())
	if err != nil {
		h.o.Log.WarnContext(ctx, "agp key's agent cannot be looked up", "key_id", k.GetId(), "error", err)
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Error: "Service unavailable", Message: "The key's agent cannot be checked right now; retry shortly."}
	}
	d := callerpolicy.Caller(rec)
	if d.Allowed {
		return nil
	}
	e := unauthorized("The API key's agent is not registered and active: " + d.Explanation + ".")
	e.Details = map[string]any{"agtpStatus": d.Status, "agtpReason": d.Reason}
	if d.State != "" {
		e.Details["lifecycleState"] = d.State
	}
	return e
}

// manages reports whether the caller's admin key may manage the keys of
// agentID. An admin key is bound to one Agent-ID like any key, and its
// authority stops there: an agent's admin must not mint keys that act as
// another agent, list their keys or revoke them. Only a key an operator
// made global (AgpService, never /keys) reaches every agent's keys.
func (c *call) manages(agentID string) bool {
	return c.key.GetGlobal() || agentID == c.key.GetAgentId()
}

// foreignAgent refuses the management of another agent's keys; nothing is
// changed. agentID is the agent the caller named, "" when it named a key
// only: that key's agent is not told.
func (c *call) foreignAgent(agentID string) {
	c.h.o.Log.WarnContext(c.r.Context(), "agp key management of another agent refused",
		"key_id", c.key.GetId(), "key_agent_id", c.key.GetAgentId(), "agent_id", agentID, "target_key_id", c.r.PathValue("id"))
	details := map[string]any{"keyAgentId": c.key.GetAgentId()}
	if agentID != "" {
		details["agentId"] = agentID
	}
	c.writeError(&apiError{Status: http.StatusForbidden, Code: CodeAgentMismatch, Error: "Forbidden",
		Message: "This admin key manages the API keys of its own agent only.", Details: details})
}

func (c *call) rpcError(err error) {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.Aborted:
		c.writeError(validation(status.Convert(err).Message(), nil))
	case codes.NotFound:
		c.writeError(&apiError{Status: http.StatusNotFound, Code: "KEY_NOT_FOUND", Message: status.Convert(err).Message()})
	default:
		c.h.o.Log.WarnContext(c.r.Context(), "agp key management failed", "error", err)
		c.writeError(&apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "API keys cannot be managed right now; retry shortly."})
	}
}

// createKey serves POST /keys: {label, agentId, scopes}; the agent
// defaults to the admin key's own, the scopes to discover, query, execute.
func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, "")
	if !c.admin() {
		return
	}
	m, e := c.readObject("label", "agentId", "scopes")
	if e != nil {
		c.writeError(e)
		return
	}
	in := &agpv1.CreateApiKeyRequest{AgentId: c.key.GetAgentId(), Scopes: []string{"discover", "query", "execute"}}
	in.Label, _ = m["label"].(string)
	if v, ok := m["agentId"].(string); ok && v != "" {
		in.AgentId = v
	}
	if v, ok := m["scopes"].([]any); ok {
		in.Scopes = nil
		for _, s := range v {
			str, _ := s.(string)
			in.Scopes = append(in.Scopes, str)
		}
	}
	if !c.manages(in.GetAgentId()) {
		c.foreignAgent(in.GetAgentId())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	out, err := h.o.Keys.CreateApiKey(ctx, in)
	if err != nil {
		c.rpcError(err)
		return
	}
	v := keyView(out.GetKey())
	v["key"] = out.GetSecret()
	v["warning"] = "Store this key securely. It will not be shown again."
	c.writeDirect(http.StatusCreated, v)
}

// listKeys serves GET /keys[?agentId=]: without agentId, the keys of the
// admin key's own agent, or every key for a global admin key.
func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, "")
	if !c.admin() {
		return
	}
	agentID := r.URL.Query().Get("agentId")
	if agentID == "" && !c.key.GetGlobal() {
		agentID = c.key.GetAgentId()
	}
	if !c.manages(agentID) {
		c.foreignAgent(agentID)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	keys, err := paging.All(ctx, func(ctx context.Context, tok string) ([]*agpv1.ApiKey, string, error) {
		r, err := h.o.Keys.ListApiKeys(ctx, &agpv1.ListApiKeysRequest{AgentId: agentID, PageSize: 1000, PageToken: tok})
		return r.GetKeys(), r.GetNextPageToken(), err
	})
	if err != nil {
		c.rpcError(err)
		return
	}
	list := []map[string]any{}
	for _, k := range keys {
		list = append(list, keyView(k))
	}
	c.writeDirect(http.StatusOK, map[string]any{"keys": list})
}

// revokeKey serves DELETE /keys/{id}, for a key of an agent the admin key
// manages.
func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, "")
	if !c.admin() {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	id := r.PathValue("id")
	in := &agpv1.RevokeApiKeyRequest{Id: id}
	if !c.key.GetGlobal() {
		// policysvc checks the key's agent in the same step as the
		// revocation, so a key rebound to another agent meanwhile is safe.
		in.AgentId = c.key.GetAgentId()
	}
	_, err := h.o.Keys.RevokeApiKey(ctx, in)
	if status.Code(err) == codes.PermissionDenied {
		c.foreignAgent("")
		return
	}
	if err != nil {
		c.rpcError(err)
		return
	}
	// This front door does not wait for the change to come back through
	// the watch: the revoker's next request is already refused.
	h.keys.evict(id)
	c.writeDirect(http.StatusOK, map[string]any{"id": id, "revoked": true})
}

// keyMe serves GET /keys/me: the caller's own key.
func (h *Handler) keyMe(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, "")
	a := h.authenticate(r.Context(), r)
	if a.err != nil {
		c.writeError(a.err)
		return
	}
	c.writeDirect(http.StatusOK, keyView(a.key))
}
