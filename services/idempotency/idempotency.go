// Package idempotency is the one definition of the idempotency slot protocol
// (docs/decisions.md#D-idempotency-key, #D-idempotency-in-flight and
// #D-idempotency-replay): how an (Agent-ID, Idempotency-Key) slot is claimed,
// completed and released in Redis.
//
// A slot is the hash rediskeys.IdempotencySlot(agentID, key) with the fields
// rediskeys.Slot*. Its life:
//
//	absent  --claim-->  {state: pending, token, fingerprint}, PEXPIRE lease
//	pending --complete(token)-->  {state: done, response}, PEXPIRE ttl
//	pending --release(token)-->   absent
//	pending --unknown(token)-->   {state: unknown}, PEXPIRE hold
//	absent  --unknown(token, fp)--> {state: unknown, token, fingerprint}, PEXPIRE hold
//	pending --lease lapses-->     absent (the claimer died; a retry runs again)
//	unknown --resolve release-->  absent (an operator allows a re-run)
//	unknown --resolve applied-->  {state: applied}, PEXPIRE ttl
//	unknown --hold lapses-->      absent
//
// Only the holder of the token may complete, release or mark the slot
// unknown, so a claimer whose lease lapsed and whose slot was re-claimed
// cannot overwrite the newer run.
//
// "unknown" is the state of a request whose handler ran, or may have run,
// and whose outcome was not stored (its audit append failed, it timed out):
// running it again could do its effect twice, so a retry is refused until
// an operator resolves the slot or the hold lapses. Only the holder of the
// token can still complete it (a late audit append that did land), which
// turns it into a normal done slot.
//
// The slot shares the agent's hash tag, so a Lua script that appends to the
// agent's audit chain can complete the slot in the same script (one round
// trip, same Redis Cluster slot). Such scripts embed CompleteLuaFunction and
// call it; policysvc embeds ClaimLuaFunction in its rate-limit script the same
// way. Go callers without a script of their own use Claim, Complete and
// Release.
package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Outcome is the result of a claim attempt.
type Outcome int

// Outcomes of a claim, numbered as ClaimLuaFunction returns them.
const (
	// Claimed: the slot was free and now belongs to the caller's token; run
	// the request and complete or release the slot.
	Claimed Outcome = 1
	// Replay: the slot holds a completed response for the same request.
	Replay Outcome = 2
	// Reused: the key was first used with a different request fingerprint
	// (409 idempotency-key-reused).
	Reused Outcome = 3
	// InFlight: the same request is running under another claim.
	InFlight Outcome = 4
	// Unknown: the same request ran, or may have run, and its outcome
	// was not stored (409 idempotency-outcome-unknown).
	Unknown Outcome = 5
	// Applied: the same request's outcome was unknown and an operator
	// confirmed that it took effect; its response is not available
	// (409 idempotency-outcome-applied).
	Applied Outcome = 6
)

// Slot states beyond rediskeys.SlotPending and rediskeys.SlotDone.
const (
	// StateUnknown marks a request whose outcome is not known.
	StateUnknown = "unknown"
	// StateApplied marks an unknown outcome an operator said took effect.
	StateApplied = "applied"
)

