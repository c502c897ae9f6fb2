// Package chain keeps auditsvc's signed streams in Redis: every agent's
// Attribution-Record hash chain, its lifecycle stream, and any other named
// stream of signed records, each appended to atomically across any number
// of auditsvc replicas.
//
// An append signs the record against the chain head this process believes
// is current and hands it to one Lua script that appends it only if the
// head has not moved (appendLua). The head is cached per chain in process,
// so an append costs one round trip; a stale cache costs one re-sign, as the
// script returns the current head on conflict. A chain never forks (the
// script refuses a record signed against anything but the head) and never
// has a gap (the record, the head and the idempotent outcome change in the
// same script).
package chain

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/batchrpc"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// Errors an append or read can return.
var (
	// ErrUnavailable: Redis could not be reached or answered with an
	// error; the record may or may not have been appended.
	ErrUnavailable = errors.New("audit store unavailable")
	// ErrContended: the head kept moving for MaxAttempts attempts.
	ErrContended = errors.New("chain head contended")
	// ErrInvalid: the caller passed a bad chain, stream or payload.
	ErrInvalid = errors.New("invalid append")
	// ErrRequestReused: the request ID was already appended to this stream
	// with other content; nothing was appended.
	ErrRequestReused = errors.New("request ID already used for another record")
)

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// MaxAttempts bounds compare-and-append attempts per record
	// (default 32). Only concurrent writers on other replicas cause
	// retries; in-process writers of one chain are serialized.
	MaxAttempts int
	// CacheChains bounds how many chain heads are cached in process
	// (default 100000). An evicted head is read again on next use.
	CacheChains int
	// MaxBatch bounds the records of one chain sent in one script call,
	// and the chains' script calls sent in one pipeline (default 128).
	MaxBatch int
	// Pipelines bounds the pipelines in flight at once (default 4); more
	// concurrent appends queue and go out together in the next pipeline.
	Pipelines int
	// OnAppend, if set, receives every appended record after the append
	// succeeded (the archive sink's feed). It must not block.
	OnAppend func(attribution.Entry)
	// ObserveAppend, if set, receives how long each append took (from the
	// call to its answer, queueing for a pipeline included) and its error,
	// for metrics. It must not block.
	ObserveAppend func(took time.Duration, err error)
	// ObserveBatch, if set, receives every pipeline of appends sent to
	// Redis: how many records it carried and how long its round trip took.
	// It must not block.
	ObserveBatch func(records int, took time.Duration)
	// Now is the clock for stored_at (default time.Now).
	Now func() time.Time
	// RequestWindow is how long after an append a retry with the same
	// request ID gets the record appended then instead of a new one
	// (default 24 h, the idempotency TTL). Each request ID costs its
	// entry's memory for this long (docs/audit.md); a later retry appends
	// a second record.
	RequestWindow time.Duration
	// ReplicaAcks is how many Redis replicas must have a record before its
	// append is acknowledged (0, the default: do not wait). Every pipeline
	// of appends then ends with WAIT on the connection that ran them; an
	// append whose WAIT answers fewer replicas within ReplicaTimeout fails
	// with ErrUnavailable although the record is in the primary's chain
	// (a retry with the same request ID gets it once it is replicated).
	ReplicaAcks int
	// ReplicaTimeout bounds the WAIT (default 500 ms when ReplicaAcks > 0).
	// It must be below the Redis client's read timeout.
	ReplicaTimeout time.Duration
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	if o.MaxAttempts < 0 || o.CacheChains < 0 || o.MaxBatch < 0 || o.Pipelines < 0 || o.RequestWindow < 0 ||
		o.ReplicaAcks < 0 || o.ReplicaTimeout < 0 {
		return errors.New("chain: negative option")
	}
	if o.ReplicaAcks > 0 && o.ReplicaTimeout > 0 && o.ReplicaTimeout < time.Millisecond {
		// WAIT takes milliseconds, and 0 would wait forever.
		return errors.New("chain: ReplicaTimeout below one millisecond")
	}
	return nil
}

// DefaultReplicaTimeout is Options.ReplicaTimeout's default.
const DefaultReplicaTimeout = 500 * time.Millisecond

func (o Options) withDefaults() Options {
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 32
	}
	if o.CacheChains == 0 {
		o.CacheChains = 100000
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 128
	}
	if o.Pipelines == 0 {
		o.Pipelines = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RequestWindow == 0 {
		o.RequestWindow = DefaultRequestWindow
	}
	if o.ReplicaAcks > 0 && o.ReplicaTimeout == 0 {
		o.ReplicaTimeout = DefaultReplicaTimeout
	}
	return o
}

// Store appends to and reads signed streams.
type Store struct {
	rdb    redis.UniversalClient
	log    *slog.Logger
	opts   Options
	signer atomic.Pointer[attribution.Signer]
	heads  headCache
	batch  batcher
	group  *batchrpc.Group[*appendOp]
	// writerID names this store in chain leases (see appendLua).
	writerID string

	conflicts    atomic.Uint64
	indexErrors  atomic.Uint64
	outcomeMiss  atomic.Uint64
	unknownOutcm atomic.Uint64
	replays      atomic.Uint64
	unreplicated atomic.Uint64
}

