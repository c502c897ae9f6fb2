// Package store keeps the catalog service's shared state in Redis: the
// endpoints registered through the admin API (a hash at
// rediskeys.Endpoints, one field per "METHOD /path"), the change channel
// (rediskeys.CatalogEvents) and the manifest version counter
// (rediskeys.CatalogVersion).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agtpsuite/agtp/catalogsvc/internal/registry"
	"github.com/agtpsuite/agtp/services/rediskeys"
)

// DefaultMaxEndpoints bounds the runtime endpoints, tombstones included,
// one catalog holds unless configured otherwise.
const DefaultMaxEndpoints = 10000

// Redis is the Redis-backed store.
type Redis struct {
	rdb redis.UniversalClient
	max int
}

// NewRedis wraps a client; the catalog holds at most maxEndpoints runtime
// entries (<= 0: DefaultMaxEndpoints).
func NewRedis(rdb redis.UniversalClient, maxEndpoints int) *Redis {
	if maxEndpoints <= 0 {
		maxEndpoints = DefaultMaxEndpoints
	}
	return &Redis{rdb: rdb, max: maxEndpoints}
}

// MaxEndpoints is the most runtime entries the store holds.
func (s *Redis) MaxEndpoints() int { return s.max }

// ErrFull is Put's answer when the entry would add a key to a hash that
// already holds MaxEndpoints.
var ErrFull = errors.New("store: the runtime endpoint limit is reached")

// Endpoints returns the runtime entries, tombstones included, and how
// many the hash holds. A hash over MaxEndpoints (written by a version
// that checked the limit apart from the write, or by an operator) is
// not refused, since then no replica could start on it: the first
// MaxEndpoints keys in byte order are returned, the order registry.Build
// layers them in, so every replica serves the same subset.
func (s *Redis) Endpoints(ctx context.Context) ([]registry.Runtime, int, error) {
	m, err := s.rdb.HGetAll(ctx, rediskeys.Endpoints).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("store: read endpoints: %w", err)
	}
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) > s.max {
		keys = keys[:s.max]
	}
	out := make([]registry.Runtime, 0, len(keys))
	for _, k := range keys {
		var r registry.Runtime
		if err := json.Unmarshal([]byte(m[k]), &r); err != nil {
			return nil, 0, fmt.Errorf("store: endpoint %q: %w", k, err)
		}
		r.Key = k
		out = append(out, r)
	}
	return out, len(m), nil
}

// Count returns the number of runtime entries.
func (s *Redis) Count(ctx context.Context) (int64, error) {
	return s.rdb.HLen(ctx, rediskeys.Endpoints).Result()
}

// putScript writes a field unless it is new and the hash already holds
// ARGV[3] fields. Checking and writing in one script keeps the limit
// across replicas writing at once; replacing a stored key (a new
// definition, or a tombstone over a runtime entry) never adds one.
var putScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// Put stores an entry (a definition or a tombstone) and tells the other
// replicas. It returns ErrFull when the entry's key is new and the hash
// holds MaxEndpoints entries.
func (s *Redis) Put(ctx context.Context, r registry.Runtime) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ok, err := putScript.Run(ctx, s.rdb, []string{rediskeys.Endpoints}, r.Key, b, s.max).Int()
	if err != nil {
		return fmt.Errorf("store: write endpoint: %w", err)
	}
	if ok == 0 {
		return ErrFull
	}
	return s.publish(ctx, r.Key)
}

// Remove forgets an entry and tells the other replicas.
func (s *Redis) Remove(ctx context.Context, key string) error {
	if err := s.rdb.HDel(ctx, rediskeys.Endpoints, key).Err(); err != nil {
		return fmt.Errorf("store: delete endpoint: %w", err)
	}
	return s.publish(ctx, key)
}

func (s *Redis) publish(ctx context.Context, key string) error {
	if err := s.rdb.Publish(ctx, rediskeys.CatalogEvents, key).Err(); err != nil {
		return fmt.Errorf("store: publish: %w", err)
	}
	return nil
}

// Subscribe returns the change channel's subscription.
func (s *Redis) Subscribe(ctx context.Context) *redis.PubSub {
	return s.rdb.Subscribe(ctx, rediskeys.CatalogEvents)
}

// versionScript bumps the counter only when the content hash changed, so
// replicas that build the same configuration get the same version and
// timestamps, and the counter never decreases or repeats.
var versionScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'hash')
if cur ~= ARGV[1] then
  redis.call('HINCRBY', KEYS[1], 'counter', 1)
  redis.call('HSET', KEYS[1], 'hash', ARGV[1], 'updated', ARGV[2])
  redis.call('HSETNX', KEYS[1], 'issued', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'counter', 'updated', 'issued')
`)

// Version returns the version of a configuration's content hash.
func (s *Redis) Version(ctx context.Context, hash string, now time.Time) (registry.Version, error) {
	res, err := versionScript.Run(ctx, s.rdb, []string{rediskeys.CatalogVersion}, hash, now.UTC().Format(time.RFC3339Nano)).Slice()
	if err != nil {
		return registry.Version{}, fmt.Errorf("store: version: %w", err)
	}
	if len(res) != 3 {
		return registry.Version{}, errors.New("store: version: bad reply")
	}
	str := func(v any) string { s, _ := v.(string); return s }
	n, err := strconv.ParseUint(str(res[0]), 10, 64)
	if err != nil {
		return registry.Version{}, fmt.Errorf("store: version counter: %w", err)
	}
	up, err1 := time.Parse(time.RFC3339Nano, str(res[1]))
	is, err2 := time.Parse(time.RFC3339Nano, str(res[2]))
	if err := errors.Join(err1, err2); err != nil {
		return registry.Version{}, fmt.Errorf("store: version times: %w", err)
	}
	return registry.Version{Counter: n, Updated: up, Issued: is}, nil
}

// Memory is the version counter of a catalog service without Redis. It is
// seeded from the clock so that a restart does not reuse a version, which
// is as far as a process without shared storage can go.
type Memory struct {
	mu      sync.Mutex
	counter uint64
	hash    string
	updated time.Time
	issued  time.Time
}

// NewMemory starts a counter at the current Unix time.
func NewMemory(now time.Time) *Memory { return &Memory{counter: uint64(now.Unix())} }

// Version bumps the counter when the hash changed.
func (m *Memory) Version(_ context.Context, hash string, now time.Time) (registry.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hash != hash {
		m.counter++
		m.hash = hash
		m.updated = now
		if m.issued.IsZero() {
			m.issued = now
		}
	}
	return registry.Version{Counter: m.counter, Updated: m.updated, Issued: m.issued}, nil
}
