// Package taskrun keeps, per (Agent-ID, Task-ID), the request an agent
// last sent under that Task-ID and how it ended, so that a RETRY naming
// the Task-ID (standard methods §8.5) can run it again without repeating
// a side effect that already happened.
//
// An entry is one Redis hash under the agent's hash tag
// (rediskeys.TaskRun). It is written when policysvc decides the request
// (Record), its status is set when the handler answered (Complete), and a
// RETRY checks and counts an attempt in one script (Retry).
package taskrun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Bounds on an entry: a larger request is not indexed.
const (
	MaxBody    = 64 << 10
	MaxTaskID  = 256
	MaxTarget  = 8 << 10
	MaxKey     = 256
	DefaultTTL = 24 * time.Hour
	// MaxAttempts bounds a RETRY's max_attempts; MaxDelay its delay.
	MaxAttempts = 1000
	MaxDelay    = 24 * time.Hour
)

// Run is one indexed request.
type Run struct {
	TaskID         string
	Method         string
	Target         string
	Body           []byte
	ContentType    string
	IdempotencyKey string
	Idempotent     bool
}

// Validate reports why a run cannot be indexed.
func (r *Run) Validate() error {
	switch {
	case r.TaskID == "" || len(r.TaskID) > MaxTaskID:
		return fmt.Errorf("task_id must be 1-%d bytes", MaxTaskID)
	case r.Method == "" || len(r.Method) > 32:
		return errors.New("method must be 1-32 bytes")
	case r.Target == "" || len(r.Target) > MaxTarget || r.Target[0] != '/':
		return fmt.Errorf("target must be a path of at most %d bytes", MaxTarget)
	case len(r.Body) > MaxBody:
		return fmt.Errorf("body is larger than %d bytes", MaxBody)
	case len(r.ContentType) > 256:
		return errors.New("content_type is too long")
	case len(r.IdempotencyKey) > MaxKey:
		return errors.New("idempotency_key is too long")
	}
	return nil
}

// Store is the task-run index.
type Store struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// New returns a store whose entries live ttl after their last write
// (DefaultTTL when ttl <= 0).
func New(rdb redis.UniversalClient, ttl time.Duration) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Store{rdb: rdb, ttl: ttl}
}

// recordScript writes an entry, unless the Task-ID's entry must stand: a
// non-idempotent request that succeeded (a RETRY of it would repeat its
// effect), or one still without an outcome (it may be running, and its
// completion must still land). A later request under the same Task-ID,
// refused or allowed, then leaves the index as it is. A re-sent script (a
// lost reply) finds its own entry by the token and leaves it.
// KEYS[1] the entry; ARGV: method, target, body, Content-Type,
// Idempotency-Key, idempotent ('1'/'0'), status, token, start ms, ttl ms.
// It returns 1 when the entry is the request's, 0 when the older stands.
var recordScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'i', 's', 'tok')
if ARGV[8] ~= '' and v[3] == ARGV[8] then return 1 end
if v[1] == '0' then
  local status = tonumber(v[2]) or 0
  if status == 0 or ` + succeededLua("status") + ` then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 't', ARGV[2], 'b', ARGV[3], 'ct', ARGV[4],
  'k', ARGV[5], 'i', ARGV[6], 's', ARGV[7], 'tok', ARGV[8], 'n', 1, 'at', ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[10])
return 1`)

// succeededLua is the Lua condition that status is a success a RETRY must
// not repeat: 2xx up to 260. The AGTP-specific 261-263 are not successes:
// they say the request is waiting or was refused (262 scope-required).
func succeededLua(status string) string {
	return "(" + status + " >= 200 and " + status + " <= 260)"
}

// Record indexes a request of agentID, replacing the Task-ID's previous
// entry (RETRY re-runs a task's latest request), except one that must
// stand (recordScript): then it reports false, and the request is not
// indexed. status is the final status when it is already known (a policy
// refusal), else 0. token is what Complete must present.
func (s *Store) Record(ctx context.Context, agentID string, r *Run, status int, token string, now time.Time) (bool, error) {
	idem := "0"
	if r.Idempotent {
		idem = "1"
	}
	n, err := recordScript.Run(ctx, s.rdb, []string{rediskeys.TaskRun(agentID, r.TaskID)},
		r.Method, r.Target, r.Body, r.ContentType, r.IdempotencyKey, idem, status, token,
		now.UnixMilli(), max(s.ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("record task run: %w", err)
	}
	return n == 1, nil
}

// completeScript sets the status when the entry is still the one the
// token was issued for.
var completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[2])
return 1`)