// New returns a store. signer signs every record (attribution.NewSigner(nil)
// for alg none).
func New(rdb redis.UniversalClient, signer *attribution.Signer, log *slog.Logger, opts Options) (*Store, error) {
	if rdb == nil || signer == nil {
		return nil, errors.New("chain: nil redis client or signer")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{rdb: rdb, log: log, opts: opts.withDefaults(), writerID: rand.Text()}
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		if s.opts.ReplicaAcks > 0 {
			// WAIT must run on the connection that ran the appends, which
			// only these two clients let the batcher pick.
			return nil, fmt.Errorf("chain: ReplicaAcks needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
		}
	}
	if rt := readTimeout(rdb); s.opts.ReplicaAcks > 0 && rt > 0 && s.opts.ReplicaTimeout >= rt {
		return nil, fmt.Errorf("chain: ReplicaTimeout %v must be below the Redis client's read timeout %v, or the read of WAIT's answer times out first", s.opts.ReplicaTimeout, rt)
	}
	s.signer.Store(signer)
	s.heads.init(s.opts.CacheChains, s.opts.MaxBatch, s.appendJobs)
	_, single := rdb.(*redis.Client)
	s.batch = batcher{rdb: rdb, multiKey: single, acks: s.opts.ReplicaAcks, replTimeout: s.opts.ReplicaTimeout,
		observe: s.opts.ObserveBatch}
	s.group = batchrpc.NewGroup(func(ops []*appendOp) {
		s.batch.exec(ops)
		s.followUp(ops)
	}, s.opts.Pipelines, s.opts.MaxBatch)
	return s, nil
}

// readTimeout is the read timeout of rdb's connections (0: none or unknown).
func readTimeout(rdb redis.UniversalClient) time.Duration {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout
	case *redis.ClusterClient:
		return c.Options().ReadTimeout
	}
	return 0
}

// SetSigner swaps the signing key (rotation). Records signed before the
// swap keep verifying as long as the old public key stays in the key set.
func (s *Store) SetSigner(sg *attribution.Signer) {
	if sg != nil {
		s.signer.Store(sg)
	}
}

// Signer returns the current signer.
func (s *Store) Signer() *attribution.Signer { return s.signer.Load() }

// Stats are counters for metrics.
type Stats struct {
	Conflicts, IndexErrors, OutcomeTokenMismatches, UnknownOutcomes uint64
	// Replays counts requests answered with the record an earlier request
	// with the same request ID appended.
	Replays uint64
	// Unreplicated counts appends (and replays) answered with
	// ErrUnavailable because fewer than ReplicaAcks replicas acknowledged
	// the record within ReplicaTimeout; each record is in the primary's
	// chain.
	Unreplicated uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{s.conflicts.Load(), s.indexErrors.Load(), s.outcomeMiss.Load(), s.unknownOutcm.Load(), s.replays.Load(),
		s.unreplicated.Load()}
}

// ChainName maps an Agent-ID to its chain name: "" (anonymous) is the
// server's own chain.
func ChainName(agentID string) string {
	if agentID == "" {
		return rediskeys.ServerChain
	}
	return agentID
}

// MaxChainID bounds an Agent-ID used as a chain name.
const MaxChainID = 256

