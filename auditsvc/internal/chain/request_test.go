package chain

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/deploy/clustertest"
	"github.com/agtpsuite/agtp/services/testkit"
)

// backend is a Redis deployment request entries must work on.
type backend struct {
	name  string
	start func(t *testing.T) redis.UniversalClient
}

// backends are one node and a Redis Cluster, where a script may only touch
// keys of one slot: the request entry must carry the chain's hash tag.
var backends = []backend{
	{"single-node", func(t *testing.T) redis.UniversalClient { return testkit.StartRedis(t).Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return clustertest.StartCluster(t, 3, 0).Client }},
}

// A request whose response was lost is sent again, to the same or another
// auditsvc replica, with or without other records appended in between.
// Exactly one record exists afterwards, and the retry is answered with it.
func TestRetriedRequestAppendsOnce(t *testing.T) {
	type env struct{ a, b *Store }
	cases := []struct {
		name string
		// before runs before the first append (e.g. to warm b's cache).
		before func(t *testing.T, e env, chain string)
		// between runs between the first append and the retry.
		between func(t *testing.T, e env, chain string)
		// retry picks the store the retry goes to.
		retry     func(e env) *Store
		retryID   string // request ID of the retry; "" = none at all
		retryFP   string
		wantErr   error
		wantSame  bool // the retry answers with the first record
		wantCount uint64
	}{
		{name: "same replica", retry: func(e env) *Store { return e.a }, retryID: "req-1", retryFP: "fp", wantSame: true, wantCount: 1},
		{name: "other replica", retry: func(e env) *Store { return e.b }, retryID: "req-1", retryFP: "fp", wantSame: true, wantCount: 1},
		{
			// b's cached head is the one the first record was signed
			// against, so b signs byte-identical JWS (Ed25519 is
			// deterministic); its index write must not be undone.
			name: "other replica with the head the record was signed against",
			before: func(t *testing.T, e env, chain string) {
				if _, err := e.b.Append(context.Background(), attribution.StreamAttribution, chain, payload(chain, 100), nil); err != nil {
					t.Fatal(err)
				}
			},
			retry: func(e env) *Store { return e.b }, retryID: "req-1", retryFP: "fp", wantSame: true, wantCount: 2,
		},
		{
			name: "records appended in between",
			between: func(t *testing.T, e env, chain string) {
				for i := range 3 {
					if _, err := e.b.Append(context.Background(), attribution.StreamAttribution, chain, payload(chain, 200+i), nil); err != nil {
						t.Fatal(err)
					}
				}
			},
			retry: func(e env) *Store { return e.a }, retryID: "req-1", retryFP: "fp", wantSame: true, wantCount: 4,
		},
		{name: "other content under the same ID", retry: func(e env) *Store { return e.b }, retryID: "req-1", retryFP: "other", wantErr: ErrRequestReused, wantCount: 1},
		{name: "another ID", retry: func(e env) *Store { return e.a }, retryID: "req-2", retryFP: "fp", wantCount: 2},
		{name: "no ID appends again", retry: func(e env) *Store { return e.a }, wantCount: 2},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.start(t)
			ks := testKeys(t)
			e := env{newStore(t, rdb, ks, Options{}), newStore(t, rdb, ks, Options{})}
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					chain := "agent-" + string(rune('a'+i))
					if tc.before != nil {
						tc.before(t, e, chain)
					}
					p := payload(chain, 0)
					first, err := e.a.AppendOnce(ctx, attribution.StreamAttribution, chain, p, nil, Request{ID: "req-1", Fingerprint: "fp"})
					if err != nil || first.Replayed {
						t.Fatalf("first append: %v %+v", err, first)
					}
					if tc.between != nil {
						tc.between(t, e, chain)
					}
					var req Request
					if tc.retryID != "" {
						req = Request{ID: tc.retryID, Fingerprint: tc.retryFP}
					}
					again, err := tc.retry(e).AppendOnce(ctx, attribution.StreamAttribution, chain, p, nil, req)
					switch {
					case tc.wantErr != nil:
						if !errors.Is(err, tc.wantErr) {
							t.Fatalf("retry: err = %v, want %v", err, tc.wantErr)
						}
					case err != nil:
						t.Fatalf("retry: %v", err)
					case tc.wantSame:
						if !again.StoredAt.Equal(first.StoredAt.Truncate(time.Millisecond)) {
							t.Fatalf("retry stored_at %v, want the first record's %v", again.StoredAt, first.StoredAt)
						}
						first.Replayed, first.StoredAt, again.StoredAt = true, time.Time{}, time.Time{}
						if again != first {
							t.Fatalf("retry answered\n%+v\nwant the first record\n%+v", again, first)
						}
					default:
						if again.Replayed || again.AuditID == first.AuditID {
							t.Fatalf("retry did not append: %+v", again)
						}
					}
					_, n, err := e.a.Head(ctx, attribution.StreamAttribution, chain)
					if err != nil || n != tc.wantCount {
						t.Fatalf("chain has %d records (%v), want %d", n, err, tc.wantCount)
					}
					v, err := e.a.Verify(ctx, attribution.StreamAttribution, chain, verifyOpts(ks, chain), 0)
					if err != nil || !v.Valid {
						t.Fatalf("verify: %v %+v", err, v)
					}
					got, err := e.b.Get(ctx, first.AuditID)
					if err != nil || got.JWS != first.JWS || got.Sequence != first.Sequence {
						t.Fatalf("the first record by Audit-ID: %v %+v", err, got)
					}
					if ttl := rdb.PTTL(ctx, requestKey(attribution.StreamAttribution, chain, "req-1")).Val(); ttl <= 23*time.Hour || ttl > DefaultRequestWindow {
						t.Fatalf("request entry TTL %v, want the 24 h window", ttl)
					}
				})
			}
		})
	}
}

