// Package agp keeps the state of the Agent Gateway Protocol binding
// (docs/agp.md): API keys stored by the SHA-256 of their secret, with
// every revocation or replacement streamed to the front doors, execute
// confirmation tokens (AGP §8) consumed atomically in Redis, and
// transaction records (AGP §6.5) keyed by their owner. It implements
// agtp.agp.v1.AgpService. Policy, rate limits and idempotency of AGP
// traffic are not here: the front door runs every AGP operation through
// the same Authorize call as an AGTP request.
package agp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agtpsuite/agtp/policysvc/agpkey"
	"github.com/agtpsuite/agtp/policysvc/internal/changelog"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	"github.com/agtpsuite/agtp/services/access"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/grpcerr"
	"github.com/agtpsuite/agtp/services/jsondoc"
	"github.com/agtpsuite/agtp/services/paging"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Execute policies (AGP §8.1) the code acts on; the whole set is the
// ExecutePolicy enum's names.
const (
	PolicyOpen   = "open"
	PolicyStrict = "strict"
)

// Scopes an API key may hold (AGP §4.5); "*" grants all of them.
const (
	ScopeDiscover = "discover"
	ScopeQuery    = "query"
	ScopeExecute  = "execute"
	ScopeAdmin    = "admin"
	ScopeAll      = "*"
)

// Refusal reasons of ConsumeConfirmation.
const (
	ReasonRequired = "confirmation-required"
	ReasonInvalid  = "confirmation-invalid"
	ReasonExpired  = "confirmation-expired"
	ReasonMismatch = "confirmation-mismatch"
	ReasonAmount   = "amount-exceeds-limit"
)