// ValidChainID reports whether id can name a chain: printable, no hash-tag
// braces or whitespace, bounded. Canonical Agent-IDs are 64 hex characters.
func ValidChainID(id string) bool {
	if id == "" || len(id) > MaxChainID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// ValidStreamName reports whether name can name a signed stream.
func ValidStreamName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// DefaultRequestWindow is Options.RequestWindow's default.
const DefaultRequestWindow = 24 * time.Hour

// MaxRequestID bounds a request ID.
const MaxRequestID = 128

// ValidRequestID reports whether id can name a request: 1 to MaxRequestID
// characters of A-Z a-z 0-9 '.' '_' '-'. The charset keeps the ID usable
// verbatim in a Redis key (no hash-tag braces, no ':' separator) and fits
// UUIDs, ULIDs and base64url tokens.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// requestKey is the request entry of id on (stream, chain): a string
// "<sequence> <outcome_stored> <audit_id> <fingerprint>" that expires after
// the request window, under the chain's hash tag so that appendLua can
// read and write it with the record. Stream names have no ':' and request
// IDs neither, so distinct (stream, id) pairs never share a key.
func requestKey(stream, chain, id string) string {
	return rediskeys.Prefix + "{" + chain + "}:auditrid:" + stream + ":" + id
}

// firstReleaseRequestKey is where the first release kept the request entry
// of id: a hash with the request* fields. appendLua still honours such
// entries until they expire, and writes none. The new entries have a name
// of their own so that a first-release replica never reads one (it would
// fail on the type in the middle of its script).
func firstReleaseRequestKey(stream, chain, id string) string {
	return rediskeys.Prefix + "{" + chain + "}:auditreq:" + stream + ":" + id
}

// Fields of a first-release request entry.
const (
	requestFingerprint   = "fingerprint"
	requestSequence      = "sequence"
	requestAuditID       = "audit_id"
	requestOutcomeStored = "outcome_stored"
)

// Request names the caller's request, so that a retry of it appends once
// (appendLua). Fingerprint is a digest of the content the request asks to
// append; a retry must have the same one, and another request that reuses
// the ID is refused with ErrRequestReused.
type Request struct {
	ID          string
	Fingerprint string
}

// keys returns the head and stream keys of (stream, chain).
func keys(stream, chain string) (head, records string) {
	switch stream {
	case attribution.StreamAttribution:
		return rediskeys.ChainHead(chain), rediskeys.ChainStream(chain)
	case attribution.StreamLifecycle:
		return rediskeys.LifecycleHead(chain), rediskeys.LifecycleStream(chain)
	}
	return rediskeys.SignedStreamHead(chain, stream), rediskeys.SignedStream(chain, stream)
}

// leaseMillis is how long a starving writer holds a chain (appendLua).
const leaseMillis = 50

// IdempotentOutcome is stored in its slot in the same script as the record.
type IdempotentOutcome struct {
	// Slot is the slot key (rediskeys.IdempotencySlot of the chain's
	// agent); Token proves the caller's claim.
	Slot     string
	Token    string
	TTL      time.Duration
	Response []byte
}

// Appended describes an appended record.
type Appended struct {
	JWS             string
	AuditID         string
	PreviousAuditID string
	Sequence        uint64
	StoredAt        time.Time
	// OutcomeStored is false when an outcome was given but its slot's
	// token no longer matched (the claim expired or was taken over):
	// the record is appended anyway, the outcome is not stored.
	OutcomeStored bool
	// Replayed is true when the request ID had been appended before:
	// the fields describe that record, and nothing was appended now.
	Replayed bool
}

// Append signs p as the next record of (stream, chain) and appends it.
// chain is a chain name (ChainName). p's PreviousAuditID must be empty;
// it and AuditRecordVersion are set here. On ErrUnavailable the outcome is
// unknown: the record may exist. It never exists twice or out of order.
func (s *Store) Append(ctx context.Context, stream, chain string, p attribution.Payload, outcome *IdempotentOutcome) (Appended, error) {
	return s.AppendOnce(ctx, stream, chain, p, outcome, Request{})
}

// AppendOnce is Append for a named request: if req.ID was appended to
// (stream, chain) within the request window, it appends nothing and
// returns that record with Replayed set, or ErrRequestReused when req's
// fingerprint differs. So a caller that got ErrUnavailable (outcome
// unknown) can retry without attesting the response twice. A zero req is
// Append.
func (s *Store) AppendOnce(ctx context.Context, stream, chain string, p attribution.Payload, outcome *IdempotentOutcome, req Request) (Appended, error) {
	j, st, ok := s.prepare(ctx, stream, chain, p, outcome, req)
	if ok {
		// A lone append runs in the caller's goroutine when the chain is
		// idle.
		st.queue.Do(j)
	}
	return j.res, j.err
}

// Pending is an append on its way (Batch.Start).
type Pending struct {
	j    *job
	done <-chan struct{}
}

// Batch starts appends that go to Redis together: the records a Batch
// starts on one chain are not sent until Send, so they share one script
// call instead of the first going alone and the rest after it. A caller
// with records of several chains (SignAndAppendBatch) starts them all
// through one Batch, calls Send, then waits for each. A Batch belongs to
// one goroutine, and every Batch must be sent (defer Send): until then, the
// chains it started records on send nothing.
type Batch struct {
	s    *Store
	held []*headState
}

// NewBatch returns an empty Batch.
func (s *Store) NewBatch() *Batch { return &Batch{s: s} }

// Start queues an append as AppendOnce does and returns without waiting
// for it; it goes to Redis once Send is called. Appends started one after
// another on one (stream, chain) are appended in that order, each signed
// against the one before it.
func (b *Batch) Start(ctx context.Context, stream, chain string, p attribution.Payload, outcome *IdempotentOutcome, req Request) Pending {
	j, st, ok := b.s.prepare(ctx, stream, chain, p, outcome, req)
	if !ok {
		return Pending{j, closed}
	}
	if !slices.Contains(b.held, st) {
		st.queue.Hold()
		b.held = append(b.held, st)
	}
	return Pending{j, st.queue.Start(j)}
}

// Send sends what the Batch started; calling it again does nothing.
//
// When the Batch started records on several chains, their script calls
// share one pipeline: Send holds the store's pipeline group (a pipeGate)
// until each chain whose queue it set going has signed its records and
// queued its script call, and the last of them sends the pipeline. A chain
// busy with an earlier call takes the Batch's records with its next call,
// outside the gate, so the gate never waits on a round trip. A Batch of one
// chain needs no gate: its records are one script call anyway, and a lone
// record goes out as soon as it is signed.
func (b *Batch) Send() {
	if len(b.held) < 2 {
		for _, st := range b.held {
			st.queue.Release()
		}
		b.held = nil
		return
	}
	g := &pipeGate{}
	g.open.Store(1) // Send's own, dropped once every chain is counted
	b.s.group.Hold()
	for _, st := range b.held {
		g.open.Add(1)
		st.addGate(g)
		if !st.queue.Release() && st.dropGate(g) {
			// The chain's queue is held by another Batch or busy with a
			// call in flight: this gate does not wait for it.
			g.open.Add(-1)
		}
	}
	b.held = nil
	if g.open.Add(-1) == 0 {
		b.s.group.Release()
	}
}

// pipeGate is one Batch.Send's Hold on the store's pipeline group: open
// counts the chains (and Send itself) yet to queue their script call.
type pipeGate struct {
	open atomic.Int32
}

// addGate makes st's queue count towards g at its next script call.
func (st *headState) addGate(g *pipeGate) {
	st.gateMu.Lock()
	st.gates = append(st.gates, g)
	st.gateMu.Unlock()
}

// dropGate takes g back from st, unless st's queue has counted towards it
// already; it reports whether it took it back.
func (st *headState) dropGate(g *pipeGate) bool {
	st.gateMu.Lock()
	defer st.gateMu.Unlock()
	if i := slices.Index(st.gates, g); i >= 0 {
		st.gates = slices.Delete(st.gates, i, i+1)
		return true
	}
	return false
}

// hasGates reports whether a gate waits for st's next script call.
func (st *headState) hasGates() bool {
	st.gateMu.Lock()
	defer st.gateMu.Unlock()
	return len(st.gates) > 0
}

// closeGates counts st towards every gate that waits for it and returns
// how many of them it closed (their Holds on the pipeline group are the
// caller's to end).
func (st *headState) closeGates() int {
	st.gateMu.Lock()
	gs := st.gates
	st.gates = nil
	st.gateMu.Unlock()
	n := 0
	for _, g := range gs {
		if g.open.Add(-1) == 0 {
			n++
		}
	}
	return n
}

// sendOp queues op in the store's pipeline group and waits for its answer.
// If op is the last script call a gate waited for, its pipeline is sent
// now, by this goroutine. op is queued before the gates are counted down,
// so the gate's pipeline carries it.
func (s *Store) sendOp(st *headState, op *appendOp) {
	if !st.hasGates() {
		s.group.Do(op)
		return
	}
	// The gates hold the group: Start queues op and sends nothing.
	done := s.group.Start(op)
	if n := st.closeGates(); n > 0 {
		for range n - 1 {
			s.group.Release()
		}
		s.group.ReleaseNow()
	}
	<-done
}

// followUp gates the next script calls of the chains a pipeline carried:
// those with records queued behind the call just answered (from the same
// batch requests, mostly) make their next calls at the same moment, and
// they go out in one pipeline rather than the first alone and the rest in
// the pipelines behind it. It runs before the pipeline's callers are woken,
// and only chains with queued records count, so each will queue its call
// (or answer its records without one) without waiting on the pipeline
// group first.
func (s *Store) followUp(ops []*appendOp) {
	var g *pipeGate
	for _, op := range ops {
		if op.st == nil || !op.st.queue.Queued() {
			continue
		}
		if g == nil {
			g = &pipeGate{}
			g.open.Store(1)
			s.group.Hold()
		}
		g.open.Add(1)
		op.st.addGate(g)
	}
	if g != nil && g.open.Add(-1) == 0 {
		s.group.Release()
	}
}

// leaveGates counts st towards the gates that wait for it when its queue
// answered its records without a script call (failed head read, callers
// gone, payloads that do not sign).
func (s *Store) leaveGates(st *headState) {
	for range st.closeGates() {
		s.group.Release()
	}
}

// Wait returns the append's result, as AppendOnce would have.
func (p Pending) Wait() (Appended, error) {
	<-p.done
	return p.j.res, p.j.err
}

// job is one record in its chain's queue.
type job struct {
	ctx     context.Context
	start   time.Time
	p       attribution.Payload
	outcome *IdempotentOutcome
	req     Request
	// reqKey and oldReqKey are the request entry's key and the first
	// release's (requestKey, firstReleaseRequestKey).
	reqKey, oldReqKey string
	// garbage is the index entry of this record's attempt that lost the
	// race, deleted with its next attempt.
	garbage string
	// The current attempt.
	jws, id string
	seq     uint64
	at      time.Time

	res Appended
	err error
}

// prepare makes the job of an append and finds its chain's queue; when the
// append cannot be made, the job is answered already and ok is false.
func (s *Store) prepare(ctx context.Context, stream, chain string, p attribution.Payload, outcome *IdempotentOutcome, req Request) (j *job, st *headState, ok bool) {
	j = &job{ctx: ctx, start: time.Now(), p: p, outcome: outcome, req: req}
	if err := s.check(stream, chain, &j.p, outcome, req); err != nil {
		s.answer(nil, j, Appended{}, err)
		return j, nil, false
	}
	if req.ID != "" {
		j.reqKey, j.oldReqKey = requestKey(stream, chain, req.ID), firstReleaseRequestKey(stream, chain, req.ID)
	}
	return j, s.heads.get(stream, chain), true
}

// closed is the done channel of an append answered already.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// check refuses an append that cannot be made.
func (s *Store) check(stream, chain string, p *attribution.Payload, outcome *IdempotentOutcome, req Request) error {
	if !ValidStreamName(stream) || !ValidChainID(chain) {
		return fmt.Errorf("%w: stream %q chain %q", ErrInvalid, stream, chain)
	}
	if p.PreviousAuditID != "" {
		return fmt.Errorf("%w: previous_audit_id is set by the store", ErrInvalid)
	}
	if outcome != nil {
		if outcome.TTL <= 0 || outcome.Token == "" {
			return fmt.Errorf("%w: idempotent outcome without token or TTL", ErrInvalid)
		}
		if !strings.HasPrefix(outcome.Slot, slotPrefix(chain)) {
			return fmt.Errorf("%w: idempotency slot is not one of this chain's agent", ErrInvalid)
		}
	}
	if req != (Request{}) && (!ValidRequestID(req.ID) || req.Fingerprint == "") {
		return fmt.Errorf("%w: request ID %q or its fingerprint", ErrInvalid, req.ID)
	}
	p.AuditRecordVersion = attribution.RecordVersion
	return nil
}

// answer gives j its result.
func (s *Store) answer(st *headState, j *job, a Appended, err error) {
	if err == nil && !a.Replayed && s.opts.OnAppend != nil {
		s.opts.OnAppend(attribution.Entry{Format: "jws", Stream: st.stream, Chain: st.chain, Sequence: a.Sequence,
			AuditID: a.AuditID, JWS: a.JWS, StoredAt: a.StoredAt})
	}
	if s.opts.ObserveAppend != nil {
		s.opts.ObserveAppend(time.Since(j.start), err)
	}
	j.res, j.err = a, err
}

// dropGarbage deletes the index entries of jobs' lost attempts, for jobs
// answered without another attempt.
func (s *Store) dropGarbage(ctx context.Context, jobs ...*job) {
	var keys []string
	for _, j := range jobs {
		if j.garbage != "" {
			keys = append(keys, j.garbage)
			j.garbage = ""
		}
	}
	if len(keys) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	_, _ = s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, k := range keys {
			pl.Del(ctx, k) // one key a command: index keys are in different slots
		}
		return nil
	})
}

