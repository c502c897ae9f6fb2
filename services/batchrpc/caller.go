package batchrpc

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Result is one item's answer in a batch.
type Result[Resp any] struct {
	Resp Resp
	Err  error
}

// Options tune a Caller. Zero values take the defaults.
type Options struct {
	// MaxInFlight bounds the calls (unary or batch) in flight at once
	// (default 2). A call that finds them all busy waits and goes out with
	// the others that waited, in the next batch; so one request in flight
	// goes unary at once, and under load each batch carries what arrived
	// during the previous round trip. A call that finds a free slot
	// first lets the goroutines ready to run have their turn, so that
	// callers released together (by one batch's answer) share a batch
	// too.
	MaxInFlight int
	// MaxBatch bounds the items of one batch (default and maximum
	// MaxItems).
	MaxBatch int
	// Timeout bounds a batch whose items do not all have a deadline
	// (default 30 s); otherwise a batch lasts until its latest item's
	// deadline.
	Timeout time.Duration
}

// Stats count what a Caller sent.
type Stats struct {
	// Unary is the calls sent alone, Batches the batch calls, and Batched
	// the items those carried.
	Unary, Batches, Batched uint64
	// Waiting is the calls queued for the next batch now.
	Waiting int
}

// Caller coalesces calls of one unary RPC: a call that finds a free slot
// (Options.MaxInFlight) takes it and, once the goroutines ready to run
// have had their turn, goes out with the calls that queued meanwhile, in
// one batch call, or unary if none did; calls that arrive while every
// slot is busy wait and go out together, in one batch call, when a slot
// frees. Each caller gets its own item's response or error. A caller
// whose context ends stops waiting; an item still queued is then dropped,
// one already sent is answered to nobody, and either way the other items
// of its batch are unaffected (the batch runs on a context of its own).
type Caller[Req, Resp any] struct {
	one   func(context.Context, Req) (Resp, error)
	batch func(context.Context, []Req) ([]Result[Resp], error)
	opts  Options

	mu       sync.Mutex
	inFlight int
	pending  []*call[Req, Resp]

	// calls holds answered calls for reuse: a call and its channel per
	// request would be two allocations on every internal hop.
	calls sync.Pool

	// noBatch is set once the server answered a batch Unimplemented (one
	// that predates the batch RPC): every call goes unary from then on.
	noBatch atomic.Bool

	unary, batches, batched atomic.Uint64
}

// A call is answered exactly once, by a send on done (buffered, so the
// sender never waits for a caller that gave up); whoever answers it does
// not touch it afterwards. Only a call whose caller took the answer is
// reused: one whose caller gave up may still be answered.
type call[Req, Resp any] struct {
	ctx  context.Context
	req  Req
	res  Result[Resp]
	done chan struct{}
}

// answer delivers cl's result to its caller.
func (cl *call[Req, Resp]) answer() { cl.done <- struct{}{} }

func (c *Caller[Req, Resp]) newCall(ctx context.Context, req Req) *call[Req, Resp] {
	cl, _ := c.calls.Get().(*call[Req, Resp])
	if cl == nil {
		cl = &call[Req, Resp]{done: make(chan struct{}, 1)}
	}
	cl.ctx, cl.req = ctx, req
	return cl
}

// putCall keeps cl, answered and its answer taken, for a later call.
func (c *Caller[Req, Resp]) putCall(cl *call[Req, Resp]) {
	var zero Req
	cl.ctx, cl.req, cl.res = nil, zero, Result[Resp]{}
	c.calls.Put(cl)
}

// NewCaller coalesces calls of one (the unary RPC) into batch (the batch
// RPC, which must return one result per request, in order).
func NewCaller[Req, Resp any](one func(context.Context, Req) (Resp, error),
	batch func(context.Context, []Req) ([]Result[Resp], error), opts Options) *Caller[Req, Resp] {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 2
	}
	if opts.MaxBatch <= 0 || opts.MaxBatch > MaxItems {
		opts.MaxBatch = MaxItems
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	return &Caller[Req, Resp]{one: one, batch: batch, opts: opts}
}

// Stats returns what the Caller has sent so far.
func (c *Caller[Req, Resp]) Stats() Stats {
	c.mu.Lock()
	waiting := len(c.pending)
	c.mu.Unlock()
	return Stats{Unary: c.unary.Load(), Batches: c.batches.Load(), Batched: c.batched.Load(), Waiting: waiting}
}