// The request entry is per stream and per chain: the same ID elsewhere is
// another request.
func TestRequestIDIsScopedToItsStreamAndChain(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, testkit.StartRedis(t).Client(t), testKeys(t), Options{})
	req := Request{ID: "same-id", Fingerprint: "fp"}
	for _, target := range []struct{ stream, chain string }{
		{attribution.StreamAttribution, "a"},
		{attribution.StreamAttribution, "b"},
		{attribution.StreamLifecycle, "a"},
		{"confirm", "a"},
		{"rcns-attempt", "a"},
	} {
		a, err := s.AppendOnce(ctx, target.stream, target.chain, payload(target.chain, 0), nil, req)
		if err != nil || a.Replayed || a.Sequence != 1 {
			t.Fatalf("%s/%s: %v %+v", target.stream, target.chain, err, a)
		}
	}
}

// After the window the entry is gone and the ID names a new request.
func TestRequestEntryExpiresAfterTheWindow(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	const window = 300 * time.Millisecond
	s := newStore(t, rdb, testKeys(t), Options{RequestWindow: window})
	req := Request{ID: "req", Fingerprint: "fp"}
	first, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", payload("x", 0), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	key := requestKey(attribution.StreamAttribution, "x", "req")
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > window {
		t.Fatalf("request entry TTL %v, want at most %v", ttl, window)
	}
	testkit.WaitFor(t, 5*time.Second, "the request entry to expire", func() bool { return rdb.Exists(ctx, key).Val() == 0 })
	again, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", payload("x", 0), nil, req)
	if err != nil || again.Replayed || again.Sequence != 2 || again.PreviousAuditID != first.AuditID {
		t.Fatalf("after the window: %v %+v", err, again)
	}
}

