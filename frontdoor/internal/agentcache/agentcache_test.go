package agentcache

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/testkit"
)

// fakeIdentity is identitysvc's ResolveAgent and WatchAgents, served over
// real gRPC by the test kit's stub. The first ResolveAgent of an agent answers first and waits
// for hold to close; later ones answer then at once. A nil record answers
// NotFound.
type fakeIdentity struct {
	first, then *identityv1.AgentRecord
	hold        chan struct{} // nil: the first call does not wait
	entered     chan struct{} // one send per call, when it has started
	events      chan *identityv1.WatchAgentsResponse

	mu    sync.Mutex
	calls map[string]int
}

func newFake(first, then *identityv1.AgentRecord, hold chan struct{}) *fakeIdentity {
	return &fakeIdentity{first: first, then: then, hold: hold, entered: make(chan struct{}, 16),
		events: make(chan *identityv1.WatchAgentsResponse), calls: map[string]int{}}
}

func (f *fakeIdentity) ResolveAgent(ctx context.Context, req *identityv1.ResolveAgentRequest) (*identityv1.ResolveAgentResponse, error) {
	f.mu.Lock()
	f.calls[req.GetAgentId()]++
	n := f.calls[req.GetAgentId()]
	f.mu.Unlock()
	f.entered <- struct{}{}
	rec := f.then
	if n == 1 {
		rec = f.first
		if f.hold != nil {
			select {
			case <-f.hold:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if rec == nil {
		return nil, status.Error(codes.NotFound, "no such agent")
	}
	// Every agent gets the configured record under its own ID.
	out := &identityv1.AgentRecord{AgentId: req.GetAgentId(), Status: rec.GetStatus()}
	return &identityv1.ResolveAgentResponse{Agent: out}, nil
}

func (f *fakeIdentity) WatchAgents(_ *identityv1.WatchAgentsRequest, stream grpc.ServerStreamingServer[identityv1.WatchAgentsResponse]) error {
	for {
		select {
		case ev := <-f.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (f *fakeIdentity) resolves(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

// startCache serves f and returns a cache on it.
func startCache(t *testing.T, f *fakeIdentity) *Cache {
	t.Helper()
	stub := &testkit.IdentityStub{ResolveAgentF: f.ResolveAgent, WatchAgentsF: f.WatchAgents}
	return New(stub.Serve(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// watch runs c.Watch until the test ends and returns once the stream is
// open.
func watch(t *testing.T, c *Cache) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Watch(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testkit.WaitFor(t, 5*time.Second, "watch open", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.watching
	})
}

func (c *Cache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// cached is what the cache holds for id, without a lookup.
func (c *Cache) cached(id string) (*identityv1.AgentRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[id]
	if !ok {
		return nil, false
	}
	return el.Value.(*entry).rec, true
}

type lookupResult struct {
	rec *identityv1.AgentRecord
	err error
}

func lookupAsync(c *Cache, id string) <-chan lookupResult {
	out := make(chan lookupResult, 1)
	go func() {
		rec, err := c.Lookup(context.Background(), id)
		out <- lookupResult{rec, err}
	}()
	return out
}

func record(st identityv1.AgentStatus) *identityv1.AgentRecord {
	return &identityv1.AgentRecord{AgentId: "a1", Status: st}
}

// A lookup that is answered before a watch event but returns after it
// must not put its answer back: the cache ends with the event's word, and
// a lookup that starts after the event does not share the old answer.
func TestLookupInFlightDuringEventDoesNotStoreStaleAnswer(t *testing.T) {
	const (
		active    = identityv1.AgentStatus_AGENT_STATUS_ACTIVE
		suspended = identityv1.AgentStatus_AGENT_STATUS_SUSPENDED
		retired   = identityv1.AgentStatus_AGENT_STATUS_RETIRED
	)
	tests := []struct {
		name  string
		first *identityv1.AgentRecord // the in-flight lookup's answer; nil = not found
		event *identityv1.WatchAgentsResponse
		then  *identityv1.AgentRecord // identitysvc's answer after the event
	}{
		{"suspended while resolving", record(active), &identityv1.WatchAgentsResponse{AgentId: "a1", Agent: record(suspended)}, record(suspended)},
		{"retired while resolving", record(active), &identityv1.WatchAgentsResponse{AgentId: "a1", Agent: record(retired)}, record(retired)},
		{"dropped while resolving", record(active), &identityv1.WatchAgentsResponse{AgentId: "a1"}, record(suspended)},
		{"resync while resolving", record(active), &identityv1.WatchAgentsResponse{Resync: true}, record(suspended)},
		{"registered while a miss resolves", nil, &identityv1.WatchAgentsResponse{AgentId: "a1", Agent: record(active)}, record(active)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold := make(chan struct{})
			f := newFake(tt.first, tt.then, hold)
			c := startCache(t, f)
			watch(t, c)

			stale := lookupAsync(c, "a1")
			<-f.entered // identitysvc has the request; its answer is the old one
			gen := c.generation()
			f.events <- tt.event
			testkit.WaitFor(t, 5*time.Second, "event applied", func() bool { return c.generation() != gen })

			// A lookup after the event gets the new word, from the cache
			// or from a resolve of its own, never the one in flight.
			select {
			case r := <-lookupAsync(c, "a1"):
				if r.err != nil || r.rec.GetStatus() != tt.then.GetStatus() {
					t.Fatalf("lookup after the event: %v %v, want %v", r.rec, r.err, tt.then.GetStatus())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a lookup after the event waited for the lookup in flight before it")
			}

			close(hold)
			r := <-stale
			if r.err != nil || r.rec.GetStatus() != tt.first.GetStatus() {
				t.Fatalf("in-flight lookup: %v %v, want its own answer %v", r.rec, r.err, tt.first.GetStatus())
			}
			rec, ok := c.cached("a1")
			if !ok || rec.GetStatus() != tt.then.GetStatus() {
				t.Fatalf("cache holds %v (present %v), want %v", rec, ok, tt.then.GetStatus())
			}
			n := f.resolves("a1")
			if rec, err := c.Lookup(context.Background(), "a1"); err != nil || rec.GetStatus() != tt.then.GetStatus() || f.resolves("a1") != n {
				t.Fatalf("next lookup: %v %v after %d resolves, want %v from the cache", rec, err, f.resolves("a1")-n, tt.then.GetStatus())
			}
		})
	}
}

// At MaxEntries the least recently used entry makes room; the others stay.
func TestFullCacheEvictsLeastRecentlyUsed(t *testing.T) {
	f := newFake(record(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), record(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), nil)
	c := startCache(t, f)
	c.MaxEntries = 3
	watch(t, c) // entries are kept without expiry while watching
	steps := []struct {
		id       string
		resolves bool // the lookup asks identitysvc
	}{
		{"a", true}, {"b", true}, {"c", true},
		{"a", false}, // a is now used more recently than b
		{"d", true},  // full: b, the least recently used, goes
		{"a", false}, {"c", false}, {"d", false},
		{"b", true}, // a is now the least recently used
		{"c", false}, {"d", false},
		{"a", true},
	}
	for i, st := range steps {
		before := f.resolves(st.id)
		rec, err := c.Lookup(context.Background(), st.id)
		if err != nil || rec.GetAgentId() != st.id {
			t.Fatalf("step %d: lookup %s: %v %v", i, st.id, rec, err)
		}
		if asked := f.resolves(st.id) > before; asked != st.resolves {
			t.Fatalf("step %d: lookup %s asked identitysvc: %v, want %v", i, st.id, asked, st.resolves)
		}
		c.mu.Lock()
		n, l := len(c.entries), c.lru.Len()
		c.mu.Unlock()
		if n > c.MaxEntries || n != l {
			t.Fatalf("step %d: %d entries, %d in recency order, bound %d", i, n, l, c.MaxEntries)
		}
	}
}

// Caches that follow the same events (the front door's Session-ID
// bindings) are told whenever this one is cleared: when the watch opens
// and when identitysvc resyncs it, having perhaps missed events.
func TestResetsAreReportedToOnReset(t *testing.T) {
	f := newFake(record(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), record(identityv1.AgentStatus_AGENT_STATUS_ACTIVE), nil)
	c := startCache(t, f)
	resets := make(chan bool, 4)
	c.OnReset = func(watching bool) { resets <- watching }
	watch(t, c)
	next := func(what string) bool {
		t.Helper()
		select {
		case w := <-resets:
			return w
		case <-time.After(5 * time.Second):
			t.Fatalf("OnReset was not called when %s", what)
			return false
		}
	}
	if !next("the watch opened") {
		t.Fatal("OnReset(false) when the watch opened, want true")
	}
	f.events <- &identityv1.WatchAgentsResponse{Resync: true}
	if !next("identitysvc resynced the watch") {
		t.Fatal("OnReset(false) on a resync, want true")
	}
}
