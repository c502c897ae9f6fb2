package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/services/testkit"
)

// holdHook holds the first append pipeline sent once armed until gate is
// closed, so that a test can queue records behind an append in flight.
type holdHook struct {
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func newHoldHook() *holdHook {
	return &holdHook{entered: make(chan struct{}, 1), gate: make(chan struct{})}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// Only an append's pipeline: the client's own pipelines (the
		// handshake of each new connection, sent through the hooks too)
		// must not be the one held, or the records meant to queue behind
		// the append could join it.
		if carriesAppend(cmds) && h.armed.CompareAndSwap(true, false) {
			h.entered <- struct{}{}
			<-h.gate
		}
		return next(ctx, cmds)
	}
}

// batchCase is one record of a queued batch and what it must get.
type batchCase struct {
	req     Request
	wantErr error
	replay  bool // answered with the record of the first append
}

// Records of one chain that queue behind an append in flight go to Redis
// in one script call, in the order they were started, each linked to the
// one before it. A replayed or refused request among them appends nothing
// and the records after it are signed again, so the chain has no gap, no
// fork and no record twice.
func TestQueuedRecordsOfOneChainShareOneScript(t *testing.T) {
	const chainID = "batched"
	fresh := func(id string) Request { return Request{ID: id, Fingerprint: "fp-" + id} }
	cases := []struct {
		name  string
		items []batchCase
		// wantAppended is how many of items add a record.
		wantAppended int
	}{
		{name: "plain records", items: []batchCase{{}, {}, {}, {}, {}, {}, {}, {}}, wantAppended: 8},
		{name: "with request IDs", items: []batchCase{{req: fresh("a")}, {req: fresh("b")}, {req: fresh("c")}}, wantAppended: 3},
		{name: "replay in the middle", items: []batchCase{{}, {req: fresh("first"), replay: true}, {req: fresh("d")}, {}}, wantAppended: 3},
		{name: "replay first", items: []batchCase{{req: fresh("first"), replay: true}, {}, {}}, wantAppended: 2},
		{
			name:         "reused ID in the middle",
			items:        []batchCase{{}, {req: Request{ID: "first", Fingerprint: "other"}, wantErr: ErrRequestReused}, {}},
			wantAppended: 2,
		},
		{name: "replay last", items: []batchCase{{}, {}, {req: fresh("first"), replay: true}}, wantAppended: 2},
	}
	for _, be := range backends {
		for _, tc := range cases {
			t.Run(be.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				o := newObservedStore(t, be)
				s, hold, ks := o.s, o.hold, o.ks
				first, err := s.AppendOnce(ctx, attribution.StreamAttribution, chainID, payload(chainID, 0), nil, fresh("first"))
				if err != nil {
					t.Fatal(err)
				}
				// An append in flight, held; the cases' records queue
				// behind it.
				hold.armed.Store(true)
				lead := startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 1), Request{})
				<-hold.entered
				pend := make([]Pending, len(tc.items))
				for i, it := range tc.items {
					pend[i] = startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 10+i), it.req)
				}
				close(hold.gate)
				if _, err := lead.Wait(); err != nil {
					t.Fatal(err)
				}
				seq := uint64(2)
				appended := 0
				for i, it := range tc.items {
					a, err := pend[i].Wait()
					switch {
					case it.wantErr != nil:
						if !errors.Is(err, it.wantErr) {
							t.Fatalf("item %d: %v, want %v", i, err, it.wantErr)
						}
					case err != nil:
						t.Fatalf("item %d: %v", i, err)
					case it.replay:
						if !a.Replayed || a.AuditID != first.AuditID || a.Sequence != 1 {
							t.Fatalf("item %d: %+v, want the replay of %s", i, a, first.AuditID)
						}
					default:
						seq++
						appended++
						if a.Replayed || a.Sequence != seq {
							t.Fatalf("item %d: sequence %d replayed %v, want sequence %d", i, a.Sequence, a.Replayed, seq)
						}
						if e, err := s.Get(ctx, a.AuditID); err != nil || e.Sequence != seq || e.JWS != a.JWS {
							t.Fatalf("item %d: Get %v %+v", i, err, e)
						}
					}
				}
				if appended != tc.wantAppended {
					t.Fatalf("%d records appended, want %d", appended, tc.wantAppended)
				}
				r, err := s.Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
				if err != nil || !r.Valid || r.Checked != seq || r.Length != seq {
					t.Fatalf("verify: %v valid=%v checked=%d length=%d, want %d; break %+v", err, r.Valid, r.Checked, r.Length, seq, r.Break)
				}
				pipelines := o.pipelines()
				// first, the held lead, then the queued records: all of
				// them in the first script call after the lead's.
				if len(pipelines) < 3 || pipelines[2] != len(tc.items) {
					t.Fatalf("pipelines carried %v records, want 1, 1, then all %d queued records in one", pipelines, len(tc.items))
				}
			})
		}
	}
}

