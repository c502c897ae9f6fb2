// Package ratelimit spends from rate limits kept in Redis, with the generic
// cell rate algorithm (GCRA), and can claim an idempotency slot in the same
// atomic script.
//
// A bucket is one Redis string: its theoretical arrival time (TAT) in
// microseconds of the Redis server's clock. Reading the clock inside the
// script (TIME) makes every replica of policysvc agree on "now", so limits
// hold across processes without synchronised clocks.
//
// One gate script call evaluates several buckets atomically: if any would be
// exceeded, none is spent; otherwise all are, and then the optional
// idempotency claim runs. All keys of one call must share a Redis Cluster
// hash slot. Buckets in different slots (per endpoint, per IP, per
// principal) go into separate calls of one pipeline, so a decision still
// costs one round trip; when one of those calls refuses, the caller refunds
// the calls that spent (Refund), so that a refused request consumes no
// budget anywhere.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/idempotency"
)

// Rate is Limit requests per Period, of which up to Burst may arrive at once.
type Rate struct {
	Limit  int64         `json:"limit"`
	Period time.Duration `json:"period"`
	// Burst is the bucket size; 0 means Limit.
	Burst int64 `json:"burst,omitempty"`
}

// Enabled reports whether the rate limits anything.
func (r Rate) Enabled() bool { return r.Limit > 0 }

// Validate checks a rate; the zero Rate (disabled) is valid.
func (r Rate) Validate() error {
	switch {
	case r.Limit < 0 || r.Burst < 0:
		return errors.New("limit and burst must not be negative")
	case r.Limit == 0:
		return nil
	case r.Period < time.Millisecond:
		return errors.New("period must be at least 1ms")
	case r.Period > 24*time.Hour:
		return errors.New("period must be at most 24h")
	case float64(r.Period.Microseconds())/float64(r.Limit) < 1:
		return errors.New("limit must leave at least 1µs between requests")
	}
	return nil
}

// BurstSize is the effective bucket size.
func (r Rate) BurstSize() int64 {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// interval is the emission interval in microseconds.
func (r Rate) interval() float64 {
	return float64(r.Period.Microseconds()) / float64(r.Limit)
}

// Bucket is one limit to spend Cost from.
type Bucket struct {
	Key  string
	Rate Rate
	Cost int64
}

// Claim asks the gate script to claim an idempotency slot once every bucket
// has been spent.
type Claim struct {
	Slot, Fingerprint, Token string
	Lease                    time.Duration
	// Rerun claims a slot whose outcome is unknown instead of refusing:
	// the request is to an idempotent endpoint, which may run again.
	Rerun bool
}

// gcra is the gate script. KEYS: the buckets, then the slot if a claim is
// asked. ARGV: the bucket count, an (interval µs, burst, cost) triple per
// bucket, then fingerprint, token, lease ms and the rerun flag for the
// claim.
//
// Reply: {1, remaining, reset µs, tightest, now µs, claim outcome,
// [response]} when allowed, where tightest is the (1-based) bucket with the
// fewest requests left, remaining -1 and tightest 0 without buckets, now the
// Redis server's time of the spend (a refund of it names it) and claim
// outcome 0 without a claim; or {0, refusing bucket, retry-after µs} when
// refused.
var gcra = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
` + idempotency.ClaimLuaFunction + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local tats = {}
local remaining = -1
local tightest = 0
local reset = 0
for i = 1, n do
  local T = tonumber(ARGV[3*i - 1])
  local burst = tonumber(ARGV[3*i])
  local cost = tonumber(ARGV[3*i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local nt = tat + T * cost
  local allow_at = nt - T * burst
  if allow_at > now then
    return {0, i, math.ceil(allow_at - now)}
  end
  tats[i] = nt
  local rem = math.floor((now - allow_at) / T)
  if remaining < 0 or rem < remaining then remaining = rem; tightest = i end
  if nt - now > reset then reset = nt - now end
end
for i = 1, n do
  redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000) + 1)
end
if #KEYS > n then
  local c = agtp_idem_claim(KEYS[n + 1], ARGV[3*n + 2], ARGV[3*n + 3], tonumber(ARGV[3*n + 4]), ARGV[3*n + 5])
  return {1, remaining, math.ceil(reset), tightest, now, c[1], c[2]}
end
return {1, remaining, math.ceil(reset), tightest, now, 0}
`)