// Request entries written by the first release (a hash under another key)
// are honoured until they expire: a retry of a request appended before an
// upgrade gets that record, or is refused when its content differs.
func TestFirstReleaseRequestEntriesAreHonoured(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.start(t)
			s := newStore(t, rdb, testKeys(t), Options{})
			first, err := s.Append(ctx, attribution.StreamAttribution, "x", payload("x", 0), nil)
			if err != nil {
				t.Fatal(err)
			}
			// What the first release's script wrote with the record.
			legacy := firstReleaseRequestKey(attribution.StreamAttribution, "x", "old")
			if err := rdb.HSet(ctx, legacy, requestFingerprint, "fp", requestSequence, "1", requestAuditID, first.AuditID,
				requestOutcomeStored, "0").Err(); err != nil {
				t.Fatal(err)
			}
			rdb.PExpire(ctx, legacy, time.Hour)
			// Queued together with a new request, so both kinds of entry
			// are read in one script call.
			pNew := startNow(ctx, s, attribution.StreamAttribution, "x", payload("x", 1), Request{ID: "new", Fingerprint: "fp"})
			pOld := startNow(ctx, s, attribution.StreamAttribution, "x", payload("x", 0), Request{ID: "old", Fingerprint: "fp"})
			if a, err := pNew.Wait(); err != nil || a.Replayed || a.Sequence != 2 {
				t.Fatalf("new request: %v %+v", err, a)
			}
			a, err := pOld.Wait()
			if err != nil || !a.Replayed || a.AuditID != first.AuditID || a.JWS != first.JWS || a.Sequence != 1 {
				t.Fatalf("retry of a first-release request: %v %+v, want record %s", err, a, first.AuditID)
			}
			if _, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", payload("x", 2), nil, Request{ID: "old", Fingerprint: "other"}); !errors.Is(err, ErrRequestReused) {
				t.Fatalf("other content under a first-release ID: %v, want ErrRequestReused", err)
			}
			if _, n, err := s.Head(ctx, attribution.StreamAttribution, "x"); err != nil || n != 2 {
				t.Fatalf("chain has %d records (%v), want 2", n, err)
			}
		})
	}
}

