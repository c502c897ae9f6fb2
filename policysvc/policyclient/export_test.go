package policyclient

import "time"

// SetClock replaces the clock a Reusing reads, so that tests move time
// instead of waiting for it.
func SetClock(r *Reusing, now func() time.Time) { r.now = now }
