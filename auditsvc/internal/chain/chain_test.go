package chain

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/rediskeys"
	"github.com/agtpsuite/agtp/services/testkit"
)

func testKeys(t testing.TB) *attribution.KeySet {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := attribution.NewKeySet(k)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func newStore(t testing.TB, rdb redis.UniversalClient, ks *attribution.KeySet, opts Options) *Store {
	t.Helper()
	s, err := New(rdb, ks.Signer(), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func payload(agent string, i int) attribution.Payload {
	return attribution.Payload{
		ServerID: "srv", Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Method: "QUERY", Status: 200,
		AgentID: agent, RequestHash: strings.Repeat("a", 64), ResponseID: fmt.Sprint("r-", i),
	}
}

func verifyOpts(ks *attribution.KeySet, agent string) attribution.ChainOptions {
	return attribution.ChainOptions{VerifyOptions: attribution.VerifyOptions{Keys: ks}, AgentID: agent}
}

func TestAppendLinksRecordsOfOneChain(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	ks := testKeys(t)
	s := newStore(t, srv.Client(t), ks, Options{})

	var got []Appended
	for i := range 3 {
		a, err := s.Append(ctx, attribution.StreamAttribution, "agent-a", payload("agent-a", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	prev := attribution.ZeroAuditID
	for i, a := range got {
		if a.Sequence != uint64(i+1) || a.PreviousAuditID != prev || a.AuditID != attribution.AuditID(a.JWS) {
			t.Fatalf("record %d: %+v", i, a)
		}
		rec, err := attribution.Verify(a.JWS, attribution.VerifyOptions{Keys: ks})
		if err != nil || rec.Payload.PreviousAuditID != prev || rec.Payload.AuditRecordVersion != "1" {
			t.Fatalf("record %d: %v %+v", i, err, rec)
		}
		e, err := s.Get(ctx, a.AuditID)
		if err != nil || e.JWS != a.JWS || e.Sequence != a.Sequence || e.Chain != "agent-a" {
			t.Fatalf("Get %d: %v %+v", i, err, e)
		}
		prev = a.AuditID
	}
	head, n, err := s.Head(ctx, attribution.StreamAttribution, "agent-a")
	if err != nil || head != prev || n != 3 {
		t.Fatalf("head %s %d %v", head, n, err)
	}
	if _, _, err := s.Head(ctx, attribution.StreamAttribution, "agent-b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown chain head: %v", err)
	}
	if _, err := s.Get(ctx, strings.Repeat("f", 64)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown record: %v", err)
	}
	// A second chain starts at the zero head, independently.
	b, err := s.Append(ctx, attribution.StreamAttribution, rediskeys.ServerChain, payload("", 0), nil)
	if err != nil || b.PreviousAuditID != attribution.ZeroAuditID || b.Sequence != 1 {
		t.Fatalf("server chain: %v %+v", err, b)
	}
}

func TestAppendRefusesCallerChosenLinkAndBadNames(t *testing.T) {
	srv := testkit.StartRedis(t)
	s := newStore(t, srv.Client(t), testKeys(t), Options{})
	p := payload("a", 0)
	p.PreviousAuditID = attribution.ZeroAuditID
	cases := map[string]func() error{
		"caller-sets-previous-audit-id": func() error {
			_, err := s.Append(context.Background(), attribution.StreamAttribution, "a", p, nil)
			return err
		},
		"hash-tag-in-chain": func() error {
			_, err := s.Append(context.Background(), attribution.StreamAttribution, "a}b", payload("a}b", 0), nil)
			return err
		},
		"bad-stream-name": func() error {
			_, err := s.Append(context.Background(), "Confirm:x", "a", payload("a", 0), nil)
			return err
		},
		"slot-of-another-agent": func() error {
			_, err := s.Append(context.Background(), attribution.StreamAttribution, "a", payload("a", 0),
				&IdempotentOutcome{Slot: rediskeys.IdempotencySlot("b", "k"), Token: "t", TTL: time.Minute})
			return err
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if err := f(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

// Two independent stores (two auditsvc processes, each with its own Redis
// client and head cache) and many goroutines in each append to one chain.
func TestConcurrentWritersNeverForkOrGap(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	ks := testKeys(t)
	stores := []*Store{newStore(t, srv.Client(t), ks, Options{}), newStore(t, srv.Client(t), ks, Options{})}

	const perWriter, writersPerStore = 60, 8
	var mu sync.Mutex
	acked := map[string]uint64{}
	var wg sync.WaitGroup
	for si, s := range stores {
		for w := range writersPerStore {
			wg.Go(func() {
				for i := range perWriter {
					// Half the traffic goes to other agents, so the head
					// caches of both stores are exercised across chains.
					agent := "shared"
					if i%2 == 1 {
						agent = fmt.Sprintf("own-%d-%d", si, w%3)
					}
					a, err := s.Append(ctx, attribution.StreamAttribution, agent, payload(agent, i), nil)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if _, dup := acked[a.AuditID]; dup {
						t.Errorf("audit id %s acknowledged twice", a.AuditID)
					}
					acked[a.AuditID] = a.Sequence
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := uint64(2 * writersPerStore * perWriter / 2)
	r, err := stores[0].Verify(ctx, attribution.StreamAttribution, "shared", verifyOpts(ks, "shared"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Valid || r.Checked != total || r.Length != total {
		t.Fatalf("shared chain: valid=%v checked=%d length=%d want %d; break %+v", r.Valid, r.Checked, r.Length, total, r.Break)
	}
	for id, seq := range acked {
		e, err := stores[1].Get(ctx, id)
		if err != nil || e.Sequence != seq {
			t.Fatalf("acknowledged %s (seq %d) not found: %v %+v", id, seq, err, e)
		}
	}
	if c := stores[0].Stats().Conflicts + stores[1].Stats().Conflicts; c == 0 {
		t.Log("no head conflicts occurred between the two stores (timing); the no-fork check still holds")
	}
}

// The stale-cache path: a store whose cached head is behind must adopt the
// head from the script's conflict reply and still append in order.
func TestStaleHeadCacheRetriesWithoutForking(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	ks := testKeys(t)
	a, b := newStore(t, srv.Client(t), ks, Options{}), newStore(t, srv.Client(t), ks, Options{})
	if _, err := a.Append(ctx, attribution.StreamAttribution, "x", payload("x", 0), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, attribution.StreamAttribution, "x", payload("x", 1), nil); err != nil {
		t.Fatal(err)
	}
	// a's cache still says length 1.
	got, err := a.Append(ctx, attribution.StreamAttribution, "x", payload("x", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sequence != 3 || a.Stats().Conflicts != 1 {
		t.Fatalf("sequence %d conflicts %d, want 3 and 1", got.Sequence, a.Stats().Conflicts)
	}
	r, err := a.Verify(ctx, attribution.StreamAttribution, "x", verifyOpts(ks, "x"), 0)
	if err != nil || !r.Valid || r.Checked != 3 {
		t.Fatalf("verify: %v %+v", err, r)
	}
	// The losing attempt's index entry does not resolve to anything.
	if n, _ := srv.Client(t).DBSize(ctx).Result(); n != 2+3 {
		t.Fatalf("keys = %d, want head, stream and 3 index entries (the lost attempt's entry removed)", n)
	}
}

func TestLostHeadHashDoesNotRestartTheChain(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	ks := testKeys(t)
	s := newStore(t, rdb, ks, Options{})
	for i := range 3 {
		if _, err := s.Append(ctx, attribution.StreamAttribution, "x", payload("x", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	rdb.Del(ctx, rediskeys.ChainHead("x"))
	for _, st := range []*Store{s, newStore(t, rdb, ks, Options{})} { // warm and cold caches
		a, err := st.Append(ctx, attribution.StreamAttribution, "x", payload("x", 9), nil)
		if err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, rediskeys.ChainHead("x"))
		if a.PreviousAuditID == attribution.ZeroAuditID || a.Sequence < 4 {
			t.Fatalf("chain restarted: %+v", a)
		}
	}
	r, err := s.Verify(ctx, attribution.StreamAttribution, "x", verifyOpts(ks, "x"), 0)
	if err != nil || !r.Valid || r.Checked != 5 {
		t.Fatalf("verify: %v %+v", err, r)
	}
}

func TestIdempotentOutcomeIsStoredInTheSameStep(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, testKeys(t), Options{})
	slot := rediskeys.IdempotencySlot("agent-i", "key-1")
	rdb.HSet(ctx, slot, rediskeys.SlotState, rediskeys.SlotPending, rediskeys.SlotToken, "tok-1", rediskeys.SlotFingerprint, "fp")
	rdb.Expire(ctx, slot, time.Minute)

	a, err := s.Append(ctx, attribution.StreamAttribution, "agent-i", payload("agent-i", 0),
		&IdempotentOutcome{Slot: slot, Token: "tok-1", TTL: 24 * time.Hour, Response: []byte("RESPONSE")})
	if err != nil || !a.OutcomeStored {
		t.Fatalf("append: %v %+v", err, a)
	}
	h := rdb.HGetAll(ctx, slot).Val()
	if h[rediskeys.SlotState] != rediskeys.SlotDone || h[rediskeys.SlotResponse] != "RESPONSE" || h[rediskeys.SlotFingerprint] != "fp" {
		t.Fatalf("slot = %v", h)
	}
	if ttl := rdb.PTTL(ctx, slot).Val(); ttl < 23*time.Hour {
		t.Fatalf("slot TTL %v, want about 24h", ttl)
	}

	// A claim taken over by another token: the record is still appended,
	// the outcome is not stored, and the caller is told.
	slot2 := rediskeys.IdempotencySlot("agent-i", "key-2")
	rdb.HSet(ctx, slot2, rediskeys.SlotState, rediskeys.SlotPending, rediskeys.SlotToken, "someone-else")
	b, err := s.Append(ctx, attribution.StreamAttribution, "agent-i", payload("agent-i", 1),
		&IdempotentOutcome{Slot: slot2, Token: "tok-2", TTL: time.Hour, Response: []byte("X")})
	if err != nil || b.OutcomeStored || b.Sequence != 2 {
		t.Fatalf("append with a lost claim: %v %+v", err, b)
	}
	if st := rdb.HGet(ctx, slot2, rediskeys.SlotState).Val(); st != rediskeys.SlotPending {
		t.Fatalf("foreign claim overwritten: state %s", st)
	}
	// An expired slot (no key at all) is not created by the append.
	slot3 := rediskeys.IdempotencySlot("agent-i", "key-3")
	c, err := s.Append(ctx, attribution.StreamAttribution, "agent-i", payload("agent-i", 2),
		&IdempotentOutcome{Slot: slot3, Token: "t", TTL: time.Hour, Response: []byte("X")})
	if err != nil || c.OutcomeStored || rdb.Exists(ctx, slot3).Val() != 0 {
		t.Fatalf("expired slot: %v %+v", err, c)
	}
	if s.Stats().OutcomeTokenMismatches != 2 {
		t.Fatalf("mismatch counter = %d", s.Stats().OutcomeTokenMismatches)
	}
}

// rewriteStream replaces a chain's stream with edited entries, as an
// attacker with write access to Redis would.
func rewriteStream(t *testing.T, rdb *redis.Client, key string, edit func([]redis.XMessage) []redis.XMessage) {
	t.Helper()
	ctx := context.Background()
	msgs := rdb.XRange(ctx, key, "-", "+").Val()
	msgs = edit(msgs)
	rdb.Del(ctx, key)
	for _, m := range msgs {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: m.ID, Values: m.Values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTamperingWithStoredRecordsIsDetected(t *testing.T) {
	ctx := context.Background()
	ks := testKeys(t)
	cases := []struct {
		name    string
		edit    func([]redis.XMessage) []redis.XMessage
		index   uint64
		problem string
	}{
		{"payload-edited", func(m []redis.XMessage) []redis.XMessage {
			m[2].Values["jws"] = editPayload(m[2].Values["jws"].(string), `"status":200`, `"status":404`)
			return m
		}, 2, attribution.ProblemBadSignature},
		{"payload-edited-and-id-updated", func(m []redis.XMessage) []redis.XMessage {
			j := editPayload(m[2].Values["jws"].(string), `"status":200`, `"status":404`)
			m[2].Values["jws"], m[2].Values["audit_id"] = j, attribution.AuditID(j)
			return m
		}, 2, attribution.ProblemBadSignature},
		{"re-signed-with-foreign-key", func(m []redis.XMessage) []redis.XMessage {
			rec, _ := attribution.Parse(m[1].Values["jws"].(string))
			j, id, _ := testKeys(t).Signer().SignPayload(&rec.Payload)
			m[1].Values["jws"], m[1].Values["audit_id"] = j, id
			return m
		}, 1, attribution.ProblemUnknownKey},
		{"record-deleted", func(m []redis.XMessage) []redis.XMessage {
			return append(m[:3], m[4:]...)
		}, 3, attribution.ProblemSequenceGap},
		{"stored-audit-id-edited", func(m []redis.XMessage) []redis.XMessage {
			m[0].Values["audit_id"] = strings.Repeat("0", 63) + "1"
			return m
		}, 0, attribution.ProblemAuditIDMismatch},
		{"tail-truncated", func(m []redis.XMessage) []redis.XMessage { return m[:4] }, 4, attribution.ProblemSequenceGap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.StartRedis(t)
			rdb := srv.Client(t)
			s := newStore(t, rdb, ks, Options{})
			for i := range 5 {
				if _, err := s.Append(ctx, attribution.StreamAttribution, "v", payload("v", i), nil); err != nil {
					t.Fatal(err)
				}
			}
			rewriteStream(t, rdb, rediskeys.ChainStream("v"), tc.edit)
			r, err := s.Verify(ctx, attribution.StreamAttribution, "v", verifyOpts(ks, "v"), 2)
			if err != nil {
				t.Fatal(err)
			}
			if r.Valid || r.Break == nil || r.Break.Index != tc.index || r.Break.Problem != tc.problem {
				t.Fatalf("got valid=%v break=%+v, want break at %d (%s)", r.Valid, r.Break, tc.index, tc.problem)
			}
		})
	}
}

func editPayload(jws, from, to string) string {
	parts := strings.Split(jws, ".")
	rec, _ := attribution.Parse(jws)
	body := strings.Replace(string(rec.RawPayload), from, to, 1)
	return parts[0] + "." + b64(body) + "." + parts[2]
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestGetIgnoresIndexEntriesOfLostAttemptsAndRebuildRestoresIndex(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	rdb := srv.Client(t)
	s := newStore(t, rdb, testKeys(t), Options{})
	var ids []string
	for i := range 3 {
		a, err := s.Append(ctx, attribution.StreamAttribution, "g", payload("g", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.AuditID)
	}
	ghost := strings.Repeat("c", 64)
	rdb.Set(ctx, rediskeys.AuditIndex(ghost), indexValue(attribution.StreamAttribution, 2, "g"), 0)
	if _, err := s.Get(ctx, ghost); !errors.Is(err, ErrNotFound) {
		t.Fatalf("index entry of a record that is not stored resolved: %v", err)
	}
	for _, id := range ids {
		rdb.Del(ctx, rediskeys.AuditIndex(id))
	}
	if _, err := s.Get(ctx, ids[1]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get without index: %v", err)
	}
	var refs []ChainRef
	if err := s.ScanChains(ctx, func(r ChainRef) error { refs = append(refs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0] != (ChainRef{attribution.StreamAttribution, "g"}) {
		t.Fatalf("ScanChains = %v", refs)
	}
	if c, n, err := s.RebuildAllIndexes(ctx); err != nil || c != 1 || n != 3 {
		t.Fatalf("rebuild: %d chains %d records %v", c, n, err)
	}
	for _, id := range ids {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("Get after rebuild: %v", err)
		}
	}
}

func TestRangeNewestPagesBackwards(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	s := newStore(t, srv.Client(t), testKeys(t), Options{})
	for i := range 7 {
		p := payload("l", i)
		p.EventType = fmt.Sprint("event-", i)
		if _, err := s.Append(ctx, attribution.StreamLifecycle, "l", p, nil); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []uint64
	before := uint64(0)
	for {
		es, err := s.RangeNewest(ctx, attribution.StreamLifecycle, "l", before, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			seqs = append(seqs, e.Sequence)
		}
		before = es[len(es)-1].Sequence
	}
	if fmt.Sprint(seqs) != "[7 6 5 4 3 2 1]" {
		t.Fatalf("pages = %v", seqs)
	}
}

// Redis is killed (SIGKILL) and restarted twice while writers append with
// appendfsync always: every acknowledged record survives and the chain
// verifies end to end.
func TestRedisRestartLosesNoAcknowledgedRecord(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	ks := testKeys(t)
	fast := func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		o.MaxRetries = -1 // a retried EVALSHA must be our decision, not the client's
	}
	stores := []*Store{newStore(t, srv.Client(t, fast), ks, Options{}), newStore(t, srv.Client(t, fast), ks, Options{})}

	var mu sync.Mutex
	acked := map[string]string{} // audit id -> chain
	var failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		s := stores[i%2]
		chainID := []string{"durable-1", "durable-2"}[i/4]
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				a, err := s.Append(ctx, attribution.StreamAttribution, chainID, payload(chainID, n), nil)
				if err != nil {
					failures.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked[a.AuditID] = chainID
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitFor := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d records acknowledged", count())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(200)
	srv.Restart(t)
	waitFor(count() + 200)
	srv.Restart(t)
	waitFor(count() + 200)
	close(stop)
	wg.Wait()
	if failures.Load() == 0 {
		t.Fatal("no append failed while Redis was down: the restart did not happen under load")
	}
	for _, chainID := range []string{"durable-1", "durable-2"} {
		r, err := stores[0].Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
		if err != nil || !r.Valid {
			t.Fatalf("%s: %v %+v", chainID, err, r)
		}
	}
	for id, chainID := range acked {
		e, err := stores[1].Get(ctx, id)
		if err != nil || e.Chain != chainID {
			t.Fatalf("acknowledged record %s lost: %v", id, err)
		}
	}
	t.Logf("%d acknowledged, %d failed appends during restarts", len(acked), failures.Load())
}

func TestHeadCacheIsBounded(t *testing.T) {
	var c headCache
	c.init(cacheShards*2, 1, func(*headState, []*job) {})
	for i := range 10000 {
		c.get(attribution.StreamAttribution, fmt.Sprint("chain-", i))
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > cacheShards*2 {
		t.Fatalf("cache holds %d heads, limit %d", n, cacheShards*2)
	}
}

// BenchmarkSignAndAppend appends signed records from many goroutines
// across many agents' chains against a real redis-server: 8 agents is the
// load benchmark's (many records of one chain waiting together), 1000 many
// chains with one record each; "requests" gives every record a request ID,
// as the front door does. Besides wall clock records/s it reports the
// CPU both processes spent per record, which does not depend on what else
// the machine is running (2 cores divided by the sum is the rate this
// 2-core machine sustains when the benchmark has it to itself), the script
// calls per record and the Redis commands per record (the scripts' own
// commands included).
//
// batch=17 sends the records as the front door's SignAndAppendBatch does:
// 4 goroutines each start 17 records over the 8 chains through one Batch
// (68 in flight) and wait for them; it also reports the records per
// Redis pipeline.
func BenchmarkSignAndAppend(b *testing.B) {
	for _, bc := range []struct {
		agents   int
		requests bool
		batch    int
	}{{8, false, 0}, {8, true, 0}, {1000, false, 0}, {1000, true, 0}, {8, true, 17}} {
		name := fmt.Sprintf("agents=%d", bc.agents)
		if bc.requests {
			name += "/requests"
		}
		if bc.batch > 0 {
			name += fmt.Sprintf("/batch=%d", bc.batch)
		}
		b.Run(name, func(b *testing.B) {
			srv := testkit.StartRedis(b)
			rdb := srv.Client(b, func(o *redis.Options) { o.PoolSize = 256 })
			var pipelines, piped atomic.Int64
			s := newStore(b, rdb, testKeys(b), Options{ObserveBatch: func(records int, _ time.Duration) {
				pipelines.Add(1)
				piped.Add(int64(records))
			}})
			var next atomic.Int64
			record := func(i int) (agent string, p attribution.Payload, req Request) {
				n := next.Add(1)
				agent = fmt.Sprintf("agent-%d", n%int64(bc.agents))
				if bc.requests {
					req = Request{ID: fmt.Sprintf("0190b7c2-%04x-7000-8000-%012x", n%65536, n), Fingerprint: strings.Repeat("f", 64)}
				}
				return agent, payload(agent, i), req
			}
			if bc.batch > 0 {
				b.SetParallelism(2)
			} else {
				b.SetParallelism(64)
			}
			b.ReportAllocs()
			goCPU0, redisCPU0 := processCPU(b), redisCPU(b, rdb)
			scripts0, cmds0 := commandCalls(b, rdb)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := 0
				if bc.batch > 0 {
					pend := make([]Pending, 0, bc.batch)
					for more := true; more; {
						batch := s.NewBatch()
						pend = pend[:0]
						for len(pend) < bc.batch {
							if more = pb.Next(); !more {
								break
							}
							agent, p, req := record(i)
							pend = append(pend, batch.Start(ctx, attribution.StreamAttribution, agent, p, nil, req))
							i++
						}
						batch.Send()
						for _, p := range pend {
							if _, err := p.Wait(); err != nil {
								b.Error(err)
								return
							}
						}
					}
					return
				}
				for pb.Next() {
					agent, p, req := record(i)
					if _, err := s.AppendOnce(ctx, attribution.StreamAttribution, agent, p, nil, req); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			elapsed := time.Since(start)
			goUS := (processCPU(b) - goCPU0).Seconds() * 1e6 / float64(b.N)
			redisUS := (redisCPU(b, rdb) - redisCPU0).Seconds() * 1e6 / float64(b.N)
			scripts, cmds := commandCalls(b, rdb)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(goUS, "go-cpu-us/record")
			b.ReportMetric(redisUS, "redis-cpu-us/record")
			b.ReportMetric(2e6/(goUS+redisUS), "records/s@2cpu")
			b.ReportMetric(float64(scripts-scripts0)/float64(b.N), "scripts/record")
			b.ReportMetric(float64(cmds-cmds0)/float64(b.N), "redis-cmds/record")
			if n := pipelines.Load(); n > 0 {
				b.ReportMetric(float64(piped.Load())/float64(n), "records/pipeline")
			}
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandCalls is how many EVALSHA, and how many commands in all but the
// benchmark's own INFO, the server has run (INFO commandstats counts the
// commands scripts run too).
func commandCalls(b *testing.B, rdb *redis.Client) (scripts, all int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		name, stat, ok := strings.Cut(l, ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _ := strconv.ParseInt(stat[:strings.IndexByte(stat, ',')], 10, 64)
		all += n
		if strings.HasPrefix(l, "cmdstat_evalsha:") {
			scripts = n
		}
	}
	return scripts, all
}

func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// startNow starts one append and sends it at once, as a batch of one: it
// goes out at once if its chain is idle, else with the records that queue
// behind the append in flight.
func startNow(ctx context.Context, s *Store, stream, chain string, p attribution.Payload, req Request) Pending {
	b := s.NewBatch()
	defer b.Send()
	return b.Start(ctx, stream, chain, p, nil, req)
}