// One request ID twice in one script call (a retry queued behind its own
// first attempt): the second finds the entry the script wrote for the
// first.
func TestRequestIDTwiceInOneBatchAppendsOnce(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	s := newStore(t, rdb, testKeys(t), Options{})
	req := Request{ID: "req", Fingerprint: "fp"}
	// A first record keeps the chain's queue busy, so the rest wait and go
	// out together.
	ps := []Pending{startNow(ctx, s, attribution.StreamAttribution, "x", payload("x", 0), Request{})}
	for range 2 {
		ps = append(ps, startNow(ctx, s, attribution.StreamAttribution, "x", payload("x", 1), req))
	}
	ps = append(ps, startNow(ctx, s, attribution.StreamAttribution, "x", payload("x", 2), Request{ID: "req", Fingerprint: "other"}))
	var got []Appended
	for _, p := range ps[:3] {
		a, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if got[1].Replayed || !got[2].Replayed || got[2].AuditID != got[1].AuditID || got[2].Sequence != 2 {
		t.Fatalf("the request's two attempts: %+v / %+v, want one record", got[1], got[2])
	}
	if _, err := ps[3].Wait(); !errors.Is(err, ErrRequestReused) {
		t.Fatalf("other content under the ID: %v, want ErrRequestReused", err)
	}
	if _, n, err := s.Head(ctx, attribution.StreamAttribution, "x"); err != nil || n != 2 {
		t.Fatalf("chain has %d records (%v), want 2", n, err)
	}
}

// Retries racing each other on two replicas (the first attempt still in
// flight when the caller gives up on it) append one record between them.
func TestConcurrentRetriesAppendOnce(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	ks := testKeys(t)
	stores := []*Store{newStore(t, rdb, ks, Options{}), newStore(t, rdb, ks, Options{})}
	p := payload("x", 0)
	var (
		mu       sync.Mutex
		ids      = map[string]int{}
		appended int
		wg       sync.WaitGroup
	)
	for i := range 16 {
		wg.Go(func() {
			a, err := stores[i%2].AppendOnce(ctx, attribution.StreamAttribution, "x", p, nil, Request{ID: "req", Fingerprint: "fp"})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[a.AuditID]++
			if !a.Replayed {
				appended++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || appended != 1 {
		t.Fatalf("answers %v, %d appends; want one record for all", ids, appended)
	}
	if _, n, err := stores[0].Head(ctx, attribution.StreamAttribution, "x"); err != nil || n != 1 {
		t.Fatalf("chain has %d records (%v), want 1", n, err)
	}
}

// The reply to an append is lost (the connection drops after Redis ran the
// script): the store cannot know and answers ErrUnavailable. The caller's
// retry with the same request ID gets the record instead of a second one.
func TestRetryAfterLostReplyGetsTheAppendedRecord(t *testing.T) {
	ctx := context.Background()
	rdb := testkit.StartRedis(t).Client(t)
	if err := appendScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	var lose sync.Once
	rdb.AddHook(loseReplyHook{once: &lose})
	ks := testKeys(t)
	s := newStore(t, rdb, ks, Options{})
	p := payload("x", 0)
	req := Request{ID: "req", Fingerprint: "fp"}
	if _, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", p, nil, req); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append with a lost reply: %v, want ErrUnavailable", err)
	}
	a, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", p, nil, req)
	if err != nil || !a.Replayed || a.Sequence != 1 || a.PreviousAuditID != attribution.ZeroAuditID {
		t.Fatalf("retry: %v %+v", err, a)
	}
	if _, err := attribution.Verify(a.JWS, attribution.VerifyOptions{Keys: ks}); err != nil || attribution.AuditID(a.JWS) != a.AuditID {
		t.Fatalf("replayed record: %v", err)
	}
	if _, n, err := s.Head(ctx, attribution.StreamAttribution, "x"); err != nil || n != 1 {
		t.Fatalf("chain has %d records (%v), want 1", n, err)
	}
	if st := s.Stats(); st.Replays != 1 || st.UnknownOutcomes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// loseReplyHook runs the first pipeline that appends and then reports a
// broken connection for all of its commands.
type loseReplyHook struct{ once *sync.Once }

func (loseReplyHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loseReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h loseReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		lost := false
		if carriesAppend(cmds) {
			h.once.Do(func() { lost = true })
		}
		if lost {
			err = errors.New("read: connection reset by peer")
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}

func TestAppendOnceRefusesBadRequests(t *testing.T) {
	s := newStore(t, testkit.StartRedis(t).Client(t), testKeys(t), Options{})
	for name, req := range map[string]Request{
		"no fingerprint": {ID: "req"},
		"no ID":          {Fingerprint: "fp"},
		"too long":       {ID: strings.Repeat("a", MaxRequestID+1), Fingerprint: "fp"},
		"hash tag":       {ID: "{x}", Fingerprint: "fp"},
		"separator":      {ID: "a:b", Fingerprint: "fp"},
		"space":          {ID: "a b", Fingerprint: "fp"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.AppendOnce(context.Background(), attribution.StreamAttribution, "x", payload("x", 0), nil, req); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

// A replayed record is in the stream once, so the archive gets it once: a
// second archive entry would be a duplicate sequence to VerifyEntries.
func TestReplayIsNotArchivedAgain(t *testing.T) {
	ctx := context.Background()
	var archived []attribution.Entry
	s := newStore(t, testkit.StartRedis(t).Client(t), testKeys(t), Options{OnAppend: func(e attribution.Entry) { archived = append(archived, e) }})
	for range 2 {
		if _, err := s.AppendOnce(ctx, attribution.StreamAttribution, "x", payload("x", 0), nil, Request{ID: "req", Fingerprint: "fp"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(archived) != 1 || archived[0].Sequence != 1 {
		t.Fatalf("archived %+v, want the one record", archived)
	}
}
