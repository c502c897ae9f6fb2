// Package registry is identitysvc's Redis-backed agent registry: Genesis
// registration, lifecycle transitions with signed events, resolution of
// IDs, labels and URIs, and the change events every replica's watchers
// receive.
package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agtpsuite/agtp/identitysvc/callerpolicy"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	"github.com/agtpsuite/agtp/identitysvc/reasons"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Lifecycle authorisation modes (core §7.2.19).
const (
	AuthOpen          = "open"
	AuthGenesisIssuer = "genesis_issuer"
)

// Reason tokens of registry errors.
const (
	ReasonInvalidCanonicalID   = agtp.ReasonInvalidCanonicalID
	ReasonInvalidURIForm       = agtp.ReasonInvalidURIForm
	ReasonAgentNotFound        = callerpolicy.ReasonAgentNotFound
	ReasonAgentRetired         = callerpolicy.ReasonAgentRetired
	ReasonAgentNotActivated    = callerpolicy.ReasonAgentNotActivated
	ReasonAgentIDCollision     = reasons.AgentIDCollision
	ReasonAgentIDRetired       = reasons.AgentIDRetired
	ReasonAgentNameTaken       = reasons.AgentNameTaken
	ReasonAgentNameInvalid     = "agent-name-invalid"
	ReasonExperimentalLabel    = reasons.ExperimentalLabelRequired
	ReasonAliasMismatch        = "alias-mismatch"
	ReasonTransitionInvalid    = "lifecycle-transition-invalid"
	ReasonReasonRequired       = "reason-required"
	ReasonParameterInvalid     = "parameter-invalid"
	ReasonCertRequired         = agtp.ReasonGenesisIssuerCertMissing
	ReasonIssuerMismatch       = "genesis-issuer-mismatch"
	ReasonLifecycleBusy        = "lifecycle-busy"
	ReasonAuditUnavailable     = "audit-unavailable"
	ReasonDomainNotHosted      = "domain-not-hosted"
	ReasonTransitionImpossible = "lifecycle-transition-impossible"
)