// observedStore is a store on a backend whose first pipeline after
// hold.armed is held, and which records the records each pipeline carried.
type observedStore struct {
	s     *Store
	hold  *holdHook
	ks    *attribution.KeySet
	mu    sync.Mutex
	sizes []int
}

func newObservedStore(t *testing.T, be backend) *observedStore {
	rdb := be.start(t)
	o := &observedStore{hold: newHoldHook(), ks: testKeys(t)}
	rdb.AddHook(o.hold)
	o.s = newStore(t, rdb, o.ks, Options{ObserveBatch: observeInto(&o.mu, &o.sizes)})
	return o
}

// pipelines returns the records each pipeline answered so far carried.
func (o *observedStore) pipelines() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.sizes)
}

func observeInto(mu *sync.Mutex, sizes *[]int) func(int, time.Duration) {
	return func(records int, _ time.Duration) {
		mu.Lock()
		*sizes = append(*sizes, records)
		mu.Unlock()
	}
}

// resendBatchHook runs the first pipeline whose script call carries more
// than one record twice, as a client library that re-sends after a
// network error would, and reports the second result.
type resendBatchHook struct{ done atomic.Bool }

func (*resendBatchHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*resendBatchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *resendBatchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.done.Load() && carriesBatch(cmds) && h.done.CompareAndSwap(false, true) {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// carriesAppend reports whether cmds hold an appendLua call: test hooks
// act on an append's pipeline only, since the client sends pipelines of its
// own through the hooks too (each new connection's handshake).
func carriesAppend(cmds []redis.Cmder) bool {
	return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" })
}

// carriesBatch reports whether cmds hold an appendLua call of more than
// one record (its ARGV[8]).
func carriesBatch(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		a := c.Args()
		if len(a) < 3 || fmt.Sprint(a[0]) != "evalsha" {
			continue
		}
		nkeys, _ := strconv.Atoi(fmt.Sprint(a[2]))
		if i := 3 + nkeys + 7; i < len(a) && fmt.Sprint(a[i]) != "1" {
			return true
		}
	}
	return false
}

// A re-sent script call of several records makes them all look like a
// conflict with our own head, or, when the records carry request IDs, like
// a retry of the first. The store must recognise its own records and
// answer them, not re-sign and append them a second time, and every
// acknowledged record keeps its index entry.
func TestResentBatchScriptIsRecognisedAsOwnAppends(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(i int) Request
	}{
		{"without request IDs", func(int) Request { return Request{} }},
		{"with request IDs", func(i int) Request { return Request{ID: fmt.Sprint("req-", i), Fingerprint: fmt.Sprint("fp-", i)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := testkit.StartRedis(t)
			ks := testKeys(t)
			rdb := srv.Client(t)
			if err := appendScript.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
			hold, resend := newHoldHook(), &resendBatchHook{}
			rdb.AddHook(hold)
			rdb.AddHook(resend)
			s := newStore(t, rdb, ks, Options{})
			const chainID = "resent-batch"
			hold.armed.Store(true)
			lead := startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 0), tc.req(0))
			<-hold.entered
			var pend []Pending
			for i := range 3 {
				pend = append(pend, startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 1+i), tc.req(1+i)))
			}
			close(hold.gate)
			first, err := lead.Wait()
			if err != nil {
				t.Fatal(err)
			}
			acked := []Appended{first}
			for i, p := range pend {
				a, err := p.Wait()
				if err != nil || a.Sequence != uint64(2+i) {
					t.Fatalf("record %d: sequence %d, %v; want %d", i, a.Sequence, err, 2+i)
				}
				acked = append(acked, a)
			}
			if !resend.done.Load() {
				t.Fatal("no script call of several records was sent")
			}
			last := acked[len(acked)-1]
			head, n, err := s.Head(ctx, attribution.StreamAttribution, chainID)
			if err != nil || n != 4 || head != last.AuditID {
				t.Fatalf("chain has %d records (head %s), want exactly the 4 acknowledged: %v", n, head, err)
			}
			for _, a := range acked {
				if e, err := s.Get(ctx, a.AuditID); err != nil || e.Sequence != a.Sequence {
					t.Errorf("acknowledged record %d (%s): Get = %+v, %v", a.Sequence, a.AuditID, e, err)
				}
			}
			r, err := s.Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
			if err != nil || !r.Valid || r.Checked != 4 {
				t.Fatalf("verify: %v %+v", err, r)
			}
		})
	}
}