// Do makes one call, unary or in a batch.
func (c *Caller[Req, Resp]) Do(ctx context.Context, req Req) (Resp, error) {
	if c.noBatch.Load() {
		return c.unaryCall(ctx, req)
	}
	cl := c.newCall(ctx, req)
	c.mu.Lock()
	c.pending = append(c.pending, cl)
	if c.inFlight >= c.opts.MaxInFlight {
		c.mu.Unlock()
		return c.wait(cl)
	}
	c.inFlight++
	c.mu.Unlock()
	// A free slot: let the goroutines ready to run have their turn first.
	// Under load, callers arrive in waves (one batch's answer releases all
	// its callers at once), and sending at once would give the first of
	// each wave a stream of its own; when nothing else is runnable this
	// returns at once, and a lone call goes unary.
	runtime.Gosched()
	c.mu.Lock()
	b := c.takeLocked()
	c.mu.Unlock()
	switch {
	case len(b) == 0:
		// A slot freed meanwhile and took the queue, this call with it.
		c.release()
	case len(b) == 1 && b[0] == cl:
		c.unary.Add(1)
		resp, err := c.one(ctx, req)
		c.release()
		c.putCall(cl) // never queued elsewhere: nobody else answers it
		return resp, err
	default:
		go c.send(b)
	}
	return c.wait(cl)
}

// unaryCall sends req alone, outside the slots.
func (c *Caller[Req, Resp]) unaryCall(ctx context.Context, req Req) (Resp, error) {
	c.unary.Add(1)
	return c.one(ctx, req)
}

// wait returns cl's answer, or gives up when its caller does.
func (c *Caller[Req, Resp]) wait(cl *call[Req, Resp]) (Resp, error) {
	select {
	case <-cl.done:
		resp, err := cl.res.Resp, cl.res.Err
		c.putCall(cl)
		return resp, err
	case <-cl.ctx.Done():
		var zero Resp
		return zero, status.FromContextError(cl.ctx.Err()).Err()
	}
}

// takeLocked removes the next batch from the queue (empty when nothing
// waits). c.mu must be held.
func (c *Caller[Req, Resp]) takeLocked() []*call[Req, Resp] {
	if len(c.pending) == 0 {
		return nil
	}
	n := min(len(c.pending), c.opts.MaxBatch)
	b := make([]*call[Req, Resp], n)
	copy(b, c.pending)
	// Shift rather than reslice, so the queue's array is reused and does
	// not keep answered calls reachable.
	rest := copy(c.pending, c.pending[n:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	return b
}

// release frees a slot and sends what waits, while slots are free.
func (c *Caller[Req, Resp]) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	for c.inFlight < c.opts.MaxInFlight && len(c.pending) > 0 {
		c.inFlight++
		go c.send(c.takeLocked())
	}
}

// send sends one batch (the items whose callers still wait) and answers
// its items.
func (c *Caller[Req, Resp]) send(b []*call[Req, Resp]) {
	defer c.release()
	live := b[:0]
	for _, cl := range b {
		if cl.ctx.Err() != nil {
			continue // its caller has returned; never sent
		}
		live = append(live, cl)
	}
	switch {
	case len(live) == 0:
		return
	case len(live) == 1 || c.noBatch.Load():
		for _, cl := range live {
			c.unary.Add(1)
			cl.res.Resp, cl.res.Err = c.one(cl.ctx, cl.req)
			cl.answer()
		}
		return
	}
	ctx, cancel := c.batchContext(live)
	defer cancel()
	reqs := make([]Req, len(live))
	for i, cl := range live {
		reqs[i] = cl.req
	}
	c.batches.Add(1)
	c.batched.Add(uint64(len(live)))
	res, err := c.batch(ctx, reqs)
	if err == nil && len(res) != len(live) {
		err = status.Errorf(codes.Internal, "batch answered %d results for %d items", len(res), len(live))
	}
	if status.Code(err) == codes.Unimplemented {
		// A server without the batch RPC: answer these one by one and
		// stop batching.
		c.noBatch.Store(true)
		var wg sync.WaitGroup
		for _, cl := range live {
			wg.Go(func() {
				cl.res.Resp, cl.res.Err = c.one(cl.ctx, cl.req)
				cl.answer()
			})
		}
		wg.Wait()
		return
	}
	for i, cl := range live {
		if err != nil {
			cl.res.Err = err
		} else {
			cl.res = res[i]
		}
		cl.answer()
	}
}

// batchContext is the context a batch runs on: the first item's values
// (trace context), none of its callers' cancellation, and the latest of
// their deadlines (Options.Timeout when one has none).
func (c *Caller[Req, Resp]) batchContext(live []*call[Req, Resp]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, cl := range live {
		d, ok := cl.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	base := context.WithoutCancel(live[0].ctx)
	if latest.IsZero() {
		return context.WithTimeout(base, c.opts.Timeout)
	}
	return context.WithDeadline(base, latest)
}