// Options configure the registry. The zero value of a field means its
// default.
type Options struct {
	// LifecycleAuth is "genesis_issuer" (default, core §7.2.19) or "open"
	// (development and single tenant only).
	LifecycleAuth string
	// OperatorFingerprints are client key fingerprints (SHA-256 of the raw
	// Ed25519 key, lowercase hex) allowed to run any lifecycle method in
	// either mode.
	OperatorFingerprints []string
	// OrgDomains are the domains whose Form 3/4 URIs this registry
	// resolves (also as agtp.<domain>). Empty accepts any domain, which
	// suits a single-tenant development suite.
	OrgDomains []string
	// LockTTL bounds how long a crashed replica can hold an agent's
	// lifecycle lock. Default 30 s.
	LockTTL time.Duration
	// LockWait is how long a lifecycle call waits for another one on the
	// same agent. Default 5 s.
	LockWait time.Duration
	// AuditTimeout bounds the AppendLifecycleEvent call; it must be well
	// under LockTTL. Default 5 s.
	AuditTimeout time.Duration
	// LabelReuseAfter is when the label of a retired or deprecated agent
	// may be registered again (core §6.5.9). Default 90 days.
	LabelReuseAfter time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// WithDefaults fills in defaults.
func (o Options) WithDefaults() Options {
	if o.LifecycleAuth == "" {
		o.LifecycleAuth = AuthGenesisIssuer
	}
	if o.LockTTL == 0 {
		o.LockTTL = 30 * time.Second
	}
	if o.LockWait == 0 {
		o.LockWait = 5 * time.Second
	}
	if o.AuditTimeout == 0 {
		o.AuditTimeout = 5 * time.Second
	}
	if o.LabelReuseAfter == 0 {
		o.LabelReuseAfter = 90 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.LifecycleAuth != AuthOpen && o.LifecycleAuth != AuthGenesisIssuer {
		errs = append(errs, fmt.Errorf("lifecycle auth %q is not %q or %q", o.LifecycleAuth, AuthOpen, AuthGenesisIssuer))
	}
	for _, fp := range o.OperatorFingerprints {
		if !agtp.IsCanonicalID(fp) {
			errs = append(errs, fmt.Errorf("operator fingerprint %q is not 64 lowercase hex digits", fp))
		}
	}
	for _, d := range o.OrgDomains {
		if u, err := agtp.ParseURI("agtp://" + d); err != nil || u.Form != agtp.FormOrganization {
			errs = append(errs, fmt.Errorf("org domain %q is not a DNS domain", d))
		}
	}
	if o.LockTTL <= 0 || o.LockWait <= 0 || o.AuditTimeout <= 0 || o.LabelReuseAfter <= 0 {
		errs = append(errs, errors.New("lock TTL, lock wait, audit timeout and label reuse period must be positive"))
	}
	if o.AuditTimeout >= o.LockTTL {
		errs = append(errs, fmt.Errorf("audit timeout %v must be less than the lock TTL %v", o.AuditTimeout, o.LockTTL))
	}
	return errors.Join(errs...)
}

// Registry is the agent registry.
type Registry struct {
	rdb   redis.UniversalClient
	log   *slog.Logger
	audit auditv1.AuditServiceClient
	opts  Options
}

// New returns a registry. opts are defaulted and validated.
func New(rdb redis.UniversalClient, log *slog.Logger, audit auditv1.AuditServiceClient, opts Options) (*Registry, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("registry options: %w", err)
	}
	if rdb == nil || audit == nil {
		return nil, errors.New("registry: redis client and audit client are required")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Registry{rdb: rdb, log: log, audit: audit, opts: opts}, nil
}

// redisErr turns a Redis failure into a status error: the context's own
// error when it ended, else a masked internal error.
func redisErr(ctx context.Context, what string, err error) error {
	if cerr := grpcerr.FromContext(ctx.Err()); cerr != nil {
		return cerr
	}
	return grpcerr.Internal(fmt.Errorf("%s: %w", what, err))
}

// createScript stores a new agent unless the ID exists, and announces it.
// ARGV: the events channel, the event, the Register call's token, then the
// record's field/value pairs. It returns "" when created, or when the
// record is the one this call's token stored (a resend of the script after
// its reply was lost), else the existing status.
var createScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'status', '` + fRegistration + `')
if cur[1] then
  if cur[2] == ARGV[3] then return '' end
  return cur[1]
end
redis.call('HSET', KEYS[1], '` + fRegistration + `', ARGV[3], unpack(ARGV, 4))
redis.call('PUBLISH', ARGV[1], ARGV[2])
return ''
`)

// rollbackScript removes an agent whose registration failed, only while
// it is still the untouched pending record this call created.
var rollbackScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'status') == 'pending' and redis.call('HGET', KEYS[1], 'revision') == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return 1
end
return 0
`)

// releaseIfScript deletes a key only while it holds the given value.
var releaseIfScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// RegisterRequest is a Genesis to register.
type RegisterRequest struct {
	GenesisJSON []byte
	// Name is the label; empty means the Genesis org_label, else
	// "agent-" and the first 12 hex digits of the Agent-ID.
	Name string
	// Activate runs ACTIVATE right away (event agent-genesis-issued).
	Activate bool
	// Actor is recorded in the activation event.
	Actor string
}

// genesisError maps a Genesis failure to a status error: malformed
// documents are 400, documents that parse but do not verify are 422.
func genesisError(err error) error {
	var ge *genesis.Error
	if !errors.As(err, &ge) {
		return grpcerr.InvalidArgument(genesis.ReasonMalformed, err.Error())
	}
	md := []string{}
	if ge.Field != "" {
		md = append(md, "field", ge.Field)
	}
	switch ge.Reason {
	case genesis.ReasonHashMismatch, genesis.ReasonSignatureInvalid:
		return grpcerr.FailedPrecondition(ge.Reason, ge.Error(), md...)
	}
	return grpcerr.InvalidArgument(ge.Reason, ge.Error(), md...)
}

