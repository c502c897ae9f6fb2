package policyclient

import "time"

// SetClock replaces the clock a Reusing reads, so that tests move time
// instead of waiting for it.
func SetClock(r *Reusing, now func() time.Time) { r.now = now }

// Len is the number of decisions r keeps, live or expired.
func (r *Reusing) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}
