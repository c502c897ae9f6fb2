package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/services/enumname"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Contract lifecycle states. pending is a confirm-first preview that was
// not accepted yet; evicted is a stale-sweep eviction whose event is not
// audited yet (readers treat it as gone, 404).
const (
	statePending  = "pending"
	stateActive   = "active"
	stateRevoked  = "revoked"
	stateReleased = "released"
	stateExpired  = "expired"
	stateEvicted  = "evicted"
)

// Negotiation origins (AGTP-API §10.1.6).
const (
	originGate    = "rcns-gate"
	originPropose = "propose"
)

// Lifecycle events (core §6.5.7).
const (
	eventAccepted = "rcns_propose_accepted"
	eventRevoke   = "rcns_revoke"
	eventRelease  = "rcns_release"
)

// record is a contract's immutable part, stored as JSON in the hash's
// "rec" field.
type record struct {
	SynthesisID   string          `json:"synthesis_id"`
	Method        string          `json:"method"`
	Path          string          `json:"path"`
	AgentID       string          `json:"originating_agent_id"`
	SessionID     string          `json:"session_id,omitempty"`
	RecipeName    string          `json:"recipe_name"`
	RecipeVersion string          `json:"recipe_version"`
	ContractHash  string          `json:"contract_hash"`
	Origin        string          `json:"negotiation_origin"`
	IssuedMs      int64           `json:"issued_ms"`
	ExpiresMs     int64           `json:"expires_ms"`
	Persistent    bool            `json:"persistent,omitempty"`
	Endpoint      json.RawMessage `json:"endpoint"`
	Recipe        json.RawMessage `json:"recipe"`
}

// contract is a stored contract.
type contract struct {
	rec       record
	state     string
	reason    string
	actor     string
	event     string
	changedMs int64
	// unpromote is the pending-unpromote mark: the catalog endpoint of
	// this ended persistent contract is not removed yet (unpromote.go).
	unpromote bool
}

// unaudited reports an active contract whose rcns_propose_accepted is
// not audited yet: an acceptance, or a creation as an active contract
// (optimistic gate, PROPOSE), is recorded before its event is sent. It
// is not in force: nothing runs it and it reads as pending until the
// event is audited and the mark cleared (docs/rcns.md, fail closed).
func (c *contract) unaudited() bool {
	return c.state == stateActive && c.event == eventAccepted
}

// effective is the state at nowMs: an active or pending contract whose
// expiry passed is expired even before the janitor records it, and an
// unaudited one is still pending.
func (c *contract) effective(nowMs int64) string {
	if (c.state == stateActive || c.state == statePending) && nowMs >= c.rec.ExpiresMs {
		return stateExpired
	}
	if c.unaudited() {
		return statePending
	}
	return c.state
}

func (c *contract) proto(nowMs int64) *rcnsv1.Contract {
	r := c.rec
	state := c.effective(nowMs)
	p := &rcnsv1.Contract{
		SynthesisId:        r.SynthesisID,
		Method:             r.Method,
		Path:               r.Path,
		OriginatingAgentId: r.AgentID,
		SessionId:          r.SessionID,
		RecipeName:         r.RecipeName,
		RecipeVersion:      r.RecipeVersion,
		ContractHash:       r.ContractHash,
		NegotiationOrigin:  r.Origin,
		IssuedAt:           timestamppb.New(time.UnixMilli(r.IssuedMs)),
		ExpiresAt:          timestamppb.New(time.UnixMilli(r.ExpiresMs)),
		Persistent:         r.Persistent,
		ContractState:      rcnsv1.ContractState(enumname.Number(rcnsv1.ContractState(0).Descriptor(), state)),
		Endpoint:           string(r.Endpoint),
		Recipe:             string(r.Recipe),
		StateReason:        c.reason,
	}
	//lint:ignore SA1019 the first release's fields, filled for its clients
	p.State, p.EndpointJson, p.RecipeJson = state, r.Endpoint, r.Recipe
	if state == stateExpired && p.StateReason == "" {
		p.StateReason = "expired"
	}
	return p
}