// ValidName reports whether s is an agent-name (core §6.1.3) of at most
// 63 characters.
func ValidName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Register validates and verifies a Genesis (the Agent-ID is recomputed),
// claims its label and stores it in state pending, or active when
// req.Activate is set. A duplicate ID is refused as a collision (core
// §10.4.7), a retired ID is never registered again (core §6.5.9), and on
// any failure nothing is stored.
func (r *Registry) Register(ctx context.Context, req RegisterRequest) (*Agent, error) {
	g, err := genesis.Load(req.GenesisJSON)
	if err != nil {
		return nil, genesisError(err)
	}
	id := g.AgentID
	name := req.Name
	if name == "" {
		name = g.OrgLabel
	}
	if name == "" {
		name = "agent-" + id[:12]
	}
	if !ValidName(name) {
		return nil, grpcerr.InvalidArgument(ReasonAgentNameInvalid,
			fmt.Sprintf("agent name %q must be 1 to 63 letters, digits, '-' or '_'", name))
	}
	if g.TrustTier == genesis.TierExperimental && !strings.HasPrefix(strings.ToUpper(name), "X-") {
		return nil, grpcerr.InvalidArgument(ReasonExperimentalLabel,
			"a Tier 3 (experimental) agent's label must start with X- (core §6.1.9)")
	}
	if st, err := r.rdb.HGet(ctx, rediskeys.Agent(id), fStatus).Result(); err == nil {
		return nil, r.existsError(id, st)
	} else if !errors.Is(err, redis.Nil) {
		return nil, redisErr(ctx, "check agent", err)
	}

	claimed, err := r.claimName(ctx, name, id)
	if err != nil {
		return nil, err
	}
	now := r.opts.Now()
	fields := newAgentFields(g, name, now)
	created := agentFromMap(id, pairsToMap(fields))
	payload, err := eventPayload(id, created.Record)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	// The token tells this call's record from another call's when the
	// script's reply is lost: a resent script answers created, and after
	// an error the record is read back (storedBy).
	token := rand.Text()
	args := append([]any{rediskeys.AgentEvents, payload, token}, fields...)
	st, err := createScript.Run(ctx, r.rdb, []string{rediskeys.Agent(id)}, args...).Text()
	if err != nil && r.storedBy(id, token) {
		st, err = "", nil
	}
	if err != nil {
		r.releaseName(name, id, claimed)
		return nil, redisErr(ctx, "create agent", err)
	}
	if st != "" {
		r.releaseName(name, id, claimed)
		return nil, r.existsError(id, st)
	}
	if err := r.rdb.SAdd(ctx, rediskeys.AgentIndex, id).Err(); err != nil {
		r.rollback(id, name, claimed)
		return nil, redisErr(ctx, "index agent", err)
	}
	r.log.InfoContext(ctx, "agent registered", "agent_id", id, "name", name, "trust_tier", g.TrustTier,
		"issuer_fingerprint", g.IssuerFingerprint())
	if !req.Activate {
		return created, nil
	}
	actor := req.Actor
	if actor == "" {
		actor = "registration"
	}
	res, err := r.transition(ctx, TransitionRequest{
		AgentID:    id,
		Transition: identityv1.LifecycleTransition_LIFECYCLE_TRANSITION_ACTIVATE,
		Reason:     "registered with activate",
		Actor:      actor,
	}, false)
	if err != nil {
		r.rollback(id, name, claimed)
		return nil, err
	}
	return res.Agent, nil
}

// storedBy reports whether the agent's record is the one the Register
// call with token stored: after an error, the script may have run and only
// its reply been lost (docs/operations.md, "Redis"). It runs on its own
// context, as the request's may be what ended.
func (r *Registry) storedBy(id, token string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := r.rdb.HGet(ctx, rediskeys.Agent(id), fRegistration).Result()
	return err == nil && v == token
}

func (r *Registry) existsError(id, status string) error {
	if status == callerpolicy.StateRetired {
		return grpcerr.Conflict(ReasonAgentIDRetired,
			"agent "+id+" was retired; a canonical Agent-ID is never registered again (core §6.5.9)", "agent_id", id)
	}
	r.log.Warn("genesis registration collides with an existing Agent-ID", "agent_id", id)
	return grpcerr.Conflict(ReasonAgentIDCollision,
		"agent "+id+" is already registered; a second registration of a canonical ID is refused as a collision (core §10.4.7)",
		"agent_id", id)
}