// A script call carries records of one chain from several callers, the
// first with a request ID and the ones after it without (the front door's
// appends carry one, other callers' need not). Its reply is lost and the
// client sends the pipeline again, as a Redis Cluster client does after a
// network error (and a client with go-redis's default MaxRetries): the
// re-run answers the first record as a replay of itself and stops. The
// store must find the records after it in the chain and answer them, not
// sign them again and append them a second time.
func TestResentMixedBatchAppendsNoRecordTwice(t *testing.T) {
	ctx := context.Background()
	srv := testkit.StartRedis(t)
	direct := srv.Client(t)
	if err := appendScript.Load(ctx, direct).Err(); err != nil {
		t.Fatal(err)
	}
	const chainID = "resent-mixed"
	proxy := testkit.NewReplyDropper(t, srv.Addr, []byte("auditrid:attribution:mixed-1"))
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // MaxRetries 0: go-redis's default, 3 resends
	t.Cleanup(func() { rdb.Close() })
	hold := newHoldHook()
	rdb.AddHook(hold)
	ks := testKeys(t)
	s := newStore(t, rdb, ks, Options{})

	hold.armed.Store(true)
	lead := startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 0), Request{})
	<-hold.entered
	reqs := []Request{{ID: "mixed-1", Fingerprint: "fp-1"}, {}, {}}
	var pend []Pending
	for i, req := range reqs {
		pend = append(pend, startNow(ctx, s, attribution.StreamAttribution, chainID, payload(chainID, 1+i), req))
	}
	proxy.Arm()
	close(hold.gate)
	first, err := lead.Wait()
	if err != nil {
		t.Fatal(err)
	}
	acked := []Appended{first}
	for i, p := range pend {
		a, err := p.Wait()
		if err != nil || a.Sequence != uint64(2+i) {
			t.Fatalf("record %d: sequence %d, %v; want %d", 1+i, a.Sequence, err, 2+i)
		}
		if reqs[i].ID == "" && a.Replayed {
			t.Errorf("record %d has no request ID but was answered as a replay", 1+i)
		}
		acked = append(acked, a)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Drops())
	}
	head, n, err := s.Head(ctx, attribution.StreamAttribution, chainID)
	if err != nil || n != 4 || head != acked[3].AuditID {
		es, _ := s.Range(ctx, attribution.StreamAttribution, chainID, 1, 10)
		var ids []string
		for _, e := range es {
			ids = append(ids, e.AuditID[:8])
		}
		t.Fatalf("4 records were acknowledged but the chain holds %d (head %s): %v %v", n, head, ids, err)
	}
	for _, a := range acked {
		if e, err := s.Get(ctx, a.AuditID); err != nil || e.Sequence != a.Sequence {
			t.Errorf("acknowledged record %d (%s): Get = %+v, %v", a.Sequence, a.AuditID, e, err)
		}
	}
	r, err := s.Verify(ctx, attribution.StreamAttribution, chainID, verifyOpts(ks, chainID), 0)
	if err != nil || !r.Valid || r.Checked != 4 {
		t.Fatalf("verify: %v %+v", err, r)
	}
}