// refund gives back what a gate call spent, once. KEYS: the buckets, then
// (with buckets) the refund's marker, then the slot to release. ARGV: the
// bucket count, the µs to take off each TAT, then (with buckets) the Redis
// time of the spend in µs and the refund window in µs, then the claim token.
//
// A refund is not re-run safe by itself: when its reply is lost, the Redis
// client sends it again, and subtracting twice would give back a request
// that was never refunded (one more passes than the limit allows). So the
// refund names itself (the marker, a fresh key per refund in the buckets'
// hash slot): the first run sets the marker and subtracts, a re-sent run
// finds the marker and does nothing. The marker lives refundWindow; a
// refund that arrives later than refundWindow after its spend is dropped
// (its marker may be gone), which over-counts one request at worst. The
// claim release is re-run safe on its own (only the token's pending claim
// is deleted).
var refund = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
` + idempotency.ReleaseLuaFunction + `
local n = tonumber(ARGV[1])
local k = n
local tok = n + 2
if n > 0 then
  k = n + 1
  tok = n + 4
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local window = tonumber(ARGV[n + 3])
  if now - tonumber(ARGV[n + 2]) <= window and
     redis.call('SET', KEYS[k], '1', 'NX', 'PX', math.ceil(window / 1000)) then
    for i = 1, n do
      local tat = tonumber(redis.call('GET', KEYS[i]))
      if tat then
        redis.call('SET', KEYS[i], string.format('%.0f', tat - tonumber(ARGV[i + 1])), 'KEEPTTL')
      end
    end
  end
