package batchrpc

import "sync"

// Group is group commit: concurrent callers hand it items, and each batch
// of items waiting together goes to exec in one call (one pipeline, one
// round trip). There is no background goroutine: a caller that finds
// fewer than maxFlushers batches in flight sends everything queued,
// again while more queues, until its own item is done, then hands the
// queue to a new goroutine, so that no caller waits on strangers'
// traffic. A lone item is a batch of one and waits for nothing.
type Group[T any] struct {
	exec        func([]T)
	maxFlushers int
	maxBatch    int

	mu       sync.Mutex
	pending  []*groupItem[T]
	flushers int
	// held counts Holds without their Release: while any is open, queuing
	// an item starts no send.
	held int
}

type groupItem[T any] struct {
	v    T
	done chan struct{}
}

// NewGroup sends batches of at most maxBatch items to exec, at most
// maxFlushers at once. exec must answer every item it is given before it
// returns.
func NewGroup[T any](exec func([]T), maxFlushers, maxBatch int) *Group[T] {
	return &Group[T]{exec: exec, maxFlushers: max(1, maxFlushers), maxBatch: max(1, maxBatch)}
}

// Do queues v and returns once the batch that carried it was executed.
func (g *Group[T]) Do(v T) {
	it, send := g.enqueue(v)
	if send {
		g.flush(it, false)
	}
	<-it.done
}

// enqueue queues v and reports whether the caller must send (it took a
// free flusher slot).
func (g *Group[T]) enqueue(v T) (*groupItem[T], bool) {
	it := &groupItem[T]{v: v, done: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(g.pending, it)
	if g.held == 0 && g.flushers < g.maxFlushers {
		g.flushers++
		return it, true
	}
	return it, false
}

// Start queues v and returns at once, with a channel that is closed once
// the batch that carried v was executed. If fewer than maxFlushers batches
// are in flight, a new goroutine sends the queue. Items started one after
// another by one caller go to exec in that order (with maxFlushers 1, they
// are also executed in that order).
func (g *Group[T]) Start(v T) <-chan struct{} {
	it, send := g.enqueue(v)
	if send {
		go g.flush(nil, false)
	}
	return it.done
}

// Hold keeps the items queued from now on from starting a send until the
// matching Release, so that a caller with several items (a batch request
// that carries many records of one chain) has them go out in one batch
// instead of the first alone. A send in flight finishes its batch but takes
// no more while a Hold is open. Every Hold needs its Release, or the queue
// waits for ever.
func (g *Group[T]) Hold() {
	g.mu.Lock()
	g.held++
	g.mu.Unlock()
}

// Release ends a Hold; once none is open, what is queued is sent. It
// reports whether it started that send: if not, what is queued goes out
// with a send already in flight or after another Hold's Release.
func (g *Group[T]) Release() bool {
	if !g.release(false) {
		return false
	}
	go g.flush(nil, false)
	return true
}

// ReleaseNow ends a Hold and sends what is queued in the caller's
// goroutine, when a flusher slot is free, even while other Holds are open:
// the Holder that queued the last of its items (with Start) sends them
// without a goroutine hand-off, and Holds that overlap one another cannot
// keep the queue from being sent.
func (g *Group[T]) ReleaseNow() {
	if g.release(true) {
		g.flush(nil, true)
	}
}

// release ends a Hold and reports whether the caller must send what is
// queued (it took a free flusher slot): once no Hold is open, or at once
// when force is set.
func (g *Group[T]) release(force bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held--
	send := (force || g.held == 0) && len(g.pending) > 0 && g.flushers < g.maxFlushers
	if send {
		g.flushers++
	}
	return send
}

// Queued reports whether items wait for a send.
func (g *Group[T]) Queued() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) > 0
}

// Idle reports whether nothing is queued, held or being executed.
func (g *Group[T]) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.flushers == 0 && len(g.pending) == 0 && g.held == 0
}

// flush sends batches until own is done (own == nil: until the queue is
// empty), then hands what is still queued to a new goroutine. It stops
// early while a Hold is open, except for its first batch when force is set
// (ReleaseNow).
func (g *Group[T]) flush(own *groupItem[T], force bool) {
	for ; ; force = false {
		g.mu.Lock()
		if len(g.pending) == 0 || g.held > 0 && !force {
			// Under a Hold, what is queued waits for its Release (or a
			// ReleaseNow), which sends it whole.
			g.flushers--
			g.mu.Unlock()
			return
		}
		n := min(len(g.pending), g.maxBatch)
		batch := make([]*groupItem[T], n)
		copy(batch, g.pending)
		rest := copy(g.pending, g.pending[n:])
		clear(g.pending[rest:])
		g.pending = g.pending[:rest]
		g.mu.Unlock()
		vs := make([]T, n)
		for i, it := range batch {
			vs[i] = it.v
		}
		g.exec(vs)
		for _, it := range batch {
			close(it.done)
		}
		if own != nil && isDone(own.done) {
			go g.flush(nil, false) // keeps this flusher's slot
			return
		}
	}
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