// scriptSizesHook records the records each appendLua call carries.
type scriptSizesHook struct {
	mu    sync.Mutex
	sizes []int
}

func (*scriptSizesHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*scriptSizesHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *scriptSizesHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			a := c.Args()
			if len(a) < 3 || fmt.Sprint(a[0]) != "evalsha" {
				continue
			}
			nkeys, _ := strconv.Atoi(fmt.Sprint(a[2]))
			if i := 3 + nkeys + 7; i < len(a) {
				n, _ := strconv.Atoi(fmt.Sprint(a[i]))
				h.mu.Lock()
				h.sizes = append(h.sizes, n)
				h.mu.Unlock()
			}
		}
		return next(ctx, cmds)
	}
}

// The records a Batch starts on one chain go to Redis in one script call,
// in the order they were started, where the chain's queue would otherwise
// have sent the first alone; nothing is sent before Send.
func TestBatchSendsEachChainsRecordsInOneScript(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	if err := appendScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	sizes := &scriptSizesHook{}
	rdb.AddHook(sizes)
	ks := testKeys(t)
	s := newStore(t, rdb, ks, Options{})
	chains := map[string]int{"batch-a": 6, "batch-b": 3}
	b := s.NewBatch()
	pend := map[string][]Pending{}
	for i := range 6 {
		for id, n := range chains {
			if i < n {
				pend[id] = append(pend[id], b.Start(ctx, attribution.StreamAttribution, id, payload(id, i), nil,
					Request{ID: fmt.Sprintf("0190b7c2-0000-7000-8000-%012x", len(id)*100+i), Fingerprint: "fp"}))
			}
		}
	}
	sizes.mu.Lock()
	early := len(sizes.sizes)
	sizes.mu.Unlock()
	if early != 0 {
		t.Fatalf("%d script calls before Send", early)
	}
	b.Send()
	for id, ps := range pend {
		for i, p := range ps {
			a, err := p.Wait()
			if err != nil || a.Sequence != uint64(i+1) {
				t.Fatalf("%s record %d: sequence %d, %v", id, i, a.Sequence, err)
			}
		}
		r, err := s.Verify(ctx, attribution.StreamAttribution, id, verifyOpts(ks, id), 0)
		if err != nil || !r.Valid || r.Checked != uint64(chains[id]) {
			t.Fatalf("verify %s: %v %+v", id, err, r)
		}
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	slices.Sort(sizes.sizes)
	if !slices.Equal(sizes.sizes, []int{3, 6}) {
		t.Fatalf("script calls carried %v records, want one call per chain (3 and 6)", sizes.sizes)
	}
}

// A Batch over several chains sends their script calls in one pipeline
// (one round trip, one MSET of index entries), and a chain busy with a
// call in flight does not hold the others' pipeline back: its records go
// with its next call.
func TestBatchOverSeveralChainsIsOnePipeline(t *testing.T) {
	const perChain = 2
	for _, be := range backends {
		for _, busy := range []bool{false, true} {
			name := be.name + "/idle chains"
			if busy {
				name = be.name + "/one chain in flight"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				o := newObservedStore(t, be)
				s, hold, ks := o.s, o.hold, o.ks
				chains := []string{"multi-a", "multi-b", "multi-c", "multi-d", "multi-e"}
				var lead Pending
				if busy {
					hold.armed.Store(true)
					lead = startNow(ctx, s, attribution.StreamAttribution, "multi-busy", payload("multi-busy", 0), Request{})
					<-hold.entered
				}
				b := s.NewBatch()
				pend := map[string][]Pending{}
				var busyPend []Pending
				for i := range perChain {
					for _, id := range chains {
						pend[id] = append(pend[id], b.Start(ctx, attribution.StreamAttribution, id, payload(id, i), nil,
							Request{ID: fmt.Sprintf("0190b7c2-0000-7000-8000-%012x", len(pend)*10+i), Fingerprint: "fp"}))
					}
					if busy {
						busyPend = append(busyPend, b.Start(ctx, attribution.StreamAttribution, "multi-busy", payload("multi-busy", 1+i), nil, Request{}))
					}
				}
				b.Send()
				for _, id := range chains {
					for i, p := range pend[id] {
						if a, err := p.Wait(); err != nil || a.Sequence != uint64(i+1) {
							t.Fatalf("%s record %d: sequence %d, %v", id, i, a.Sequence, err)
						}
					}
				}
				got := o.pipelines()
				if want := []int{len(chains) * perChain}; !slices.Equal(got, want) {
					t.Fatalf("pipelines carried %v records, want %v: every idle chain's call in one", got, want)
				}
				if busy {
					close(hold.gate)
					if _, err := lead.Wait(); err != nil {
						t.Fatal(err)
					}
					for i, p := range busyPend {
						if a, err := p.Wait(); err != nil || a.Sequence != uint64(i+2) {
							t.Fatalf("busy chain record %d: sequence %d, %v", i, a.Sequence, err)
						}
					}
				}
				if busy {
					chains = append(chains, "multi-busy")
				}
				for _, id := range chains {
					r, err := s.Verify(ctx, attribution.StreamAttribution, id, verifyOpts(ks, id), 0)
					if err != nil || !r.Valid {
						t.Fatalf("verify %s: %v %+v", id, err, r)
					}
				}
			})
		}
	}
}