// failAll answers every job with err.
func (s *Store) failAll(st *headState, jobs []*job, err error) {
	for _, j := range jobs {
		s.answer(st, j, Appended{}, err)
	}
}

// slotPrefix is the key prefix of every idempotency slot of chain's agent.
func slotPrefix(chain string) string {
	k := rediskeys.IdempotencySlot(chain, "")
	return k[:len(k)-64]
}

// appendJobs signs jobs as consecutive records of st's chain, against the
// cached head, and appends them with one script call; records the script
// did not get to (after a replay, or all of them after a conflict) are
// signed again against the head it answered and sent again. Every job is
// answered before it returns. It is st.queue's exec: one batch of a chain
// at a time, in the order the appends were started, which is what keeps
// this process's records of one chain in order and its head cache
// consistent.
func (s *Store) appendJobs(st *headState, jobs []*job) {
	// A call that sent a script counted towards the gates when it did; a
	// gate added since (followUp) waits for the queue's next call.
	sent := false
	defer func() {
		if !sent {
			s.leaveGates(st)
		}
	}()
	proof := ""
	if s.opts.ReplicaAcks > 0 {
		proof = "1"
	}
	window := s.opts.RequestWindow.Milliseconds()
	signer := s.signer.Load()
	conflicts := 0
	for len(jobs) > 0 {
		// Callers that gave up before their record was signed: the
		// outcome is known (not appended).
		live := jobs[:0]
		for _, j := range jobs {
			if err := j.ctx.Err(); err != nil {
				s.dropGarbage(j.ctx, j)
				s.answer(st, j, Appended{}, fmt.Errorf("%w: %v", ErrUnavailable, err))
				continue
			}
			live = append(live, j)
		}
		if jobs = live; len(jobs) == 0 {
			return
		}
		ctx := context.WithoutCancel(jobs[0].ctx)
		if !st.valid {
			if err := s.loadHead(ctx, st); err != nil {
				s.dropGarbage(ctx, jobs...)
				s.failAll(st, jobs, err)
				return
			}
		}
		claim := "0"
		if conflicts > 0 {
			claim = "1"
		}
		op := &appendOp{keys: make([]string, 2, 2+3*len(jobs)), args: make([]any, 8, 8+7*len(jobs))}
		op.keys[0], op.keys[1] = st.headKey, st.streamKey
		now := s.opts.Now()
		nowArg := any(now.UnixMilli()) // one boxing for every record of the call
		prev, seq := st.head, st.length
		signed := jobs[:0]
		for _, j := range jobs {
			j.p.PreviousAuditID = prev
			jws, id, err := signer.SignPayload(&j.p)
			if err != nil {
				s.dropGarbage(ctx, j)
				s.answer(st, j, Appended{}, fmt.Errorf("%w: %v", ErrInvalid, err))
				continue
			}
			seq++
			j.jws, j.id, j.seq, j.at, prev = jws, id, seq, now, id
			if j.garbage != "" {
				op.garbage = append(op.garbage, keyWrite{key: j.garbage})
				j.garbage = ""
			}
			// The index entry is written in the same round trip, ahead of
			// the script, so an acknowledged record always has one (single
			// node; see docs/audit.md for Cluster). An entry for a record
			// that then loses the race points at a sequence holding
			// another record, and Get refuses it because the hash does not
			// match.
			op.index = append(op.index, keyWrite{key: rediskeys.AuditIndex(id), val: indexValue(st.stream, seq, st.chain)})
			var tok, ttl, fp string
			var resp []byte
			if o := j.outcome; o != nil {
				op.keys = append(op.keys, o.Slot)
				tok, ttl, resp = o.Token, strconv.FormatInt(o.TTL.Milliseconds(), 10), o.Response
			}
			if j.reqKey != "" {
				op.keys = append(op.keys, j.reqKey, j.oldReqKey)
				fp = j.req.Fingerprint
			}
			op.args = append(op.args, id, jws, nowArg, tok, ttl, resp, fp)
			signed = append(signed, j)
		}
		if jobs = signed; len(jobs) == 0 {
			return
		}
		op.args[0], op.args[1], op.args[2], op.args[3] = st.head, strconv.FormatUint(st.length, 10), s.writerID, claim
		op.args[4], op.args[5], op.args[6], op.args[7] = leaseMillis, window, proof, len(jobs)
		op.st = st
		s.sendOp(st, op)
		sent = true

		if op.evalErr != nil {
			// The script may have run before the connection failed:
			// forget the head and let the callers answer 503.
			st.valid = false
			s.unknownOutcm.Add(uint64(len(jobs)))
			s.failAll(st, jobs, fmt.Errorf("%w: append: %v", ErrUnavailable, op.evalErr))
			return
		}
		replies, perr := parseScriptReplies(op.evalVal, len(jobs))
		if perr != nil {
			st.valid = false
			s.failAll(st, jobs, fmt.Errorf("%w: %v", ErrUnavailable, perr))
			return
		}
		if replies[0].kind == replyConflict {
			r := replies[0]
			n, perr := strconv.ParseUint(r.b, 10, 64)
			if perr != nil || !attribution.IsAuditID(r.a) {
				st.valid = false
				s.failAll(st, jobs, fmt.Errorf("%w: bad head in conflict reply %q %q", ErrUnavailable, r.a, r.b))
				return
			}
			if n >= jobs[0].seq {
				// A client library that re-sent the script after a network
				// error makes our own records look like a conflict.
				// Re-signing would attest the responses twice, so look
				// first.
				rest, done, err := s.answerOwnEarlierAppends(ctx, st, jobs, r.a)
				if err != nil {
					st.valid = false
					s.failAll(st, jobs, err)
					return
				}
				jobs = rest
				if done > 0 {
					st.head, st.length, st.valid = r.a, n, s.opts.ReplicaAcks == 0
					for _, j := range jobs {
						j.garbage = rediskeys.AuditIndex(j.id)
					}
					continue
				}
			}
			// The head moved (another replica appended): adopt it and re-sign.
			s.conflicts.Add(1)
			conflicts++
			st.head, st.length, st.valid = r.a, n, true
			for _, j := range jobs {
				j.garbage = rediskeys.AuditIndex(j.id)
			}
			if conflicts >= s.opts.MaxAttempts {
				s.dropGarbage(ctx, jobs...)
				s.failAll(st, jobs, fmt.Errorf("%w: %d attempts on %s/%s", ErrContended, conflicts, st.stream, st.chain))
				return
			}
			if conflicts > 1 {
				// Two replicas hammering one chain: let one of them through.
				time.Sleep(time.Duration(mrand.Int64N(int64(conflicts+1) * int64(100*time.Microsecond))))
			}
			continue
		}
		conflicts = 0
		if op.indexErr != nil {
			s.indexErrors.Add(uint64(len(replies)))
			s.log.ErrorContext(ctx, "audit index write failed; records are in their chain, rebuild the index",
				"chain", st.chain, "stream", st.stream, "first_audit_id", jobs[0].id, "records", len(replies), "err", op.indexErr)
		}
		for i, r := range replies {
			s.settle(ctx, st, jobs[i], r, op.replErr)
		}
		last, settled := replies[len(replies)-1], jobs[len(replies)-1]
		jobs = jobs[len(replies):]
		if len(jobs) > 0 && last.kind == replyReplayed && last.auditID == settled.id {
			// A replay that answers a record with the very attempt it sent
			// (same head, same content, deterministic Ed25519) means an
			// earlier send of this script, re-sent after a network error,
			// appended that attempt, and maybe the attempts after it, which
			// need not carry a request ID to replay: look, as after a
			// conflict with our own records, before signing them again.
			rest, _, err := s.answerOwnEarlierAppends(ctx, st, jobs, last.curHead)
			if err != nil {
				// Their attempts may be in the chain: their index entries stay.
				st.valid = false
				s.failAll(st, jobs, err)
				return
			}
			jobs = rest
		}
		// Records after a replay or a reuse were signed against a record
		// that was not appended: sign them again.
		for _, j := range jobs {
			j.garbage = rediskeys.AuditIndex(j.id)
		}
	}
}

