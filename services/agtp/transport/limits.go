package transport

import (
	"container/list"
	"net"
	"sync"
	"time"
)

// handshakeShedAge is how long a handshake must have run before a new
// connection may shed it at MaxHandshakes. A real client finishes a TLS
// 1.3 or QUIC handshake in a few round trips; one that has not after a
// second is slow or is not trying, and the newcomer is more likely to be
// served. Younger handshakes are never shed, so a burst of genuine
// clients larger than the backlog queues instead of shedding each other
// into a livelock.
const handshakeShedAge = time.Second

// handshakes is the handshake backlog (MaxHandshakes), TCP and QUIC
// together, oldest first.
type handshakes struct {
	max  int
	mu   sync.Mutex
	l    list.List     // of *pending
	free chan struct{} // poked (never blocks) when an entry leaves
}

// pending is one handshake in the backlog.
type pending struct {
	start time.Time
	elem  *list.Element // nil once done
	// shed closes the connection; nil while it cannot be closed yet (a
	// QUIC connection before the listener hands it over).
	shed func()
}

func newHandshakes(max int) *handshakes {
	return &handshakes{max: max, free: make(chan struct{}, 1)}
}

// admit adds a handshake to the backlog. At the limit it sheds the oldest
// handshake that can be shed if that one has run for handshakeShedAge,
// and otherwise reports false without adding anything. shed, called
// outside the lock, is the shed entry's closer.
//
// Entries that cannot be shed yet (QUIC attempts whose ClientHello the
// listener has not handed over) are passed over, not waited for: one
// that never gets that far holds its place until the handshake timeout,
// and at the front it would otherwise stop every other handshake from
// being shed for that long.
func (h *handshakes) admit(now time.Time, closer func()) (p *pending, shed bool, ok bool) {
	h.mu.Lock()
	var victim func()
	if h.l.Len() >= h.max {
		e := h.oldestSheddable()
		if e == nil || now.Sub(e.Value.(*pending).start) < handshakeShedAge {
			h.mu.Unlock()
			return nil, false, false
		}
		old := e.Value.(*pending)
		h.l.Remove(e)
		old.elem = nil
		victim = old.shed
	}
	p = &pending{start: now, shed: closer}
	p.elem = h.l.PushBack(p)
	h.mu.Unlock()
	if victim != nil {
		victim()
	}
	return p, victim != nil, true
}

// setShed makes a QUIC handshake sheddable once its connection exists.
func (h *handshakes) setShed(p *pending, closer func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.elem != nil {
		p.shed = closer
	}
}

// done takes a handshake out of the backlog: it completed, failed or was
// shed. Calling it again is a no-op.
func (h *handshakes) done(p *pending) {
	if p == nil {
		return
	}
	h.mu.Lock()
	if p.elem != nil {
		h.l.Remove(p.elem)
		p.elem = nil
	}
	h.mu.Unlock()
	select {
	case h.free <- struct{}{}:
	default:
	}
}

// nextShed is when the oldest handshake that can be shed becomes old
// enough to be, for a waiting accept loop; zero if there is none.
func (h *handshakes) nextShed() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.oldestSheddable(); e != nil {
		return e.Value.(*pending).start.Add(handshakeShedAge)
	}
	return time.Time{}
}

// oldestSheddable is the first entry, in the backlog's order of age, that
// has a closer; nil if none has. h.mu must be held.
func (h *handshakes) oldestSheddable() *list.Element {
	for e := h.l.Front(); e != nil; e = e.Next() {
		if e.Value.(*pending).shed != nil {
			return e
		}
	}
	return nil
}

func (h *handshakes) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l.Len()
}

// resetClose closes a connection the server refuses before its handshake
// with a reset: the client learns at once, and the server keeps no
// TIME_WAIT state for a flood of them.
func resetClose(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	nc.Close()
}