func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case Replay:
		return "replay"
	case Reused:
		return "reused"
	case InFlight:
		return "in-flight"
	case Unknown:
		return "outcome-unknown"
	case Applied:
		return "outcome-applied"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Defaults of the slot protocol (docs/decisions.md#D-idempotency-replay:
// TTL 24 h, configurable).
const (
	DefaultTTL   = 24 * time.Hour
	DefaultLease = 30 * time.Second
)

// MaxKeyLen bounds the Idempotency-Key value a caller may send
// (docs/decisions.md#D-idempotency-key: 1-255 printable ASCII).
const MaxKeyLen = 255

// ValidKey reports whether key is 1-255 printable ASCII characters
// (space through tilde; the header parser has trimmed the ends).
func ValidKey(key string) bool {
	return len(key) > 0 && len(key) <= MaxKeyLen && agtp.PrintableASCII(key)
}

// ValidFingerprint reports whether fp is a SHA-256 in 64 lowercase hex.
func ValidFingerprint(fp string) bool {
	if len(fp) != 64 {
		return false
	}
	for i := 0; i < len(fp); i++ {
		c := fp[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewToken returns a fresh claim token: 128 random bits in hex.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// lua substitutes the rediskeys field and state names into a script
// template, so the scripts cannot drift from the Go constants.
func lua(s string) string {
	return strings.NewReplacer(
		"$STATE", "'"+rediskeys.SlotState+"'",
		"$TOKEN", "'"+rediskeys.SlotToken+"'",
		"$FINGERPRINT", "'"+rediskeys.SlotFingerprint+"'",
		"$RESPONSE", "'"+rediskeys.SlotResponse+"'",
		"$PENDING", "'"+rediskeys.SlotPending+"'",
		"$DONE", "'"+rediskeys.SlotDone+"'",
		"$UNKNOWN", "'"+StateUnknown+"'",
		"$APPLIED", "'"+StateApplied+"'",
	).Replace(s)
}

// ClaimLuaFunction defines the Lua function
//
//	agtp_idem_claim(slot, fingerprint, token, lease_ms, rerun) -> {outcome[, response]}
//
// where outcome is an Outcome number and response (a string) is present
// only for Replay. rerun is '1' for a request to an idempotent endpoint,
// which may run again over an unknown outcome: it claims such a slot
// instead of being refused. Embed it at the top of a script whose KEYS
// include slot.
//
// A claim the same token already holds is claimed again: when a script's
// reply is lost, the Redis client sends the script once more, and the
// re-run must not find its own claim in flight (which would refuse the
// request and leave the slot pending for the lease).
var ClaimLuaFunction = lua(`
local function agtp_idem_claim(slot, fp, token, lease_ms, rerun)
  local v = redis.call('HMGET', slot, $STATE, $FINGERPRINT, $RESPONSE, $TOKEN)
  if v[1] == $PENDING and v[4] == token and v[2] == fp then return {1} end
  if not v[1] then
    redis.call('HSET', slot, $STATE, $PENDING, $TOKEN, token, $FINGERPRINT, fp)
    redis.call('PEXPIRE', slot, lease_ms)
    return {1}
  end
  if v[2] ~= fp then return {3} end
  if v[1] == $DONE then return {2, v[3] or ''} end
  if v[1] == $UNKNOWN then
    if rerun ~= '1' then return {5} end
    redis.call('HSET', slot, $STATE, $PENDING, $TOKEN, token)
    redis.call('PEXPIRE', slot, lease_ms)
    return {1}
  end
  if v[1] == $APPLIED then return {6} end
  return {4}
end
`)

// CompleteLuaFunction defines the Lua function
//
//	agtp_idem_complete(slot, token, response, ttl_ms) -> 1 | 0
//
// which stores response and marks the slot done if token still holds the
// claim (0 otherwise: released, lapsed or re-claimed). auditsvc embeds it in
// its chain-append script and calls it with the claim the front door got
// from Authorize; an empty slot argument is a no-op, so the append script can
// call it unconditionally.
var CompleteLuaFunction = lua(`
local function agtp_idem_complete(slot, token, response, ttl_ms)
  if slot == nil or slot == '' then return 0 end
  if redis.call('HGET', slot, $TOKEN) ~= token then return 0 end
  redis.call('HSET', slot, $STATE, $DONE, $RESPONSE, response)
  redis.call('PEXPIRE', slot, ttl_ms)
  return 1
end
`)

// ReleaseLuaFunction defines the Lua function
//
//	agtp_idem_release(slot, token) -> 1 | 0
//
// which deletes the slot if token still holds it and it is still pending.
var ReleaseLuaFunction = lua(`
local function agtp_idem_release(slot, token)
  local v = redis.call('HMGET', slot, $STATE, $TOKEN)
  if v[2] ~= token or v[1] ~= $PENDING then return 0 end
  redis.call('DEL', slot)
  return 1
end
`)

// UnknownLuaFunction defines the Lua function
//
//	agtp_idem_unknown(slot, token, hold_ms, fingerprint) -> 1 | 0
//
// which marks a pending claim held by token as having an unknown outcome
// and keeps it hold_ms, so that retries are refused rather than run again.
// A slot that is no longer pending (a late completion stored the outcome)
// or no longer the token's is left alone (0). An absent slot is created
// as unknown: the claim was lost (its lease lapsed while the request ran,
// or a Redis primary failed over before its replica had it), and the
// request it guarded ran. It is created with fingerprint, the request the
// claim was made for, so that a retry of that request is refused as an
// unknown outcome (Unknown) and another request under the key still as
// Reused; an empty fingerprint (a caller that does not know it) leaves
// the slot without one, and every retry is then Reused.
var UnknownLuaFunction = lua(`
local function agtp_idem_unknown(slot, token, hold_ms, fp)
  local v = redis.call('HMGET', slot, $STATE, $TOKEN)
  if not v[1] then
    redis.call('HSET', slot, $STATE, $UNKNOWN, $TOKEN, token)
    if fp and fp ~= '' then redis.call('HSET', slot, $FINGERPRINT, fp) end
    redis.call('PEXPIRE', slot, hold_ms)
    return 1
  end
  if v[2] ~= token or v[1] ~= $PENDING then return 0 end
  redis.call('HSET', slot, $STATE, $UNKNOWN)
  redis.call('PEXPIRE', slot, hold_ms)
  return 1
end
`)

// resolveScript settles an unknown outcome for an operator. KEYS[1] the
// slot; ARGV[1] the resolution (release or applied); ARGV[2] how long an
// applied slot is kept (ms). It returns {changed, previous state}; the
// state is empty for an absent slot. release also undoes an earlier
// applied.
var resolveScript = redis.NewScript(lua(`
local st = redis.call('HGET', KEYS[1], $STATE)
if not st then return {0, ''} end
if ARGV[1] == 'release' and (st == $UNKNOWN or st == $APPLIED) then
  redis.call('DEL', KEYS[1])
  return {1, st}
end
if ARGV[1] == 'applied' and st == $UNKNOWN then
  redis.call('HSET', KEYS[1], $STATE, $APPLIED)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return {1, st}
end
return {0, st}
`))

var (
	claimScript    = redis.NewScript(ClaimLuaFunction + `return agtp_idem_claim(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4])`)
	completeScript = redis.NewScript(CompleteLuaFunction + `return agtp_idem_complete(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))`)
	releaseScript  = redis.NewScript(ReleaseLuaFunction + `return agtp_idem_release(KEYS[1], ARGV[1])`)
	unknownScript  = redis.NewScript(UnknownLuaFunction + `return agtp_idem_unknown(KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3])`)
)

// Result is the outcome of a claim; Response is set for Replay.
type Result struct {
	Outcome  Outcome
	Response []byte
}

// ParseResult reads the reply of agtp_idem_claim.
func ParseResult(v any) (Result, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return Result{}, fmt.Errorf("idempotency: unexpected claim reply %T", v)
	}
	n, ok := arr[0].(int64)
	if !ok || n < int64(Claimed) || n > int64(Applied) {
		return Result{}, fmt.Errorf("idempotency: unexpected claim outcome %v", arr[0])
	}
	r := Result{Outcome: Outcome(n)}
	if r.Outcome == Replay {
		if len(arr) < 2 {
			return Result{}, errors.New("idempotency: replay without a response")
		}
		s, ok := arr[1].(string)
		if !ok {
			return Result{}, fmt.Errorf("idempotency: unexpected response type %T", arr[1])
		}
		r.Response = []byte(s)
	}
	return r, nil
}

// Claim tries to claim slot for a request with fingerprint under token; a
// fresh claim stays pending for lease. An unknown outcome refuses it
// (Unknown); ClaimRerun is the claim of an idempotent endpoint's request.
func Claim(ctx context.Context, rdb redis.Scripter, slot, fingerprint, token string, lease time.Duration) (Result, error) {
	return claim(ctx, rdb, slot, fingerprint, token, lease, false)
}

// ClaimRerun is Claim for a request that may run again over an unknown
// outcome (an idempotent endpoint's): it claims such a slot.
func ClaimRerun(ctx context.Context, rdb redis.Scripter, slot, fingerprint, token string, lease time.Duration) (Result, error) {
	return claim(ctx, rdb, slot, fingerprint, token, lease, true)
}

func claim(ctx context.Context, rdb redis.Scripter, slot, fingerprint, token string, lease time.Duration, rerun bool) (Result, error) {
	v, err := claimScript.Run(ctx, rdb, []string{slot}, fingerprint, token, lease.Milliseconds(), RerunArg(rerun)).Result()
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: claim: %w", err)
	}
	return ParseResult(v)
}

// RerunArg is the rerun argument of agtp_idem_claim.
func RerunArg(rerun bool) string {
	if rerun {
		return "1"
	}
	return "0"
}

// Complete stores response under the claim and keeps it for ttl. It reports
// false if token no longer holds the slot (released, lapsed or re-claimed);
// the response is then not stored.
func Complete(ctx context.Context, rdb redis.Scripter, slot, token string, response []byte, ttl time.Duration) (bool, error) {
	n, err := completeScript.Run(ctx, rdb, []string{slot}, token, response, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("idempotency: complete: %w", err)
	}
	return n == 1, nil
}

// Release drops a pending claim held by token, so that a retry runs again.
// It reports false if token no longer holds a pending claim.
func Release(ctx context.Context, rdb redis.Scripter, slot, token string) (bool, error) {
	n, err := releaseScript.Run(ctx, rdb, []string{slot}, token).Int()
	if err != nil {
		return false, fmt.Errorf("idempotency: release: %w", err)
	}
	return n == 1, nil
}

// MarkUnknown records that the request holding the claim ran, or may have
// run, and that its outcome was not stored: retries with the same request
// are refused (Unknown) for hold, or until an operator resolves the slot.
// fingerprint is the claimed request's: when the claim vanished before it
// was marked (its lease lapsed while the request ran), the slot is created
// again as unknown with it, so that the retry of the same request is still
// told Unknown (and another request Reused). It reports false if the slot
// is no longer a pending claim of token (re-claimed by another request, or
// completed after all).
func MarkUnknown(ctx context.Context, rdb redis.Scripter, slot, token, fingerprint string, hold time.Duration) (bool, error) {
	n, err := unknownScript.Run(ctx, rdb, []string{slot}, token, max(hold.Milliseconds(), 1), fingerprint).Int()
	if err != nil {
		return false, fmt.Errorf("idempotency: mark unknown: %w", err)
	}
	return n == 1, nil
}

// Resolution is an operator's answer to an unknown outcome.
type Resolution string

// Resolutions.
const (
	// ResolveRelease drops the slot, so a retry runs again (the operator
	// found the request had no effect, or accepts a second one). It also
	// undoes an earlier ResolveApplied.
	ResolveRelease Resolution = "release"
	// ResolveApplied records that the request took effect: retries keep
	// being refused (Applied) for the outcome TTL, without a response.
	ResolveApplied Resolution = "applied"
)

// Resolve applies an operator's resolution to slot. It returns the state
// the slot was in ("" when absent) and whether the resolution changed it;
// a slot in another state (pending, done) is left alone.
func Resolve(ctx context.Context, rdb redis.Scripter, slot string, r Resolution, ttl time.Duration) (previous string, changed bool, err error) {
	if r != ResolveRelease && r != ResolveApplied {
		return "", false, fmt.Errorf("idempotency: unknown resolution %q", r)
	}
	v, err := resolveScript.Run(ctx, rdb, []string{slot}, string(r), max(ttl.Milliseconds(), 1)).Slice()
	if err != nil {
		return "", false, fmt.Errorf("idempotency: resolve: %w", err)
	}
	if len(v) != 2 {
		return "", false, fmt.Errorf("idempotency: unexpected resolve reply %v", v)
	}
	n, _ := v[0].(int64)
	previous, _ = v[1].(string)
	return previous, n == 1, nil
}

// WaitOptions bound how long a duplicate waits for the first request.
type WaitOptions struct {
	// MaxWait is the longest a duplicate waits; 0 means do not wait.
	MaxWait time.Duration
	// FirstPoll and MaxPoll bound the polling interval, which doubles from
	// FirstPoll up to MaxPoll.
	FirstPoll, MaxPoll time.Duration
	// Lease is the lease of a claim this waiter takes if the first request
	// released or lost its claim.
	Lease time.Duration
	// Rerun lets this waiter claim the slot over an unknown outcome (an
	// idempotent endpoint's request) instead of reporting Unknown.
	Rerun bool
}

// Wait polls slot until the in-flight request with fingerprint completes
// (Replay), its claim disappears and this caller claims the slot with token
// (Claimed), another request takes it (Reused), its outcome is marked
// unknown (Unknown, or Claimed with Rerun) or MaxWait passes (InFlight).
//
// Polling rather than pub/sub keeps completion a plain hash write, which the
// audit append script can do without knowing who waits; a duplicate is rare,
// and each poll is one HMGET on the agent's shard.
func Wait(ctx context.Context, rdb redis.Cmdable, slot, fingerprint, token string, o WaitOptions) (Result, error) {
	if o.MaxWait <= 0 {
		return Result{Outcome: InFlight}, nil
	}
	if o.FirstPoll <= 0 {
		o.FirstPoll = 2 * time.Millisecond
	}
	if o.MaxPoll < o.FirstPoll {
		o.MaxPoll = 50 * time.Millisecond
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	deadline := time.Now().Add(o.MaxWait)
	interval := o.FirstPoll
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-timer.C:
		}
		v, err := rdb.HMGet(ctx, slot, rediskeys.SlotState, rediskeys.SlotFingerprint, rediskeys.SlotResponse).Result()
		if err != nil {
			return Result{}, fmt.Errorf("idempotency: wait: %w", err)
		}
		state, _ := v[0].(string)
		fp, _ := v[1].(string)
		switch {
		case state == "", state == StateUnknown && fp == fingerprint && o.Rerun:
			// The first request released its claim or its lease lapsed
			// (or an idempotent request may run over its unknown
			// outcome): this duplicate may run now.
			r, err := claim(ctx, rdb, slot, fingerprint, token, o.Lease, o.Rerun)
			if err != nil || r.Outcome != InFlight {
				return r, err
			}
		case fp != fingerprint:
			return Result{Outcome: Reused}, nil
		case state == rediskeys.SlotDone:
			resp, _ := v[2].(string)
			return Result{Outcome: Replay, Response: []byte(resp)}, nil
		case state == StateUnknown:
			return Result{Outcome: Unknown}, nil
		case state == StateApplied:
			return Result{Outcome: Applied}, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Result{Outcome: InFlight}, nil
		}
		interval = min(interval*2, o.MaxPoll, left)
		timer.Reset(interval)
	}
}