// claimName maps name to id. It reports whether this call created the
// mapping (and so must remove it if registration fails). A label held by
// an agent retired or deprecated for LabelReuseAfter is taken over; the
// old holder can then no longer be reinstated (checkNameHeld).
func (r *Registry) claimName(ctx context.Context, name, id string) (bool, error) {
	key := rediskeys.AgentName(name)
	ok, err := r.rdb.SetNX(ctx, key, id, 0).Result()
	if err != nil {
		return false, redisErr(ctx, "claim name", err)
	}
	if ok {
		return true, nil
	}
	taken := grpcerr.Conflict(ReasonAgentNameTaken, fmt.Sprintf("agent name %q is registered to another agent", name), "name", name)
	err = r.rdb.Watch(ctx, func(tx *redis.Tx) error {
		holder, err := tx.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			holder = ""
		} else if err != nil {
			return err
		}
		if holder == id {
			// Without the agent's record, the name is this Genesis's claim
			// whose SETNX reply was lost (this call's, re-sent, or an
			// earlier call's that failed with it): take it as this call's,
			// or the Genesis could never be registered. Another Register
			// of the same Genesis may be running too; createScript lets
			// one of them store the record, and releaseName leaves the
			// name to it.
			n, err := r.rdb.Exists(ctx, rediskeys.Agent(id)).Result()
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			return grpcerr.Conflict(ReasonAgentIDCollision, "agent "+id+" is already registered", "agent_id", id)
		}
		if holder != "" {
			reusable := func() (bool, error) {
				vals, err := r.rdb.HMGet(ctx, rediskeys.Agent(holder), fStatus, fUpdatedAt).Result()
				if err != nil {
					return false, err
				}
				st, _ := vals[0].(string)
				upd, _ := vals[1].(string)
				if st != "" && st != callerpolicy.StateRetired && st != callerpolicy.StateDeprecated {
					return false, nil
				}
				return st == "" || r.opts.Now().Sub(msTime(upd)) >= r.opts.LabelReuseAfter, nil
			}
			if ok, err := reusable(); err != nil || !ok {
				return cmp.Or(err, taken)
			}
			// The holder's lifecycle lock keeps it from returning to active
			// between the check and the takeover: a reinstatement checks its
			// label under the same lock (checkNameHeld).
			token, err := r.lock(ctx, holder)
			if err != nil {
				return err
			}
			defer r.unlock(holder, token)
			if ok, err := reusable(); err != nil || !ok {
				return cmp.Or(err, taken)
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, id, 0)
			return nil
		})
		return err
	}, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.TxFailedErr):
		return false, taken
	}
	if _, ok := status.FromError(err); ok {
		return false, err
	}
	return false, redisErr(ctx, "claim name", err)
}

// releaseName undoes a claim this call made, unless the agent's record,
// stored by another Register of the same Genesis, carries the name (two
// calls may both hold the claim: claimName). It runs on its own context
// so that a cancelled request still cleans up.
func (r *Registry) releaseName(name, id string, claimed bool) {
	if !claimed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := r.rdb.HGet(ctx, rediskeys.Agent(id), fName).Result()
	if err == nil && held == name {
		return
	}
	if err := releaseIfScript.Run(ctx, r.rdb, []string{rediskeys.AgentName(name)}, id).Err(); err != nil {
		r.log.Error("release agent name after failed registration", "name", name, "agent_id", id, "err", err)
	}
}

// rollback removes everything a failed registration stored.
func (r *Registry) rollback(id, name string, claimed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	payload, _ := eventPayload(id, nil)
	if err := rollbackScript.Run(ctx, r.rdb, []string{rediskeys.Agent(id)}, rediskeys.AgentEvents, payload).Err(); err != nil {
		r.log.Error("roll back failed registration", "agent_id", id, "err", err)
	}
	if err := r.rdb.SRem(ctx, rediskeys.AgentIndex, id).Err(); err != nil {
		r.log.Error("unindex failed registration", "agent_id", id, "err", err)
	}
	r.releaseName(name, id, claimed)
}

// eventPayload is what goes on rediskeys.AgentEvents: a WatchAgentsResponse
// with the record after the change, or without one when the agent is gone.
func eventPayload(id string, rec *identityv1.AgentRecord) (string, error) {
	b, err := proto.Marshal(&identityv1.WatchAgentsResponse{AgentId: id, Agent: rec})
	if err != nil {
		return "", fmt.Errorf("marshal agent event: %w", err)
	}
	return string(b), nil
}

