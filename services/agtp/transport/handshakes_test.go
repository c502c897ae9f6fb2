package transport

import (
	"testing"
	"time"
)

// TestHandshakeBacklogShedsPastEntriesItCannotShed: at the limit, the
// oldest handshake that can be shed goes once it is old enough, even
// behind older ones that cannot be shed yet (QUIC attempts not handed
// over); a backlog with nothing to shed refuses the newcomer.
func TestHandshakeBacklogShedsPastEntriesItCannotShed(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	old, young := start, start.Add(handshakeShedAge*3/2)
	now := start.Add(2 * handshakeShedAge)
	for _, tc := range []struct {
		name     string
		backlog  []bool // sheddable, oldest first; the first two are old, the rest young
		shedAt   int    // index of the entry shed, -1 for none
		admitted bool
		next     time.Time // nextShed before the newcomer
	}{
		{"oldest sheddable", []bool{true, true, true}, 0, true, old.Add(handshakeShedAge)},
		{"past an unsheddable front", []bool{false, true, true}, 1, true, old.Add(handshakeShedAge)},
		{"only young ones sheddable", []bool{false, false, true}, -1, false, young.Add(handshakeShedAge)},
		{"nothing sheddable", []bool{false, false, false}, -1, false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandshakes(len(tc.backlog))
			closed := make([]bool, len(tc.backlog))
			for i, sheddable := range tc.backlog {
				at := old
				if i >= 2 {
					at = young
				}
				var closer func()
				if sheddable {
					closer = func() { closed[i] = true }
				}
				if _, _, ok := h.admit(at, closer); !ok {
					t.Fatalf("entry %d not admitted below the limit", i)
				}
			}
			if got := h.nextShed(); !got.Equal(tc.next) {
				t.Errorf("nextShed = %v, want %v", got, tc.next)
			}
			_, shed, ok := h.admit(now, func() {})
			if ok != tc.admitted || shed != (tc.shedAt >= 0) {
				t.Fatalf("admit: ok %v, shed %v; want %v, %v", ok, shed, tc.admitted, tc.shedAt >= 0)
			}
			for i, c := range closed {
				if c != (i == tc.shedAt) {
					t.Errorf("entry %d closed: %v", i, c)
				}
			}
			if want := len(tc.backlog); h.len() != want {
				t.Errorf("backlog holds %d, want %d", h.len(), want)
			}
		})
	}
}