// summary is an agent index entry (rediskeys.AgentContracts).
type summary struct {
	Method    string `json:"m"`
	Path      string `json:"p"`
	SessionID string `json:"s,omitempty"`
	Origin    string `json:"o"`
	IssuedMs  int64  `json:"i"`
	ExpiresMs int64  `json:"e"`
}

var errContractLimit = errors.New("the agent holds the most live contracts allowed")

// indexAddScript adds a contract to its agent's index, dropping expired
// entries, enforcing the per-agent cap, and (when ARGV[6] is set) returning
// a live entry with the same method, path and origin instead of adding:
// the gate's deduplication. Returns {1} added, {0} cap reached, {2, id} duplicate.
var indexAddScript = redis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
local now = tonumber(ARGV[3])
local live, maxe = 0, tonumber(ARGV[7])
for i = 1, #all, 2 do
  local ok, s = pcall(cjson.decode, all[i+1])
  if not ok or type(s) ~= 'table' or tonumber(s.e) == nil or tonumber(s.e) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    if ARGV[6] == '1' and s.m == ARGV[8] and s.p == ARGV[9] and s.o == ARGV[10] then
      return {2, all[i]}
    end
    live = live + 1
    if tonumber(s.e) > maxe then maxe = tonumber(s.e) end
  end
end
if live >= tonumber(ARGV[4]) then return {0} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[1], maxe + tonumber(ARGV[5]))
return {1}
`)

// transitionScript moves a contract between states when it is in one of
// the allowed ones. Returns {1, previous} on a change, {0, current}
// otherwise ({0, ”} when the contract does not exist).
var transitionScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'state')
if not st then return {0, ''} end
for s in string.gmatch(ARGV[1], '[^,]+') do
  if s == st then
    redis.call('HSET', KEYS[1], 'state', ARGV[2], 'reason', ARGV[3], 'actor', ARGV[4], 'changed', ARGV[5], 'event', ARGV[6])
    return {1, st}
  end
end
return {0, st}
`)

// clearEventScript clears the pending event once it is audited.
var clearEventScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'event') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'event', '')
  return 1