end
if #KEYS > k then return agtp_idem_release(KEYS[k + 1], ARGV[tok]) end
return 0
`)

// refundWindow is how long after its spend a refund is applied, and how
// long its marker keeps a re-sent copy from applying it again. A refund
// follows its spend by one round trip; the window covers the Redis
// client's retries of it (go-redis: 3 retries, 3 s read timeouts, by
// default) with room to spare, and bounds the markers a flood of refused
// requests leaves behind.
const refundWindow = 30 * time.Second

// Load caches the scripts on the server (on every shard of a cluster), so
// that the first decisions need no EVAL fallback.
func Load(ctx context.Context, rdb redis.Scripter) error {
	for _, s := range []*redis.Script{gcra, refund} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("ratelimit: load script: %w", err)
		}
	}
	return nil
}

// Result is the outcome of one gate call.
type Result struct {
	Allowed bool
	// Refused is the index of the bucket that refused (when !Allowed).
	Refused int
	// RetryAfter is how long until the refusing bucket has room.
	RetryAfter time.Duration
	// Remaining is the fewest requests left over the buckets, -1 if none;
	// Tightest is the index of that bucket.
	Remaining int64
	Tightest  int
	// Reset is how long until every bucket is full again.
	Reset time.Duration
	// Claimed reports whether a claim was asked and evaluated; Claim holds
	// its outcome.
	Claimed bool
	Claim   idempotency.Result
	// at is the Redis server's time of an allowed spend, in µs.
	at int64
}

// Call is one script call queued in a Batch.
type Call struct {
	script  *redis.Script
	keys    []string
	args    []any
	cmd     *redis.Cmd
	buckets []Bucket
	claim   *Claim
	// Backing arrays for a gate of up to two buckets and a claim, so that
	// a call costs one allocation rather than three; more grows as usual.
	keyBuf [3]string
	argBuf [1 + 3*2 + 4]any
}

// Batch is a set of script calls sent in one pipeline. It holds its first
// calls in its own array: use it by pointer once a call is queued.
type Batch struct {
	calls   []*Call
	callBuf [4]*Call // what a decision queues: its own gate and shared limits
}

func (b *Batch) add(c *Call) {
	if b.calls == nil {
		b.calls = b.callBuf[:0]
	}
	b.calls = append(b.calls, c)
}

// Gate queues a gate call: spend cost from every bucket or none, then claim.
// All keys must share a hash slot.
func (b *Batch) Gate(buckets []Bucket, claim *Claim) *Call {
	c := &Call{script: gcra, buckets: buckets, claim: claim}
	keys := c.keyBuf[:0]
	args := c.argBuf[:0]
	args = append(args, len(buckets))
	for _, bk := range buckets {
		keys = append(keys, bk.Key)
		args = append(args, strconv.FormatFloat(bk.Rate.interval(), 'f', 3, 64), bk.Rate.BurstSize(), max(bk.Cost, 1))
	}
	if claim != nil {
		keys = append(keys, claim.Slot)
		args = append(args, claim.Fingerprint, claim.Token, max(claim.Lease.Milliseconds(), 1), idempotency.RerunArg(claim.Rerun))
	}
	c.keys, c.args = keys, args
	b.add(c)
	return c
}

// Refund queues a call that gives back what an allowed gate call spent and
// releases its claim, if it made one. The refund is applied once however
// often the Redis client sends it (the refund script). A call that was not
// executed, failed or was refused spent nothing: nothing is queued.
func (b *Batch) Refund(spent *Call) {
	res, err := spent.Result()
	if err != nil || !res.Allowed {
		return
	}
	keys := make([]string, 0, len(spent.buckets)+2)
	args := make([]any, 0, 4+len(spent.buckets))
	args = append(args, len(spent.buckets))
	for _, bk := range spent.buckets {
		keys = append(keys, bk.Key)
		args = append(args, strconv.FormatFloat(bk.Rate.interval()*float64(max(bk.Cost, 1)), 'f', 3, 64))
	}
	if len(spent.buckets) > 0 {
		keys = append(keys, refundMarker(spent.buckets[0].Key, idempotency.NewToken()))
		args = append(args, res.at, refundWindow.Microseconds())
	}
	if spent.claim != nil {
		keys = append(keys, spent.claim.Slot)
		args = append(args, spent.claim.Token)
	}
	b.add(&Call{script: refund, keys: keys, args: args})
}

// refundMarker is the key that marks a refund as applied: in the hash slot
// of key (the gate's keys share one), named by the refund's id.
func refundMarker(key, id string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + ":refund:" + id // key's hash tag stays the first
		}
	}
	// No hash tag: the whole key is hashed, so tagging it with itself
	// keeps the slot.
	return "{" + key + "}:refund:" + id
}

// Len is the number of queued calls.
func (b *Batch) Len() int { return len(b.calls) }

// Exec sends the queued calls in one round trip (a plain EVALSHA when there
// is one call). A call whose script the server had not cached is retried
// with EVAL; no other call is repeated, since the others already ran.
func (b *Batch) Exec(ctx context.Context, rdb redis.UniversalClient) error {
	send(ctx, rdb, b.calls)
	return b.err()
}

// send runs calls in one round trip (a plain EVALSHA for one call), then
// once more with EVAL those the server had no script for.
func send(ctx context.Context, rdb redis.UniversalClient, calls []*Call) {
	switch len(calls) {
	case 0:
		return
	case 1:
		c := calls[0]
		c.cmd = c.script.EvalSha(ctx, rdb, c.keys, c.args...)
	default:
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range calls {
				c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
			}
			return nil
		})
	}
	for _, c := range calls {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Eval(ctx, rdb, c.keys, c.args...)
		}
	}
}

func (b *Batch) err() error {
	for _, c := range b.calls {
		if err := c.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("ratelimit: %w", err)
		}
	}
	return nil
}

// Coalescer sends the calls of concurrent Batches together: the batches
// that wait while others are in flight share one pipeline (group commit),
// so that under load one round trip and one pair of syscalls on each side
// carry many decisions, as auditsvc's appends do (docs/performance.md,
// "Batched hops"). A lone Batch goes at once, as Exec would send it.
type Coalescer struct {
	rdb   redis.UniversalClient
	group *batchrpc.Group[*queuedBatch]
}

type queuedBatch struct {
	ctx context.Context
	b   *Batch
	err error
}

// NewCoalescer sends on rdb, at most flushers pipelines at once.
func NewCoalescer(rdb redis.UniversalClient, flushers int) *Coalescer {
	c := &Coalescer{rdb: rdb}
	c.group = batchrpc.NewGroup(c.exec, flushers, coalesceMaxCalls)
	return c
}

// coalesceMaxCalls bounds the batches sent in one pipeline.
const coalesceMaxCalls = 256

// Exec is b.Exec, sharing a pipeline with the Batches of other callers.
func (c *Coalescer) Exec(ctx context.Context, b *Batch) error {
	if b.Len() == 0 {
		return nil
	}
	q := &queuedBatch{ctx: ctx, b: b}
	c.group.Do(q)
	return q.err
}

func (c *Coalescer) exec(qs []*queuedBatch) {
	var calls []*Call
	var live []*queuedBatch
	for _, q := range qs {
		if err := q.ctx.Err(); err != nil {
			q.err = err // never sent: nothing was spent
			continue
		}
		live = append(live, q)
		calls = append(calls, q.b.calls...)
	}
	if len(live) == 0 {
		return
	}
	ctx := live[0].ctx
	if len(live) > 1 {
		// Shared: one caller's cancellation must not fail the others'
		// calls, so the pipeline lasts until the latest deadline.
		var cancel context.CancelFunc
		ctx, cancel = sharedContext(live)
		defer cancel()
	}
	send(ctx, c.rdb, calls)
	for _, q := range live {
		q.err = q.b.err()
	}
}

// sharedContext keeps the first batch's values, none of the callers'
// cancellation, and the latest of their deadlines (none when one has
// none: the client's own timeouts bound the round trip).
func sharedContext(qs []*queuedBatch) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(qs[0].ctx)
	var latest time.Time
	for _, q := range qs {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(base)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}

// Result reads the outcome of an executed gate call.
func (c *Call) Result() (Result, error) {
	if c.cmd == nil {
		return Result{}, errors.New("ratelimit: call not executed")
	}
	v, err := c.cmd.Result()
	if err != nil {
		return Result{}, fmt.Errorf("ratelimit: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 3 {
		return Result{}, fmt.Errorf("ratelimit: unexpected reply %v", v)
	}
	nums := make([]int64, 3)
	for i := range nums {
		if nums[i], ok = arr[i].(int64); !ok {
			return Result{}, fmt.Errorf("ratelimit: unexpected reply %v", v)
		}
	}
	if nums[0] == 0 {
		return Result{Refused: int(nums[1]) - 1, RetryAfter: time.Duration(nums[2]) * time.Microsecond}, nil
	}
	r := Result{Allowed: true, Remaining: nums[1], Reset: time.Duration(nums[2]) * time.Microsecond}
	if len(arr) < 6 {
		return Result{}, fmt.Errorf("ratelimit: unexpected reply %v", v)
	}
	tightest, _ := arr[3].(int64)
	r.Tightest = int(tightest) - 1
	r.at, _ = arr[4].(int64)
	if n, _ := arr[5].(int64); n != 0 {
		r.Claimed = true
		if r.Claim, err = idempotency.ParseResult(arr[5:]); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// Spend is a single gate call with one bucket, for callers outside a
// decision (the RCNS negotiation limit).
func Spend(ctx context.Context, rdb redis.UniversalClient, bk Bucket) (Result, error) {
	var b Batch
	c := b.Gate([]Bucket{bk}, nil)
	if err := b.Exec(ctx, rdb); err != nil {
		return Result{}, err
	}
	return c.Result()
}

// Seconds rounds d up to whole seconds, at least 1 for a positive d: a
// client told to wait 0 s would retry at once.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}