// Records queued on several chains behind one pipeline in flight go out
// together in the next pipeline, when that pipeline is answered, instead
// of the first chain's call alone and the others behind it.
func TestQueuedCallsOfSeveralChainsFollowInOnePipeline(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			o := newObservedStore(t, be)
			s, hold, ks := o.s, o.hold, o.ks
			chains := []string{"follow-a", "follow-b", "follow-c", "follow-d"}
			hold.armed.Store(true)
			lead := s.NewBatch()
			var pend []Pending
			for _, id := range chains {
				pend = append(pend, lead.Start(ctx, attribution.StreamAttribution, id, payload(id, 0), nil, Request{}))
			}
			lead.Send()
			<-hold.entered
			// Each chain's queue is busy: these wait behind the pipeline
			// in flight, each sent as a request of its own.
			for _, id := range chains {
				pend = append(pend, startNow(ctx, s, attribution.StreamAttribution, id, payload(id, 1), Request{}))
			}
			close(hold.gate)
			for i, p := range pend {
				if a, err := p.Wait(); err != nil || a.Sequence != uint64(i/len(chains)+1) {
					t.Fatalf("record %d: sequence %d, %v", i, a.Sequence, err)
				}
			}
			got := o.pipelines()
			if want := []int{len(chains), len(chains)}; !slices.Equal(got, want) {
				t.Fatalf("pipelines carried %v records, want %v", got, want)
			}
			for _, id := range chains {
				if r, err := s.Verify(ctx, attribution.StreamAttribution, id, verifyOpts(ks, id), 0); err != nil || !r.Valid || r.Checked != 2 {
					t.Fatalf("verify %s: %v %+v", id, err, r)
				}
			}
		})
	}
}