// Get returns an agent by canonical ID, or a NotFound error.
func (r *Registry) Get(ctx context.Context, id string) (*Agent, error) {
	if !agtp.IsCanonicalID(id) {
		return nil, grpcerr.InvalidArgument(ReasonInvalidCanonicalID, "a canonical Agent-ID is exactly 64 lowercase hex digits")
	}
	vals, err := r.rdb.HMGet(ctx, rediskeys.Agent(id), recordFields...).Result()
	if err != nil {
		return nil, redisErr(ctx, "read agent", err)
	}
	a := agentFromValues(id, vals)
	if a == nil {
		return nil, grpcerr.NotFound(ReasonAgentNotFound, "no agent "+id+" is registered", "agent_id", id)
	}
	return a, nil
}

// LookupName returns the canonical ID a label maps to, or NotFound.
func (r *Registry) LookupName(ctx context.Context, name string) (string, error) {
	if !ValidName(name) {
		return "", grpcerr.InvalidArgument(ReasonAgentNameInvalid, "an agent name is 1 to 63 letters, digits, '-' or '_'")
	}
	id, err := r.rdb.Get(ctx, rediskeys.AgentName(name)).Result()
	if errors.Is(err, redis.Nil) {
		return "", grpcerr.NotFound(ReasonAgentNotFound, fmt.Sprintf("no agent is named %q", name), "name", name)
	}
	if err != nil {
		return "", redisErr(ctx, "read agent name", err)
	}
	return id, nil
}

// ResolveURI returns the canonical Agent-ID an agtp:// URI of Form 1, 1a,
// 3 or 4 names (core §6.1.8). Forms 2 and 2a name servers, not agents,
// and are refused with invalid-uri-form.
func (r *Registry) ResolveURI(ctx context.Context, uri string) (string, error) {
	u, err := agtp.ParseURI(uri)
	if err != nil {
		var pe *agtp.ProtocolError
		if errors.As(err, &pe) {
			return "", grpcerr.InvalidArgument(pe.Reason, pe.Explanation)
		}
		return "", grpcerr.InvalidArgument(ReasonInvalidURIForm, err.Error())
	}
	switch u.Form {
	case agtp.FormCanonical, agtp.FormCanonicalHost:
		// The host of Form 1a is only a hint and never derives identity.
		return u.AgentID, nil
	case agtp.FormDomainAgent, agtp.FormSubdomainAgent:
		if len(r.opts.OrgDomains) > 0 && !slices.Contains(r.opts.OrgDomains, u.Domain()) {
			return "", grpcerr.NotFound(ReasonDomainNotHosted, "this registry hosts no agents under "+u.Domain(), "domain", u.Domain())
		}
		return r.LookupName(ctx, u.AgentName)
	}
	return "", grpcerr.InvalidArgument(ReasonInvalidURIForm,
		"Form "+u.Form.String()+" URIs address servers, not agents, and never resolve to a canonical Agent-ID")
}

// Resolve finds an agent by any combination of canonical ID, label and
// URI. The canonical ID is authoritative: an alias (label or URI) that
// resolves to another agent is 401 alias-mismatch and is logged
// (core §6.1.12).
func (r *Registry) Resolve(ctx context.Context, id, name, uri string) (*Agent, error) {
	if id == "" && name == "" && uri == "" {
		return nil, grpcerr.InvalidArgument(ReasonParameterInvalid, "name an agent by agent_id, name or uri")
	}
	type alias struct{ kind, value, id string }
	var aliases []alias
	if name != "" {
		aid, err := r.LookupName(ctx, name)
		if err != nil {
			return nil, err
		}
		aliases = append(aliases, alias{"name", name, aid})
	}
	if uri != "" {
		aid, err := r.ResolveURI(ctx, uri)
		if err != nil {
			return nil, err
		}
		aliases = append(aliases, alias{"uri", uri, aid})
	}
	canonical := id
	for _, a := range aliases {
		if canonical == "" {
			canonical = a.id
			continue
		}
		if a.id != canonical {
			r.log.WarnContext(ctx, "alias resolves to a different canonical Agent-ID", "agent_id", canonical,
				"alias_kind", a.kind, "alias", a.value, "alias_agent_id", a.id)
			return nil, grpcerr.Unauthenticated(ReasonAliasMismatch,
				fmt.Sprintf("%s %q resolves to a different canonical Agent-ID", a.kind, a.value))
		}
	}
	return r.Get(ctx, canonical)
}

