package rediskeys

import (
	"math"
	"time"
)

// KeepUntil is how long to keep a key that must live until a time a
// caller chose, and then for extra: until−now, clamped to between zero and
// limit, plus extra. The sum saturates rather than overflow and is at
// least a millisecond, because a far-future time would otherwise turn it
// negative, and Redis takes a TTL that is not positive badly: go-redis's
// SET then sets no expiry at all, keeping the key for ever, and PEXPIRE
// deletes the key.
func KeepUntil(until, now time.Time, limit, extra time.Duration) time.Duration {
	live := min(max(until.Sub(now), 0), limit)
	if extra > math.MaxInt64-live {
		return math.MaxInt64
	}
	return max(live+extra, time.Millisecond)
}