end
return 0
`)

// create stores a new contract: the agent index first (the cap and the
// deduplication are decided there), then the contract, then the global
// index. It returns the ID of an existing duplicate when dedupe is set and
// one exists. The writes are acknowledged before the caller answers, so
// with appendfsync always an acknowledged contract survives a Redis crash.
func (s *Server) create(ctx context.Context, c *contract, dedupe bool) (dup string, err error) {
	r := c.rec
	sum, _ := json.Marshal(summary{Method: r.Method, Path: r.Path, SessionID: r.SessionID, Origin: r.Origin, IssuedMs: r.IssuedMs, ExpiresMs: r.ExpiresMs})
	retention := s.opts.Contracts.TombstoneRetention.Milliseconds()
	flag := "0"
	if dedupe {
		flag = "1"
	}
	res, err := indexAddScript.Run(ctx, s.rdb, []string{rediskeys.AgentContracts(r.AgentID)},
		r.SynthesisID, sum, s.now().UnixMilli(), s.opts.Contracts.MaxPerAgent, retention, flag, r.ExpiresMs, r.Method, r.Path, r.Origin).Slice()
	if err != nil {
		return "", fmt.Errorf("contract index: %w", err)
	}
	switch code, _ := res[0].(int64); code {
	case 0:
		return "", errContractLimit
	case 2:
		id, _ := res[1].(string)
		return id, nil
	}
	recJSON, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	key := rediskeys.Contract(r.SynthesisID)
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "rec", recJSON, "state", c.state, "reason", c.reason, "actor", c.actor, "event", c.event, "changed", strconv.FormatInt(c.changedMs, 10))
		p.PExpireAt(ctx, key, time.UnixMilli(r.ExpiresMs+retention))
		return nil
	})
	if err == nil {
		err = s.rdb.ZAdd(ctx, rediskeys.ContractIndex, redis.Z{Score: float64(r.ExpiresMs), Member: r.SynthesisID}).Err()
	}
	if err != nil {
		s.forget(context.WithoutCancel(ctx), &r, true)
		return "", fmt.Errorf("contract store: %w", err)
	}
	return "", nil
}

// load reads a contract; nil when it does not exist.
func (s *Server) load(ctx context.Context, id string) (*contract, error) {
	m, err := s.rdb.HGetAll(ctx, rediskeys.Contract(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("contract load: %w", err)
	}
	if len(m) == 0 || m["rec"] == "" {
		return nil, nil
	}
	c := &contract{state: m["state"], reason: m["reason"], actor: m["actor"], event: m["event"], unpromote: m[fieldUnpromote] != ""}
	c.changedMs, _ = strconv.ParseInt(m["changed"], 10, 64)
	if err := json.Unmarshal([]byte(m["rec"]), &c.rec); err != nil {
		return nil, fmt.Errorf("contract %s: record: %w", id, err)
	}
	return c, nil
}

// transition changes a contract's state when it is in one of from.
func (s *Server) transition(ctx context.Context, id string, from []string, to, reason, actor, event string) (changed bool, prev string, err error) {
	res, err := transitionScript.Run(ctx, s.rdb, []string{rediskeys.Contract(id)},
		strings.Join(from, ","), to, reason, actor, s.now().UnixMilli(), event).Slice()
	if err != nil {
		return false, "", fmt.Errorf("contract transition: %w", err)
	}
	code, _ := res[0].(int64)
	prev, _ = res[1].(string)
	return code == 1, prev, nil
}

func (s *Server) clearEvent(ctx context.Context, id, event string) error {
	return clearEventScript.Run(ctx, s.rdb, []string{rediskeys.Contract(id)}, event).Err()
}

// forget removes a contract from both indexes, and the contract itself
// when del is set (a stale-sweep eviction, or a contract that could not
// be acknowledged).
func (s *Server) forget(ctx context.Context, r *record, del bool) {
	errs := []error{
		s.rdb.HDel(ctx, rediskeys.AgentContracts(r.AgentID), r.SynthesisID).Err(),
		s.rdb.ZRem(ctx, rediskeys.ContractIndex, r.SynthesisID).Err(),
	}
	if del {
		errs = append(errs, s.rdb.Del(ctx, rediskeys.Contract(r.SynthesisID)).Err())
	}
	if err := errors.Join(errs...); err != nil {
		s.log.WarnContext(ctx, "contract index cleanup failed; readers verify every entry", "synthesis_id", r.SynthesisID, "error", err)
	}
}

// agentIndex returns an agent's live index entries.
func (s *Server) agentIndex(ctx context.Context, agentID string) (map[string]summary, error) {
	m, err := s.rdb.HGetAll(ctx, rediskeys.AgentContracts(agentID)).Result()
	if err != nil {
		return nil, fmt.Errorf("contract index: %w", err)
	}
	now := s.now().UnixMilli()
	out := make(map[string]summary, len(m))
	for id, raw := range m {
		var sm summary
		if json.Unmarshal([]byte(raw), &sm) == nil && sm.ExpiresMs > now {
			out[id] = sm
		}
	}
	return out, nil
}

// loadMany reads several contracts with one pipeline (split per slot by
// a cluster client); missing ones are left out.
func (s *Server) loadMany(ctx context.Context, ids []string) ([]*contract, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, rediskeys.Contract(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("contract load: %w", err)
	}
	out := make([]*contract, 0, len(ids))
	for i, cmd := range cmds {
		m := cmd.Val()
		if len(m) == 0 || m["rec"] == "" {
			continue
		}
		c := &contract{state: m["state"], reason: m["reason"], actor: m["actor"], event: m["event"], unpromote: m[fieldUnpromote] != ""}
		c.changedMs, _ = strconv.ParseInt(m["changed"], 10, 64)
		if json.Unmarshal([]byte(m["rec"]), &c.rec) != nil {
			s.log.WarnContext(ctx, "unreadable contract skipped", "synthesis_id", ids[i])
			continue
		}
		out = append(out, c)
	}
	return out, nil
}