// Complete records the status the request ended with. It reports false
// when the entry was replaced or has expired.
func (s *Store) Complete(ctx context.Context, agentID, taskID, token string, status int) (bool, error) {
	n, err := completeScript.Run(ctx, s.rdb, []string{rediskeys.TaskRun(agentID, taskID)}, token, status).Int()
	if err != nil {
		return false, fmt.Errorf("complete task run: %w", err)
	}
	return n == 1, nil
}

// Verdicts of Retry.
const (
	Allowed          = "allowed"
	NotFound         = "task-not-found"
	AlreadySucceeded = "task-already-succeeded"
	OutcomeUnknown   = "task-outcome-unknown"
	AttemptsExceeded = "max-attempts-exhausted"
	Delayed          = "retry-delayed"
)

// Decision is what Retry decided.
type Decision struct {
	Verdict string
	// Run is the request to re-run (Allowed).
	Run *Run
	// Attempt is this RETRY's attempt number (Allowed) or the attempts
	// made so far (AttemptsExceeded).
	Attempt int
	// PreviousStatus is the status the last attempt ended with; 0 when
	// unknown.
	PreviousStatus int
	// Wait is how long until the delay has passed (Delayed).
	Wait time.Duration
}

// retryScript decides a RETRY and counts the attempt, atomically, so
// that concurrent RETRYs cannot both pass max_attempts.
//
// A non-idempotent original that succeeded (succeededLua) is never re-run:
// its side effect happened. One whose outcome was never recorded (still
// running, or the front door died) is re-run only under its
// Idempotency-Key, which detects a partially processed original.
var retryScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'm', 't', 'b', 'ct', 'k', 'i', 's', 'n', 'at')
if not v[1] then return {'` + NotFound + `'} end
local status = tonumber(v[7]) or 0
local n = tonumber(v[8]) or 1
if v[6] ~= '1' then
  if ` + succeededLua("status") + ` then return {'` + AlreadySucceeded + `', status, n} end
  if status == 0 and v[5] == '' then return {'` + OutcomeUnknown + `', status, n} end
end
local max = tonumber(ARGV[1])
if max > 0 and n + 1 > max then return {'` + AttemptsExceeded + `', status, n} end
local now = tonumber(ARGV[3])
local due = (tonumber(v[9]) or 0) + tonumber(ARGV[2])
if now < due then return {'` + Delayed + `', status, n, due - now} end
redis.call('HSET', KEYS[1], 'n', n + 1, 'at', now)
return {'` + Allowed + `', status, n + 1, 0, v[1], v[2], v[3], v[4], v[5], v[6]}`)

// Retry decides a RETRY of agentID's task taskID. maxAttempts (total,
// including the original; 0 for none) and delay (since the last attempt
// started) are the RETRY's parameters.
func (s *Store) Retry(ctx context.Context, agentID, taskID string, maxAttempts int, delay time.Duration, now time.Time) (*Decision, error) {
	if taskID == "" || len(taskID) > MaxTaskID {
		return &Decision{Verdict: NotFound}, nil
	}
	maxAttempts = min(max(maxAttempts, 0), MaxAttempts)
	delay = min(max(delay, 0), MaxDelay)
	res, err := retryScript.Run(ctx, s.rdb, []string{rediskeys.TaskRun(agentID, taskID)},
		maxAttempts, delay.Milliseconds(), now.UnixMilli()).Slice()
	if err != nil {
		return nil, fmt.Errorf("retry task run: %w", err)
	}
	d := &Decision{Verdict: asString(res[0])}
	if len(res) >= 3 {
		d.PreviousStatus, d.Attempt = asInt(res[1]), asInt(res[2])
	}
	switch d.Verdict {
	case Delayed:
		if len(res) >= 4 {
			d.Wait = time.Duration(asInt(res[3])) * time.Millisecond
		}
	case Allowed:
		if len(res) < 10 {
			return nil, errors.New("retry task run: short script reply")
		}
		d.Run = &Run{
			TaskID: taskID, Method: asString(res[4]), Target: asString(res[5]), Body: []byte(asString(res[6])),
			ContentType: asString(res[7]), IdempotencyKey: asString(res[8]), Idempotent: asString(res[9]) == "1",
		}
		if len(d.Run.Body) == 0 {
			d.Run.Body = nil
		}
	}
	return d, nil
}

func asString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []byte:
		return string(t)
	}
	return ""
}

func asInt(v any) int {
	switch t := v.(type) {
	case int64:
		return int(t)
	case string:
		n, _ := strconv.Atoi(t)
		return n
	}
	return 0
}
