// Package agentcache keeps the front door's cache of agent records. Entries
// are dropped when identitysvc's WatchAgents reports a change, so a revoked
// or suspended agent is refused within moments, and a lookup that misses
// costs one ResolveAgent call.
package agentcache

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/streamwatch"
)

// Cache maps Agent-IDs to records. A nil record is a cached "not
// registered"; negative entries expire after NegativeTTL so a freshly
// registered agent is found without waiting for a watch event.
type Cache struct {
	client      identityv1.IdentityServiceClient
	log         *slog.Logger
	NegativeTTL time.Duration
	// MaxEntries bounds memory; the cache is cleared when it is reached,
	// which only costs re-lookups.
	MaxEntries int

	mu      sync.RWMutex
	entries map[string]entry
	group   singleflight.Group
	// watching is true while the watch stream is connected; without it,
	// entries cannot be trusted to be fresh and are kept only briefly.
	watching bool

	// OnSession is called with the Session-ID of every session event
	// (suspended, resumed), so session caches drop it; set before Watch.
	OnSession func(sessionID string)
}

type entry struct {
	rec     *identityv1.AgentRecord
	expires time.Time
}

// New returns an empty cache.
func New(client identityv1.IdentityServiceClient, log *slog.Logger) *Cache {
	return &Cache{client: client, log: log, NegativeTTL: 2 * time.Second, MaxEntries: 100_000, entries: map[string]entry{}}
}

// Lookup returns the record of agentID, or nil when it is not registered.
func (c *Cache) Lookup(ctx context.Context, agentID string) (*identityv1.AgentRecord, error) {
	now := time.Now()
	c.mu.RLock()
	e, ok := c.entries[agentID]
	c.mu.RUnlock()
	if ok && (e.expires.IsZero() || now.Before(e.expires)) {
		return e.rec, nil
	}
	v, err, _ := c.group.Do(agentID, func() (any, error) {
		resp, err := c.client.ResolveAgent(ctx, &identityv1.ResolveAgentRequest{AgentId: agentID})
		if status.Code(err) == codes.NotFound {
			c.put(agentID, nil, time.Now().Add(c.NegativeTTL))
			return (*identityv1.AgentRecord)(nil), nil
		}
		if err != nil {
			return nil, err
		}
		expiry := c.positiveExpiry()
		if pending(resp.GetAgent()) {
			expiry = time.Now().Add(c.NegativeTTL)
		}
		c.put(agentID, resp.GetAgent(), expiry)
		return resp.GetAgent(), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*identityv1.AgentRecord), nil
}

func (c *Cache) positiveExpiry() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.watching {
		return time.Time{}
	}
	return time.Now().Add(time.Second)
}

func (c *Cache) put(id string, rec *identityv1.AgentRecord, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.MaxEntries {
		c.entries = map[string]entry{}
	}
	c.entries[id] = entry{rec: rec, expires: expires}
}

// pending is a registered agent that is not activated yet: registration
// is followed at once by activation, so such a record is not kept, or a
// caller that registers and calls straight away could be refused.
func pending(rec *identityv1.AgentRecord) bool {
	return rec.GetStatus() == identityv1.AgentStatus_AGENT_STATUS_UNSPECIFIED
}

// Drop forgets one agent.
func (c *Cache) Drop(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
	c.group.Forget(id)
}

func (c *Cache) reset(watching bool) {
	c.mu.Lock()
	c.entries = map[string]entry{}
	c.watching = watching
	c.mu.Unlock()
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
				c.put(ev.GetAgentId(), ev.GetAgent(), time.Time{})
				c.group.Forget(ev.GetAgentId())
			default:
				c.Drop(ev.GetAgentId())
			}
		},
		Interrupted: func() { c.reset(false) },
		Warning:     "agent watch interrupted; cache cleared, reconnecting",
	})
	return nil
}