// GetGenesis returns the Genesis exactly as registered.
func (r *Registry) GetGenesis(ctx context.Context, id string) ([]byte, error) {
	if !agtp.IsCanonicalID(id) {
		return nil, grpcerr.InvalidArgument(ReasonInvalidCanonicalID, "a canonical Agent-ID is exactly 64 lowercase hex digits")
	}
	b, err := r.rdb.HGet(ctx, rediskeys.Agent(id), fGenesis).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, grpcerr.NotFound(ReasonAgentNotFound, "no agent "+id+" is registered", "agent_id", id)
	}
	if err != nil {
		return nil, redisErr(ctx, "read genesis", err)
	}
	return b, nil
}

// LoadGenesis returns the registered Genesis, parsed and verified again:
// its Agent-ID is recomputed on every load, so a record edited in Redis
// is never served.
func (r *Registry) LoadGenesis(ctx context.Context, id string) (*genesis.Genesis, error) {
	b, err := r.GetGenesis(ctx, id)
	if err != nil {
		return nil, err
	}
	g, err := genesis.Load(b)
	if err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("stored genesis of %s fails verification: %w", id, err))
	}
	if g.AgentID != id {
		return nil, grpcerr.Internal(fmt.Errorf("stored genesis under %s has agent_id %s", id, g.AgentID))
	}
	return g, nil
}

// readAgents reads the records of ids with one pipeline; agents removed
// meanwhile are left out.
func (r *Registry) readAgents(ctx context.Context, ids []string) ([]*Agent, error) {
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, rediskeys.Agent(id), recordFields...)
		}
		return nil
	})
	if err != nil {
		return nil, redisErr(ctx, "read agents", err)
	}
	out := make([]*Agent, 0, len(ids))
	for i, id := range ids {
		if a := agentFromValues(id, cmds[i].Val()); a != nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// ListPage returns up to n agents that keep accepts, ordered by Agent-ID
// and after the Agent-ID after (empty: from the first), and whether more
// follow. The index is a set, so a page reads every Agent-ID (small
// strings) but only the records it passes.
func (r *Registry) ListPage(ctx context.Context, after string, n int, keep func(*Agent) bool) ([]*Agent, bool, error) {
	ids, err := r.rdb.SMembers(ctx, rediskeys.AgentIndex).Result()
	if err != nil {
		return nil, false, redisErr(ctx, "list agents", err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return id <= after })
	slices.Sort(ids)
	var out []*Agent
	// One agent beyond the page tells whether a next page exists.
	for len(ids) > 0 && len(out) <= n {
		batch := ids[:min(len(ids), n+1-len(out))]
		ids = ids[len(batch):]
		as, err := r.readAgents(ctx, batch)
		if err != nil {
			return nil, false, err
		}
		for _, a := range as {
			if keep(a) {
				out = append(out, a)
			}
		}
	}
	if len(out) > n {
		return out[:n], true, nil
	}
	return out, false, nil
}

// List returns every registered agent, ordered by name; activeOnly keeps
// active agents only.
func (r *Registry) List(ctx context.Context, activeOnly bool) ([]*Agent, error) {
	ids, err := r.rdb.SMembers(ctx, rediskeys.AgentIndex).Result()
	if err != nil {
		return nil, redisErr(ctx, "list agents", err)
	}
	all, err := r.readAgents(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*Agent, 0, len(all))
	for _, a := range all {
		if activeOnly && a.Record.GetStatus() != identityv1.AgentStatus_AGENT_STATUS_ACTIVE {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *Agent) int {
		if c := strings.Compare(a.Record.GetName(), b.Record.GetName()); c != 0 {
			return c
		}
		return strings.Compare(a.Record.GetAgentId(), b.Record.GetAgentId())
	})
	return out, nil
}
