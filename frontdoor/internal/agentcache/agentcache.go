// Package agentcache keeps the front door's cache of agent records. Entries
// are dropped when identitysvc's WatchAgents reports a change, so a revoked
// or suspended agent is refused within moments, and a lookup that misses
// costs one ResolveAgent call.
package agentcache

import (
	"container/list"
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/streamwatch"
)

// Cache maps Agent-IDs to records. A nil record is a cached "not
// registered"; negative entries expire after NegativeTTL so a freshly
// registered agent is found without waiting for a watch event.
type Cache struct {
	client      identityv1.IdentityServiceClient
	log         *slog.Logger
	NegativeTTL time.Duration
	// MaxEntries bounds memory; at the bound the least recently used
	// entry makes room, which only costs it a re-lookup.
	MaxEntries int

	mu      sync.Mutex
	entries map[string]*list.Element // of *entry
	lru     list.List                // most recently used first
	// gen changes with every watch event and reset. A lookup takes it
	// before asking identitysvc and its answer is stored only if it has
	// not changed, so an answer given before a revocation cannot be put
	// back after the event that replaced or dropped the entry. It also
	// keys the lookups in flight, so that a lookup starting after a change
	// never shares the answer of one that started before it.
	gen   uint64
	group singleflight.Group
	// watching is true while the watch stream is connected; without it,
	// entries cannot be trusted to be fresh and are kept only briefly.
	watching bool

	// OnSession is called with the Session-ID of every session event
	// (suspended, resumed), so session caches drop it; set before Watch.
	OnSession func(sessionID string)
	// OnReset is called whenever the whole cache is cleared (the watch
	// opened, resynced or broke; watching says whether it is live), so
	// caches that follow the same events clear theirs; set before Watch.
	OnReset func(watching bool)

	// Stats counts the lookups the cache answered and those that asked
	// identitysvc, for the hit-ratio metric.
	Stats kit.CacheStats
}

type entry struct {
	id      string
	rec     *identityv1.AgentRecord
	expires time.Time
}

// New returns an empty cache.
func New(client identityv1.IdentityServiceClient, log *slog.Logger) *Cache {
	return &Cache{client: client, log: log, NegativeTTL: 2 * time.Second, MaxEntries: 100_000, entries: map[string]*list.Element{}}
}

// Lookup returns the record of agentID, or nil when it is not registered.
func (c *Cache) Lookup(ctx context.Context, agentID string) (*identityv1.AgentRecord, error) {
	rec, ok, gen := c.get(agentID, time.Now())
	c.Stats.Count(ok)
	if ok {
		return rec, nil
	}
	v, err, _ := c.group.Do(strconv.FormatUint(gen, 10)+"/"+agentID, func() (any, error) {
		resp, err := c.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: agentID})
		if status.Code(err) == codes.NotFound {
			c.putIfCurrent(gen, agentID, nil, time.Now().Add(c.NegativeTTL))
			return (*identityv1.AgentRecord)(nil), nil
		}
		if err != nil {
			return nil, err
		}
		expiry := c.positiveExpiry()
		if pending(resp.GetAgent()) {
			expiry = time.Now().Add(c.NegativeTTL)
		}
		c.putIfCurrent(gen, agentID, resp.GetAgent(), expiry)
		return resp.GetAgent(), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*identityv1.AgentRecord), nil
}

// get returns the fresh entry of id, marking it used, or the generation
// a lookup of id starts from.
func (c *Cache) get(id string, now time.Time) (rec *identityv1.AgentRecord, ok bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, found := c.entries[id]; found {
		e := el.Value.(*entry)
		if e.expires.IsZero() || now.Before(e.expires) {
			c.lru.MoveToFront(el)
			return e.rec, true, 0
		}
	}
	return nil, false, c.gen
}

func (c *Cache) positiveExpiry() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching {
		return time.Time{}
	}
	return time.Now().Add(time.Second)
}

// putIfCurrent stores a lookup's answer unless a watch event or reset
// came after the lookup began (gen).
func (c *Cache) putIfCurrent(gen uint64, id string, rec *identityv1.AgentRecord, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	c.store(id, rec, expires)
}

// changed applies a watch event that carries the agent's new record: it
// is the newest word, so it is stored and every lookup in flight loses
// its right to store.
func (c *Cache) changed(id string, rec *identityv1.AgentRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.store(id, rec, time.Time{})
}

// store puts an entry, evicting the least recently used ones at
// MaxEntries. The caller holds mu.
func (c *Cache) store(id string, rec *identityv1.AgentRecord, expires time.Time) {
	if el, ok := c.entries[id]; ok {
		e := el.Value.(*entry)
		e.rec, e.expires = rec, expires
		c.lru.MoveToFront(el)
		return
	}
	for c.lru.Len() > 0 && c.lru.Len() >= c.MaxEntries {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.entries, oldest.Value.(*entry).id)
	}
	c.entries[id] = c.lru.PushFront(&entry{id: id, rec: rec, expires: expires})
}

// pending is a registered agent that is not activated yet: registration
// is followed at once by activation, so such a record is not kept, or a
// caller that registers and calls straight away could be refused.
func pending(rec *identityv1.AgentRecord) bool {
	return rec.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED
}

// Drop forgets one agent, including any answer still on its way.
func (c *Cache) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if el, ok := c.entries[id]; ok {
		c.lru.Remove(el)
		delete(c.entries, id)
	}
}

func (c *Cache) reset(watching bool) {
	c.mu.Lock()
	c.gen++
	c.entries = map[string]*list.Element{}
	c.lru.Init()
	c.watching = watching
	c.mu.Unlock()
	if c.OnReset != nil {
		c.OnReset(watching)
	}
}

// Watch follows identitysvc's WatchAgents until ctx is done. Every event
// replaces or drops the agent's entry; a resync or a broken stream clears
// the whole cache, and entries are trusted without expiry only while a
// stream is open.
func (c *Cache) Watch(ctx context.Context) error {
	streamwatch.Follow(ctx, c.log, streamwatch.Stream[*identityv1.WatchAgentsResponse]{
		Open: func(ctx context.Context) (streamwatch.Receiver[*identityv1.WatchAgentsResponse], error) {
			stream, err := c.client.WatchAgents(ctx, &identityv1.WatchAgentsRequest{})
			if err != nil {
				return nil, err
			}
			c.reset(true)
			return stream, nil
		},
		Receive: func(ev *identityv1.WatchAgentsResponse) {
			switch {
			case ev.GetSessionId() != "":
				if c.OnSession != nil {
					c.OnSession(ev.GetSessionId())
				}
			case ev.GetResync():
				c.reset(true)
			case ev.GetAgent() != nil && !pending(ev.GetAgent()):
				c.changed(ev.GetAgentId(), ev.GetAgent())
			default:
				c.Drop(ev.GetAgentId())
			}
		},
		Interrupted: func() { c.reset(false) },
		Warning:     "agent watch interrupted; cache cleared, reconnecting",
	})
	return nil
}
