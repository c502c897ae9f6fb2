package rediskeys

import (
	"math"
	"testing"
	"time"
)

func TestKeepUntil(t *testing.T) {
	now := time.Now()
	const limit = 30 * 24 * time.Hour
	for _, tc := range []struct {
		name  string
		until time.Time
		extra time.Duration
		want  time.Duration
	}{
		{"a day ahead", now.Add(24 * time.Hour), time.Hour, 25 * time.Hour},
		{"passed", now.Add(-time.Hour), time.Hour, time.Hour},
		{"beyond the limit", now.Add(2 * limit), time.Hour, limit + time.Hour},
		{"year 9999, where the plain sum overflows", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), time.Hour, limit + time.Hour},
		{"an extra of centuries", now.Add(time.Hour), math.MaxInt64 - time.Minute, math.MaxInt64},
		{"under a millisecond", now, time.Microsecond, time.Millisecond},
		{"nothing at all", now.Add(-time.Hour), 0, time.Millisecond},
	} {
		if got := KeepUntil(tc.until, now, limit, tc.extra); got != tc.want {
			t.Errorf("%s: KeepUntil = %v, want %v", tc.name, got, tc.want)
		}
	}
}
