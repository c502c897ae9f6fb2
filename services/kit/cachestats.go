package kit

import "sync/atomic"

// CacheStats counts a cache's lookups that it answered (hits) and that
// went to the source (misses), for the hit-ratio metrics; the zero value
// is ready and it is safe for concurrent use.
type CacheStats struct {
	hits, misses atomic.Uint64
}

// Count records one lookup.
func (s *CacheStats) Count(hit bool) {
	if hit {
		s.hits.Add(1)
	} else {
		s.misses.Add(1)
	}
}

// Load returns the counts so far.
func (s *CacheStats) Load() (hits, misses uint64) {
	return s.hits.Load(), s.misses.Load()
}