// settle answers j from its script reply r.
func (s *Store) settle(ctx context.Context, st *headState, j *job, r scriptReply, replErr error) {
	switch r.kind {
	case replyReplayed:
		s.forgetIndex(ctx, j.id, r.auditID)
		if replErr != nil {
			st.valid = false
			s.answer(st, j, Appended{}, s.notReplicated(ctx, st.stream, st.chain, r.auditID, r.seq, replErr))
			return
		}
		a, err := s.replayed(ctx, st, j.req, r)
		s.answer(st, j, a, err)
		return
	case replyReused:
		s.forgetIndex(ctx, j.id, r.auditID)
		s.log.WarnContext(ctx, "request ID reused with other content; refused", "chain", st.chain, "stream", st.stream,
			"request_id", j.req.ID, "audit_id", r.auditID)
		s.answer(st, j, Appended{}, fmt.Errorf("%w: request %s was appended to %s/%s as record %s (sequence %s)",
			ErrRequestReused, j.req.ID, st.stream, st.chain, r.auditID, r.seq))
		return
	case replyAppended:
	default:
		st.valid = false
		s.answer(st, j, Appended{}, fmt.Errorf("%w: script answered %d for record %d of a batch", ErrUnavailable, r.kind, j.seq))
		return
	}
	if r.a != strconv.FormatUint(j.seq, 10) {
		st.valid = false
		s.answer(st, j, Appended{}, fmt.Errorf("%w: script appended sequence %s, expected %d", ErrUnavailable, r.a, j.seq))
		return
	}
	if replErr != nil {
		// Appended, but maybe on the primary only: a failover now could
		// lose it, so it is not acknowledged. The head is forgotten, as
		// after any 503.
		st.valid = false
		s.answer(st, j, Appended{}, s.notReplicated(ctx, st.stream, st.chain, j.id, r.a, replErr))
		return
	}
	prev := j.p.PreviousAuditID
	if st.valid {
		st.head, st.length = j.id, j.seq
	}
	stored := r.b == "1"
	if j.outcome != nil && !stored {
		s.outcomeMiss.Add(1)
		s.log.WarnContext(ctx, "idempotency token no longer holds the slot; outcome not stored", "chain", st.chain, "audit_id", j.id)
	}
	s.answer(st, j, Appended{JWS: j.jws, AuditID: j.id, PreviousAuditID: prev, Sequence: j.seq, StoredAt: j.at, OutcomeStored: stored}, nil)
}