// Options configure the AGP state.
type Options struct {
	// ExecutePolicy is open (default), confirm or strict (AGP §8.1).
	ExecutePolicy string
	// MaxExecuteAmountCents is strict's ceiling (default 100, AGP App. A).
	MaxExecuteAmountCents float64
	// ConfirmationTTL is a token's lifetime (default 5m, AGP §8.3).
	ConfirmationTTL time.Duration
	// TransactionTTL is how long a transaction record is kept (default 7 days).
	TransactionTTL time.Duration
	// WatchBuffer is how many key changes a WatchKeyEvents stream may fall
	// behind before it is ended (default 256).
	WatchBuffer int
	// Now is the clock (tests).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.ExecutePolicy == "" {
		o.ExecutePolicy = PolicyOpen
	}
	if o.MaxExecuteAmountCents == 0 {
		o.MaxExecuteAmountCents = 100
	}
	if o.ConfirmationTTL <= 0 {
		o.ConfirmationTTL = 5 * time.Minute
	}
	if o.TransactionTTL <= 0 {
		o.TransactionTTL = 7 * 24 * time.Hour
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate checks the options after defaults.
func (o Options) Validate() error {
	if enumname.Value[agpv1.ExecutePolicy](o.ExecutePolicy) == 0 {
		return fmt.Errorf("agp execute policy %q: want one of %s", o.ExecutePolicy, enumname.Choices[agpv1.ExecutePolicy]())
	}
	if o.MaxExecuteAmountCents < 0 || math.IsNaN(o.MaxExecuteAmountCents) || math.IsInf(o.MaxExecuteAmountCents, 0) {
		return errors.New("agp max execute amount must be a non-negative number of cents")
	}
	return nil
}

// expiredGrace keeps a confirmation token past its expiry, so that a late
// presentation is told "expired" rather than "invalid".
const expiredGrace = 10 * time.Minute

// Bounds on what a caller controls.
const (
	maxLabel    = 128
	maxBusiness = 256
	maxKeyID    = 64
	maxJSON     = 1 << 20
	maxError    = 2048
)

// Server implements agpv1.AgpServiceServer.
type Server struct {
	agpv1.UnimplementedAgpServiceServer
	rdb  redis.UniversalClient
	log  *slog.Logger
	opts Options
	hub  *hub
	// changes signs key revocations (nil: a revocation of an agent's key
	// is refused).
	changes *changelog.Recorder
}

// RecordChanges has RevokeApiKey sign each revocation of an agent's key
// into that agent's lifecycle stream through r before it revokes.
func (s *Server) RecordChanges(r *changelog.Recorder) { s.changes = r }

// EventKeyRevoked is the lifecycle event of an agent's AGP key revoked.
const EventKeyRevoked = "agp_key_revoked"

var _ agpv1.AgpServiceServer = (*Server)(nil)

// New builds the server.
func New(rdb redis.UniversalClient, log *slog.Logger, opts Options) (*Server, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if rdb == nil {
		return nil, errors.New("agp: redis client is nil")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{rdb: rdb, log: log, opts: opts, hub: newHub(rdb, log, opts.WatchBuffer)}, nil
}

func storeErr(op string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if e := grpcerr.FromContext(err); e != nil {
		return e
	}
	return grpcerr.Unavailable("policy-unavailable", fmt.Sprintf("the AGP store is unreachable (%s)", op))
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

func printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func checkAgent(id string) error {
	if !agtp.IsCanonicalID(id) {
		return grpcerr.InvalidArgument("invalid-agent-id", "agent_id must be a canonical Agent-ID (64 lowercase hex characters)")
	}
	return nil
}

// normalizeScopes checks and sorts a key's scopes.
func normalizeScopes(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, grpcerr.InvalidArgument("invalid-scopes", "a key needs at least one scope: discover, query, execute, admin or *")
	}
	var out []string
	for _, s := range in {
		switch s {
		case ScopeDiscover, ScopeQuery, ScopeExecute, ScopeAdmin, ScopeAll:
		default:
			return nil, grpcerr.InvalidArgument("invalid-scopes", fmt.Sprintf("unknown scope %q: want discover, query, execute, admin or *", s))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Key records are hashes with these fields.
const (
	fieldID      = "id"
	fieldLabel   = "label"
	fieldAgent   = "agent_id"
	fieldScopes  = "scopes"
	fieldCreated = "created"
	// fieldGlobal is "1" on a global key; records written before global
	// keys existed lack it and are not global.
	fieldGlobal = "global"
)

func keyFields(k *agpv1.ApiKey) []any {
	global := "0"
	if k.GetGlobal() {
		global = "1"
	}
	return []any{fieldID, k.GetId(), fieldLabel, k.GetLabel(), fieldAgent, k.GetAgentId(),
		fieldScopes, strings.Join(k.GetScopes(), " "), fieldCreated, strconv.FormatInt(k.GetCreatedAt().AsTime().UnixMilli(), 10),
		fieldGlobal, global}
}

func keyFromHash(m map[string]string) *agpv1.ApiKey {
	ms, _ := strconv.ParseInt(m[fieldCreated], 10, 64)
	return &agpv1.ApiKey{
		Id: m[fieldID], Label: m[fieldLabel], AgentId: m[fieldAgent],
		Scopes: strings.Fields(m[fieldScopes]), CreatedAt: timestamppb.New(time.UnixMilli(ms)),
		Global: m[fieldGlobal] == "1",
	}
}

// CreateApiKey mints a key; the secret is returned once.
func (s *Server) CreateApiKey(ctx context.Context, in *agpv1.CreateApiKeyRequest) (*agpv1.CreateApiKeyResponse, error) {
	// A global key manages every agent's keys: an operator's decision,
	// never one the front door makes for an AGP admin key holder.
	if id, _ := access.Caller(ctx); in.GetGlobal() && id.Kind != access.Operator {
		return nil, grpcerr.PermissionDenied(access.ReasonNotPermitted, "only an operator creates global keys")
	}
	secret, err := agpkey.NewSecret()
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	k, err := s.store(ctx, "key_"+strings.ReplaceAll(uuid.NewString(), "-", "")[:20], in.GetLabel(), in.GetAgentId(), in.GetScopes(), in.GetGlobal(), agpkey.Hash(secret))
	if err != nil {
		return nil, err
	}
	return &agpv1.CreateApiKeyResponse{Key: k, Secret: secret}, nil
}

// ImportApiKey stores a key by the hash of a secret the caller generated.
func (s *Server) ImportApiKey(ctx context.Context, in *agpv1.ImportApiKeyRequest) (*agpv1.ImportApiKeyResponse, error) {
	if !isHex64(in.GetKeySha256()) {
		return nil, grpcerr.InvalidArgument("invalid-key-hash", "key_sha256 must be 64 lowercase hex characters")
	}
	if in.GetId() == "" || !printable(in.GetId(), maxKeyID) || strings.ContainsAny(in.GetId(), " /{}") {
		return nil, grpcerr.InvalidArgument("invalid-key-id", fmt.Sprintf("id must be 1–%d printable characters without spaces, '/' or braces", maxKeyID))
	}
	k, err := s.store(ctx, in.GetId(), in.GetLabel(), in.GetAgentId(), in.GetScopes(), in.GetGlobal(), in.GetKeySha256())
	if err != nil {
		return nil, err
	}
	return &agpv1.ImportApiKeyResponse{Key: k}, nil
}

// storeScript writes a key record and its index entry, replacing the
// key with the same id, and publishes the replacement (if any) in the same
// step, so a committed change is never left unannounced. It applies only
// if the id still maps to the hash the caller read (ARGV[2], "" for none):
// the caller built the event from it.
//
// KEYS[1] index, KEYS[2] the new record, KEYS[3] the replaced record (or
// KEYS[2] again); ARGV[1] id, ARGV[2] expected old hash, ARGV[3] new hash,
// ARGV[4] channel, ARGV[5] event ("" to publish nothing), ARGV[6..] the
// record's fields and values.
var storeScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return 'retry' end
local owner = redis.call('HGET', KEYS[2], 'id')
if owner and owner ~= ARGV[1] then return 'conflict' end
if KEYS[3] ~= KEYS[2] then redis.call('DEL', KEYS[3]) end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return 'ok'
`)

// revokeScript deletes a key and publishes the revocation in one step,
// if the id still maps to the hash and the record to the agent the caller
// read: the event names that agent, and a revocation limited to one
// agent's keys must not reach a key rebound to another meanwhile.
//
// KEYS[1] index, KEYS[2] the record; ARGV[1] id, ARGV[2] hash, ARGV[3]
// channel, ARGV[4] event, ARGV[5] agent.
var revokeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if (redis.call('HGET', KEYS[2], 'agent_id') or '') ~= ARGV[5] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// casAttempts bounds the retries of a key change that lost a race with a
// concurrent change of the same id.
const casAttempts = 8

// event encodes a key change for rediskeys.AGPKeyEvents.
func (s *Server) event(change agpv1.ApiKeyChange, id, agentID string, hashes ...string) (string, error) {
	b, err := proto.Marshal(&agpv1.WatchKeyEventsResponse{
		Change: change, KeyId: id, AgentId: agentID, KeySha256: hashes,
		ChangedAt: timestamppb.New(s.opts.Now().UTC().Truncate(time.Millisecond)),
	})
	return string(b), err
}

// store writes a key record and its index entry in one step, replacing an
// earlier key with the same id; a replacement is announced to every
// WatchKeyEvents watcher, so a front door also drops a key whose global
// flag changed.
func (s *Server) store(ctx context.Context, id, label, agentID string, scopes []string, global bool, hash string) (*agpv1.ApiKey, error) {
	if err := checkAgent(agentID); err != nil {
		return nil, err
	}
	if !printable(label, maxLabel) {
		return nil, grpcerr.InvalidArgument("invalid-label", fmt.Sprintf("label must be at most %d printable characters", maxLabel))
	}
	sc, err := normalizeScopes(scopes)
	if err != nil {
		return nil, err
	}
	// Global widens the admin scope only; on any other key it would be a
	// flag that does nothing until someone adds admin, and then too much.
	if global && !slices.Contains(sc, ScopeAdmin) && !slices.Contains(sc, ScopeAll) {
		return nil, grpcerr.InvalidArgument("invalid-global", "only a key with the admin scope (or *) can be global")
	}
	k := &agpv1.ApiKey{Id: id, Label: label, AgentId: agentID, Scopes: sc, Global: global, CreatedAt: timestamppb.New(s.opts.Now().UTC().Truncate(time.Millisecond))}
	for range casAttempts {
		old, err := s.rdb.HGet(ctx, rediskeys.AGPKeyIndex, id).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, storeErr("store key", err)
		}
		oldKey, ev := rediskeys.AGPKey(hash), ""
		if old != "" {
			oldKey = rediskeys.AGPKey(old)
			prev, err := s.rdb.HGet(ctx, oldKey, fieldAgent).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, storeErr("store key", err)
			}
			hashes := []string{old}
			if old != hash {
				hashes = append(hashes, hash)
			}
			if ev, err = s.event(agpv1.ApiKeyChange_API_KEY_CHANGE_REPLACED, id, prev, hashes...); err != nil {
				return nil, grpcerr.Internal(err)
			}
		}
		args := append([]any{id, old, hash, rediskeys.AGPKeyEvents, ev}, keyFields(k)...)
		res, err := storeScript.Run(ctx, s.rdb, []string{rediskeys.AGPKeyIndex, rediskeys.AGPKey(hash), oldKey}, args...).Text()
		if err != nil {
			return nil, storeErr("store key", err)
		}
		switch res {
		case "conflict":
			return nil, grpcerr.Conflict("api-key-exists", "another key already has this secret")
		case "ok":
			s.log.InfoContext(ctx, "agp api key stored", "key_id", id, "agent_id", agentID, "scopes", sc, "global", global, "replaced", old != "")
			return k, nil
		}
	}
	return nil, grpcerr.Conflict("api-key-busy", "the key is being changed concurrently; retry")
}

// apiKeyPaging is ListApiKeys' page sizes.
var apiKeyPaging = paging.Spec{RPC: agpv1.AgpService_ListApiKeys_FullMethodName, Default: 100, Max: 1000}

// ListApiKeys lists keys ordered by id, a page at a time. The position is
// the last id returned. The id index is one hash, so each page reads its
// ids (small strings, O(keys)) but only the records of the page (and,
// with agent_id, of the other agents' keys it passes).
func (s *Server) ListApiKeys(ctx context.Context, in *agpv1.ListApiKeysRequest) (*agpv1.ListApiKeysResponse, error) {
	page, err := apiKeyPaging.Parse(in.GetPageSize(), in.GetPageToken(), in.GetAgentId())
	if err != nil {
		return nil, err
	}
	idx, err := s.rdb.HGetAll(ctx, rediskeys.AGPKeyIndex).Result()
	if err != nil {
		return nil, storeErr("list keys", err)
	}
	ids := make([]string, 0, len(idx))
	for id := range idx {
		if id > page.After {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := &agpv1.ListApiKeysResponse{}
	// One key beyond the page tells whether a next page exists.
	for len(ids) > 0 && len(out.Keys) <= page.Size {
		batch := ids[:min(len(ids), page.Size+1-len(out.Keys))]
		ids = ids[len(batch):]
		cmds := make([]*redis.MapStringStringCmd, len(batch))
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range batch {
				cmds[i] = p.HGetAll(ctx, rediskeys.AGPKey(idx[id]))
			}
			return nil
		})
		if err != nil {
			return nil, storeErr("list keys", err)
		}
		for _, c := range cmds {
			m := c.Val()
			if len(m) == 0 {
				continue // revoked meanwhile
			}
			k := keyFromHash(m)
			if in.GetAgentId() != "" && k.GetAgentId() != in.GetAgentId() {
				continue
			}
			out.Keys = append(out.Keys, k)
		}
	}
	if len(out.Keys) > page.Size {
		out.Keys = out.Keys[:page.Size]
		out.NextPageToken = page.Next(out.Keys[page.Size-1].GetId())
	}
	return out, nil
}

// RevokeApiKey deletes a key and announces it to every WatchKeyEvents
// watcher, so front doors drop it from their caches at once. The
// revocation of an agent's key is signed first (EventKeyRevoked). With an
// agent_id, only a key of that agent is revoked: the front door's /keys
// revokes for a non-global admin key this way.
func (s *Server) RevokeApiKey(ctx context.Context, in *agpv1.RevokeApiKeyRequest) (*agpv1.RevokeApiKeyResponse, error) {
	id := in.GetId()
	if id == "" || len(id) > maxKeyID {
		return nil, grpcerr.InvalidArgument("invalid-key-id", "id is required")
	}
	if in.GetAgentId() != "" {
		if err := checkAgent(in.GetAgentId()); err != nil {
			return nil, err
		}
	}
	for range casAttempts {
		hash, err := s.rdb.HGet(ctx, rediskeys.AGPKeyIndex, id).Result()
		if errors.Is(err, redis.Nil) {
			return nil, grpcerr.NotFound("api-key-not-found", "no API key has this id")
		}
		if err != nil {
			return nil, storeErr("revoke key", err)
		}
		agentID, err := s.rdb.HGet(ctx, rediskeys.AGPKey(hash), fieldAgent).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, storeErr("revoke key", err)
		}
		if in.GetAgentId() != "" && agentID != in.GetAgentId() {
			s.log.InfoContext(ctx, "agp api key revocation refused: another agent's key", "key_id", id, "agent_id", in.GetAgentId())
			return nil, grpcerr.PermissionDenied("api-key-other-agent", "the key is bound to another agent")
		}
		// Who revoked the key is signed into its agent's lifecycle stream
		// first. Keys are created for an agent; a stored key without one
		// has no stream, and the log line below names who revoked it.
		if agentID != "" {
			if _, err := s.changes.Record(ctx, agentID, EventKeyRevoked, map[string]any{"key_id": id}, id); err != nil {
				return nil, err
			}
		}
		ev, err := s.event(agpv1.ApiKeyChange_API_KEY_CHANGE_REVOKED, id, agentID, hash)
		if err != nil {
			return nil, grpcerr.Internal(err)
		}
		done, err := revokeScript.Run(ctx, s.rdb, []string{rediskeys.AGPKeyIndex, rediskeys.AGPKey(hash)}, id, hash, rediskeys.AGPKeyEvents, ev, agentID).Int()
		if err != nil {
			return nil, storeErr("revoke key", err)
		}
		if done == 1 {
			s.log.InfoContext(ctx, "agp api key revoked", "key_id", id, "agent_id", agentID, "actor", access.Actor(ctx))
			return &agpv1.RevokeApiKeyResponse{}, nil
		}
	}
	return nil, grpcerr.Conflict("api-key-busy", "the key is being changed concurrently; retry")
}

// ResolveApiKey finds a key by the hash of its secret.
func (s *Server) ResolveApiKey(ctx context.Context, in *agpv1.ResolveApiKeyRequest) (*agpv1.ResolveApiKeyResponse, error) {
	if !isHex64(in.GetKeySha256()) {
		return nil, grpcerr.InvalidArgument("invalid-key-hash", "key_sha256 must be 64 lowercase hex characters")
	}
	m, err := s.rdb.HGetAll(ctx, rediskeys.AGPKey(in.GetKeySha256())).Result()
	if err != nil {
		return nil, storeErr("resolve key", err)
	}
	if len(m) == 0 {
		return nil, grpcerr.NotFound("api-key-unknown", "no API key matches")
	}
	return &agpv1.ResolveApiKeyResponse{Key: keyFromHash(m)}, nil
}

func checkBinding(agentID, business, requestHash string) error {
	if err := checkAgent(agentID); err != nil {
		return err
	}
	if business == "" || len(business) > maxBusiness {
		return grpcerr.InvalidArgument("invalid-business", fmt.Sprintf("business_id must be 1–%d bytes", maxBusiness))
	}
	if !isHex64(requestHash) {
		return grpcerr.InvalidArgument("invalid-request-hash", "request_sha256 must be 64 lowercase hex characters")
	}
	return nil
}

// IssueConfirmation mints a token bound to the caller (its key is under
// the caller's tag), the business and the request hash.
func (s *Server) IssueConfirmation(ctx context.Context, in *agpv1.IssueConfirmationRequest) (*agpv1.IssueConfirmationResponse, error) {
	if err := checkBinding(in.GetAgentId(), in.GetBusinessId(), in.GetRequestSha256()); err != nil {
		return nil, err
	}
	token := uuid.NewString()
	expires := s.opts.Now().Add(s.opts.ConfirmationTTL).UTC().Truncate(time.Millisecond)
	key := rediskeys.AGPConfirmation(in.GetAgentId(), token)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "business", in.GetBusinessId(), "request", in.GetRequestSha256(), "expires", strconv.FormatInt(expires.UnixMilli(), 10))
		p.PExpire(ctx, key, s.opts.ConfirmationTTL+expiredGrace)
		return nil
	})
	if err != nil {
		return nil, storeErr("issue confirmation", err)
	}
	return &agpv1.IssueConfirmationResponse{Token: token, ExpiresAt: timestamppb.New(expires),
		//lint:ignore SA1019 the first release's field, filled for its clients beside ExecutePolicy
		Policy: s.opts.ExecutePolicy, ExecutePolicy: enumname.Value[agpv1.ExecutePolicy](s.opts.ExecutePolicy)}, nil
}

// consumeScript checks a token and deletes it only when it matches: a
// mismatched presentation leaves it for the right request (AGP ref-impl),
// an expired one is deleted. One script, so two concurrent executes
// cannot both consume it.
var consumeScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'business', 'request', 'expires')
if not h[1] then return 'invalid' end
if tonumber(h[3]) <= tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1])
  return 'expired'
end
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 'mismatch' end
redis.call('DEL', KEYS[1])
return 'ok'
`)

// ConsumeConfirmation applies the execute policy.
func (s *Server) ConsumeConfirmation(ctx context.Context, in *agpv1.ConsumeConfirmationRequest) (*agpv1.ConsumeConfirmationResponse, error) {
	if err := checkBinding(in.GetAgentId(), in.GetBusinessId(), in.GetRequestSha256()); err != nil {
		return nil, err
	}
	pol := s.opts.ExecutePolicy
	allow := func() (*agpv1.ConsumeConfirmationResponse, error) {
		//lint:ignore SA1019 the first release's field, filled for its clients beside ExecutePolicy
		return &agpv1.ConsumeConfirmationResponse{Allowed: true, Policy: pol, ExecutePolicy: enumname.Value[agpv1.ExecutePolicy](pol)}, nil
	}
	refuse := func(reason, msg string) (*agpv1.ConsumeConfirmationResponse, error) {
		s.log.InfoContext(ctx, "agp execute refused", "reason", reason, "agent_id", in.GetAgentId(), "business_id", in.GetBusinessId())
		//lint:ignore SA1019 the first release's field, filled for its clients beside ExecutePolicy
		return &agpv1.ConsumeConfirmationResponse{Policy: pol, ExecutePolicy: enumname.Value[agpv1.ExecutePolicy](pol), Reason: reason, Message: msg}, nil
	}
	if pol == PolicyOpen {
		return allow()
	}
	// The ceiling is checked before the token, so a refused amount does
	// not use the token up.
	if pol == PolicyStrict && in.GetAmountPresent() && !(in.GetAmountCents() <= s.opts.MaxExecuteAmountCents) {
		return refuse(ReasonAmount, fmt.Sprintf("Execute amount exceeds policy limit (%s cents).", strconv.FormatFloat(s.opts.MaxExecuteAmountCents, 'f', -1, 64)))
	}
	if in.GetToken() == "" {
		return refuse(ReasonRequired, "Execute confirmation required. Provide X-Confirmation-Token header.")
	}
	if !isUUID(in.GetToken()) {
		return refuse(ReasonInvalid, "Invalid confirmation token.")
	}
	res, err := consumeScript.Run(ctx, s.rdb, []string{rediskeys.AGPConfirmation(in.GetAgentId(), in.GetToken())},
		in.GetBusinessId(), in.GetRequestSha256(), s.opts.Now().UnixMilli()).Text()
	if err != nil {
		return nil, storeErr("consume confirmation", err)
	}
	switch res {
	case "ok":
		return allow()
	case "expired":
		return refuse(ReasonExpired, "Confirmation token expired. Prepare a new token.")
	case "mismatch":
		return refuse(ReasonMismatch, "Confirmation token does not match this execute request.")
	}
	return refuse(ReasonInvalid, "Invalid confirmation token.")
}

// PutTransaction stores a record under its owner. Its operation (AGP
// §5.1) and status (§6.5) must each name a value of their enum. The
// record is stored in the first release's form (operation and status
// strings, JSON bytes), which every release reads; GetTransaction serves
// the enums and the documents beside it.
func (s *Server) PutTransaction(ctx context.Context, in *agpv1.PutTransactionRequest) (*agpv1.PutTransactionResponse, error) {
	t := in.GetTransaction()
	if t == nil {
		return nil, grpcerr.InvalidArgument("invalid-transaction", "transaction is required")
	}
	t, err := storedForm(t)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 the stored form is the first release's (storedForm)
	op, st, input, result := t.GetOperation(), t.GetStatus(), t.GetInputJson(), t.GetResultJson()
	switch {
	case !isUUID(t.GetId()):
		return nil, grpcerr.InvalidArgument("invalid-transaction", "id must be a UUID")
	case enumname.Value[agpv1.AgpOperation](op) == 0:
		return nil, grpcerr.InvalidArgument("invalid-transaction", "operation must be one of "+enumname.Choices[agpv1.AgpOperation]())
	case enumname.Value[agpv1.TransactionStatus](st) == 0:
		return nil, grpcerr.InvalidArgument("invalid-transaction", "status must be one of "+enumname.Choices[agpv1.TransactionStatus]())
	case len(t.GetBusinessId()) > maxBusiness:
		return nil, grpcerr.InvalidArgument("invalid-transaction", "business_id is too long")
	case len(input) > maxJSON || len(result) > maxJSON || len(t.GetError()) > maxError:
		return nil, grpcerr.InvalidArgument("invalid-transaction", "input, result or error is too large")
	}
	if err := checkAgent(t.GetAgentId()); err != nil {
		return nil, err
	}
	b, err := proto.Marshal(t)
	if err != nil {
		return nil, grpcerr.Internal(err)
	}
	if err := s.rdb.Set(ctx, rediskeys.AGPTransaction(t.GetAgentId(), t.GetId()), b, s.opts.TransactionTTL).Err(); err != nil {
		return nil, storeErr("put transaction", err)
	}
	return &agpv1.PutTransactionResponse{}, nil
}

// GetTransaction reads a record; another owner's record is not found,
// exactly like a missing one (AGP §6.5).
func (s *Server) GetTransaction(ctx context.Context, in *agpv1.GetTransactionRequest) (*agpv1.GetTransactionResponse, error) {
	notFound := grpcerr.NotFound("transaction-not-found", "No transaction exists for the provided ID.")
	if err := checkAgent(in.GetAgentId()); err != nil {
		return nil, err
	}
	if !isUUID(in.GetTransactionId()) {
		return nil, notFound
	}
	b, err := s.rdb.Get(ctx, rediskeys.AGPTransaction(in.GetAgentId(), in.GetTransactionId())).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, notFound
	}
	if err != nil {
		return nil, storeErr("get transaction", err)
	}
	t := &agpv1.Transaction{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, grpcerr.Internal(fmt.Errorf("transaction record: %w", err))
	}
	servedForm(t)
	return &agpv1.GetTransactionResponse{Transaction: t}, nil
}

// storedForm is t with the enums and the documents a current client sends
// moved to the first release's fields (a client of that release sends
// those only), so that every record is stored one way, once.
func storedForm(t *agpv1.Transaction) (*agpv1.Transaction, error) {
	t = proto.Clone(t).(*agpv1.Transaction)
	//lint:ignore SA1019 the stored form is the first release's
	input, err := jsondoc.PreferStruct(t.GetInput(), t.GetInputJson())
	if err != nil {
		return nil, grpcerr.InvalidArgument("invalid-transaction", "input: "+err.Error())
	}
	//lint:ignore SA1019 the stored form is the first release's
	result, err := jsondoc.PreferValue(t.GetResult(), t.GetResultJson())
	if err != nil {
		return nil, grpcerr.InvalidArgument("invalid-transaction", "result: "+err.Error())
	}
	//lint:ignore SA1019 the stored form is the first release's
	t.Operation, t.Status, t.InputJson, t.ResultJson = enumname.Requested(t.GetAgpOperation(), t.GetOperation()), enumname.Requested(t.GetState(), t.GetStatus()), input, result
	t.AgpOperation, t.State, t.Input, t.Result = 0, 0, nil, nil
	return t, nil
}

// servedForm fills the enums and the documents of a stored record beside
// the first release's fields, for clients of either release. A document
// with no Struct or Value form (a number beyond float64, from a client
// that sent bytes) is served in the bytes field only.
func servedForm(t *agpv1.Transaction) {
	//lint:ignore SA1019 the stored form is the first release's
	op, st, input, result := t.GetOperation(), t.GetStatus(), t.GetInputJson(), t.GetResultJson()
	t.AgpOperation, t.State = enumname.Value[agpv1.AgpOperation](op), enumname.Value[agpv1.TransactionStatus](st)
	t.Input, _ = jsondoc.Struct(input)
	t.Result, _ = jsondoc.Value(result)
}