// answerAppliedEarlier answers j, whose record an earlier send of the same
// script appended.
// answerOwnEarlierAppends answers the jobs an earlier send of this
// store's own script already appended after head (appliedEarlier), and
// returns the jobs left to sign and how many it answered.
func (s *Store) answerOwnEarlierAppends(ctx context.Context, st *headState, jobs []*job, head string) ([]*job, int, error) {
	done, err := s.appliedEarlier(ctx, st, jobs, head)
	if err != nil {
		return jobs, 0, err
	}
	for _, j := range jobs[:done] {
		s.answerAppliedEarlier(ctx, st, j)
	}
	return jobs[done:], done, nil
}

func (s *Store) answerAppliedEarlier(ctx context.Context, st *headState, j *job) {
	if s.opts.ReplicaAcks > 0 {
		// An earlier send of this script appended it, maybe on another
		// connection: this one's WAIT proves nothing about it. Unknown
		// outcome; a retry with the request ID gets the record with a
		// proof.
		s.answer(st, j, Appended{}, s.notReplicated(ctx, st.stream, st.chain, j.id, strconv.FormatUint(j.seq, 10),
			errors.New("appended by an earlier send of the script, whose replication this send cannot prove")))
		return
	}
	s.answer(st, j, Appended{JWS: j.jws, AuditID: j.id, PreviousAuditID: j.p.PreviousAuditID, Sequence: j.seq,
		StoredAt: j.at, OutcomeStored: s.outcomeStored(ctx, j.outcome)}, nil)
}

// notReplicated counts, logs and returns the error for a record that the
// script appended (or replayed) but that fewer than ReplicaAcks replicas
// were seen to hold within ReplicaTimeout.
func (s *Store) notReplicated(ctx context.Context, stream, chain, auditID, seq string, cause error) error {
	s.unreplicated.Add(1)
	s.log.WarnContext(ctx, "audit record appended but not replicated in time; answered as unavailable",
		"chain", chain, "stream", stream, "audit_id", auditID, "sequence", seq,
		"replica_acks", s.opts.ReplicaAcks, "replica_timeout", s.opts.ReplicaTimeout, "err", cause)
	return fmt.Errorf("%w: record %s (sequence %s of %s/%s) was appended but not replicated to %d replicas within %v: %v",
		ErrUnavailable, auditID, seq, stream, chain, s.opts.ReplicaAcks, s.opts.ReplicaTimeout, cause)
}

// forgetIndex deletes the index entry written ahead of an attempt that
// appended nothing because its request had been appended already. When the
// attempt signed the very record appended then (same head, same content,
// deterministic Ed25519), the entry is that record's and stays.
func (s *Store) forgetIndex(ctx context.Context, attempt, appended string) {
	if attempt != appended {
		s.rdb.Del(context.WithoutCancel(ctx), rediskeys.AuditIndex(attempt))
	}
}

// replayed answers a retried request with the record it appended before,
// as the first answer described it.
func (s *Store) replayed(ctx context.Context, st *headState, req Request, r scriptReply) (Appended, error) {
	stream, chain := st.stream, st.chain
	if n, err := strconv.ParseUint(r.curLen, 10, 64); err == nil && attribution.IsAuditID(r.curHead) {
		st.head, st.length, st.valid = r.curHead, n, true
	} else {
		st.valid = false
	}
	seq, err := strconv.ParseUint(r.seq, 10, 64)
	if err != nil || attribution.AuditID(r.jws) != r.auditID {
		// The entry outlived its record (a stream edited by hand): there
		// is no earlier answer to give, and appending would attest twice.
		return Appended{}, fmt.Errorf("request %s names record %s at sequence %s of %s/%s, which is not there",
			req.ID, r.auditID, r.seq, stream, chain)
	}
	rec, err := attribution.Parse(r.jws)
	if err != nil {
		return Appended{}, fmt.Errorf("stored record %s does not parse: %w", r.auditID, err)
	}
	var at time.Time
	if ms, err := strconv.ParseInt(r.storedAt, 10, 64); err == nil {
		at = time.UnixMilli(ms)
	}
	s.replays.Add(1)
	s.log.InfoContext(ctx, "retried request answered with its earlier record", "chain", chain, "stream", stream,
		"request_id", req.ID, "audit_id", r.auditID)
	return Appended{JWS: r.jws, AuditID: r.auditID, PreviousAuditID: rec.Payload.PreviousAuditID, Sequence: seq,
		StoredAt: at, OutcomeStored: r.outcomeStored, Replayed: true}, nil
}

// appliedEarlier reports how many of jobs' records, from the first,
// already sit at their sequences; head is the chain's head now.
func (s *Store) appliedEarlier(ctx context.Context, st *headState, jobs []*job, head string) (int, error) {
	if len(jobs) == 1 && head == jobs[0].id {
		return 1, nil
	}
	es, err := s.Range(ctx, st.stream, st.chain, jobs[0].seq, int64(len(jobs)))
	if err != nil {
		return 0, err
	}
	n := 0
	for n < len(es) && n < len(jobs) && es[n].Sequence == jobs[n].seq && es[n].AuditID == jobs[n].id {
		n++
	}
	return n, nil
}

// outcomeStored reads back whether an outcome is in its slot.
func (s *Store) outcomeStored(ctx context.Context, o *IdempotentOutcome) bool {
	if o == nil {
		return false
	}
	v, err := s.rdb.HMGet(ctx, o.Slot, rediskeys.SlotToken, rediskeys.SlotState).Result()
	if err != nil {
		return false
	}
	tok, _ := v[0].(string)
	state, _ := v[1].(string)
	return tok == o.Token && state == rediskeys.SlotDone
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Kinds of appendLua replies.
const (
	replyConflict = 0
	replyAppended = 1
	replyReplayed = 2
	replyReused   = 3
)

// scriptReply is one appendLua reply. a and b are (sequence,
// outcome_stored) after an append and (head, length) after a conflict.
type scriptReply struct {
	kind int64
	a, b string
	// After replyReplayed and replyReused.
	seq, auditID                   string
	outcomeStored                  bool
	jws, storedAt, curHead, curLen string
}

// parseScriptReplies reads an appendLua reply to a call with n records:
// 1 to n entries, a conflict only as the only one.
func parseScriptReplies(v any, n int) ([]scriptReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 || len(arr) > n {
		return nil, fmt.Errorf("unexpected script reply %v", v)
	}
	out := make([]scriptReply, len(arr))
	for i, e := range arr {
		r, err := parseScriptReply(e)
		if err != nil {
			return nil, err
		}
		if r.kind == replyConflict && len(arr) > 1 {
			return nil, fmt.Errorf("unexpected script reply %v", v)
		}
		out[i] = r
	}
	return out, nil
}

// parseScriptReply reads one record's entry of an appendLua reply.
func parseScriptReply(v any) (scriptReply, error) {
	arr, isArr := v.([]any)
	if !isArr || len(arr) == 0 {
		return scriptReply{}, fmt.Errorf("unexpected script reply %v", v)
	}
	str := func(x any) string {
		switch x := x.(type) {
		case string:
			return x
		case int64:
			return strconv.FormatInt(x, 10)
		}
		return fmt.Sprint(x)
	}
	kind, _ := arr[0].(int64)
	r := scriptReply{kind: kind}
	switch {
	case (kind == replyConflict || kind == replyAppended) && len(arr) == 3:
		r.a, r.b = str(arr[1]), str(arr[2])
	case kind == replyReplayed && len(arr) == 8:
		r.seq, r.outcomeStored, r.auditID = str(arr[1]), str(arr[2]) == "1", str(arr[3])
		r.jws, r.storedAt, r.curHead, r.curLen = str(arr[4]), str(arr[5]), str(arr[6]), str(arr[7])
	case kind == replyReused && len(arr) == 3:
		r.auditID, r.seq = str(arr[1]), str(arr[2])
	default:
		return scriptReply{}, fmt.Errorf("unexpected script reply %v", v)
	}
	return r, nil
}

// loadHead reads a chain's head into st. A chain without a head hash gets
// its head from the stream (the script does the same), so the first append
// after a lost head hash does not need a retry.
func (s *Store) loadHead(ctx context.Context, st *headState) error {
	vals, err := s.rdb.HMGet(ctx, st.headKey, rediskeys.HeadAuditID, rediskeys.HeadLength).Result()
	if err != nil {
		return fmt.Errorf("%w: read head: %v", ErrUnavailable, err)
	}
	head, _ := vals[0].(string)
	ln, _ := vals[1].(string)
	if head == "" || ln == "" {
		// Unknown or lost head: start from the zero head; if the stream
		// has records the script answers with its real tail.
		st.head, st.length, st.valid = attribution.ZeroAuditID, 0, true
		return nil
	}
	n, err := strconv.ParseUint(ln, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: head length %q", ErrUnavailable, ln)
	}
	st.head, st.length, st.valid = head, n, true
	return nil
}

func indexValue(stream string, seq uint64, chain string) string {
	b := make([]byte, 0, 128) // on the stack unless the chain name is long
	b = append(b, stream...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ' ')
	b = append(b, chain...)
	return string(b)
}

func parseIndexValue(v string) (stream string, seq uint64, chain string, ok bool) {
	parts := strings.SplitN(v, " ", 3)
	if len(parts) != 3 {
		return "", 0, "", false
	}
	n, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || n == 0 {
		return "", 0, "", false
	}
	return parts[0], n, parts[2], true
}

// headState is one chain's queue and cached head. The queue sends one
// batch at a time (group commit with one flusher), which serializes this
// process's appends to the chain; other replicas are held off by the
// script's compare step.
type headState struct {
	stream, chain      string
	headKey, streamKey string
	queue              *batchrpc.Group[*job]

	// gates are the Batch.Sends waiting for this queue's next script call
	// (pipeGate).
	gateMu sync.Mutex
	gates  []*pipeGate

	// Owned by the queue's flusher.
	valid  bool
	head   string
	length uint64
}

const cacheShards = 64

type headCache struct {
	seed  maphash.Seed
	limit int
	// exec appends a batch of a chain's queue (Store.appendJobs).
	exec   func(*headState, []*job)
	batch  int
	shards [cacheShards]struct {
		mu sync.Mutex
		m  map[headKey]*headState
	}
}

// headKey names a cached head; a struct rather than a joined string, so
// that looking a chain up allocates nothing.
type headKey struct{ stream, chain string }

func (c *headCache) init(total, batch int, exec func(*headState, []*job)) {
	c.exec, c.batch = exec, batch
	c.seed = maphash.MakeSeed()
	c.limit = max(1, total/cacheShards)
	for i := range c.shards {
		c.shards[i].m = map[headKey]*headState{}
	}
}

func (c *headCache) get(stream, chain string) *headState {
	key := headKey{stream, chain}
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(stream)
	h.WriteByte(0)
	h.WriteString(chain)
	sh := &c.shards[h.Sum64()%cacheShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if st, ok := sh.m[key]; ok {
		return st
	}
	if len(sh.m) >= c.limit {
		// Evict an idle entry. Evicting one in use is safe too: two
		// headStates for one chain are just two writers, and the script
		// keeps them from forking it.
		for k, st := range sh.m {
			if st.queue.Idle() {
				delete(sh.m, k)
				break
			}
		}
	}
	st := &headState{stream: stream, chain: chain}
	st.headKey, st.streamKey = keys(stream, chain)
	st.queue = batchrpc.NewGroup(func(jobs []*job) { c.exec(st, jobs) }, 1, c.batch)
	sh.m[key] = st
	return st
}
