package upstream

import (
	"sync"
	"time"
)

// BreakerOptions configure the circuit breaker kept per upstream
// (scheme, host and port).
type BreakerOptions struct {
	// FailureThreshold is how many consecutive failed attempts open the
	// circuit. Failures are connection errors, timeouts and 5xx answers
	// other than 501; a 4xx is the upstream working as designed.
	// Default 5.
	FailureThreshold int
	// OpenFor is how long an open circuit refuses calls before it admits
	// a probe. Default 30 s.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls a half-open circuit admits at
	// once; the first success closes it, a failure opens it again.
	// Default 1.
	HalfOpenProbes int
}

func (o *BreakerOptions) defaults() {
	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 5
	}
	if o.OpenFor <= 0 {
		o.OpenFor = 30 * time.Second
	}
	if o.HalfOpenProbes <= 0 {
		o.HalfOpenProbes = 1
	}
}

// Circuit states, as CircuitState reports them.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half-open"
)

// verdict is what one call tells the breaker.
type verdict int

const (
	// neutral calls say nothing about the upstream (the caller went
	// away); they only release a half-open probe slot.
	neutral verdict = iota
	succeeded
	failed
)

type breaker struct {
	opts BreakerOptions
	now  func() time.Time

	mu       sync.Mutex
	state    string
	failures int
	openedAt time.Time
	probes   int
	// gen changes with every state change. A call's verdict counts only
	// in the generation that admitted it: in a half-open circuit that is
	// the probe's, so a call admitted before the circuit opened, which
	// may end at any time (timeout_seconds defaults to OpenFor), neither
	// takes the probe's slot nor decides for it.
	gen uint64
}

func newBreaker(opts BreakerOptions, now func() time.Time) *breaker {
	return &breaker{opts: opts, now: now, state: CircuitClosed}
}

// allow admits a call, or says how long until the circuit admits a
// probe. Every admitted call must be followed by done with the
// generation allow returned.
func (b *breaker) allow() (gen uint64, ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case CircuitOpen:
		waited := b.now().Sub(b.openedAt)
		if waited < b.opts.OpenFor {
			return 0, false, b.opts.OpenFor - waited
		}
		b.state, b.probes = CircuitHalfOpen, 0
		b.gen++
		fallthrough
	case CircuitHalfOpen:
		if b.probes >= b.opts.HalfOpenProbes {
			return 0, false, 0
		}
		b.probes++
	}
	return b.gen, true, 0
}

// done records the verdict of a call allow admitted in generation gen.
func (b *breaker) done(gen uint64, v verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != b.gen {
		// The circuit changed state since the call was admitted: what
		// the upstream did then says nothing about it now, and the call
		// holds no probe slot (open and the move to half-open reset
		// them). The probe decides (docs/bindings.md "Circuit breaker").
		return
	}
	switch b.state {
	case CircuitClosed:
		switch v {
		case failed:
			b.failures++
			if b.failures >= b.opts.FailureThreshold {
				b.open()
			}
		case succeeded:
			b.failures = 0
		}
	case CircuitHalfOpen:
		// Only probes are admitted in a half-open generation.
		b.probes--
		switch v {
		case failed:
			b.open()
		case succeeded:
			b.state, b.failures = CircuitClosed, 0
			b.gen++
		}
	}
}

func (b *breaker) open() {
	b.state, b.openedAt, b.failures, b.probes = CircuitOpen, b.now(), 0, 0
	b.gen++
}

func (b *breaker) current() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == CircuitOpen && b.now().Sub(b.openedAt) >= b.opts.OpenFor {
		return CircuitHalfOpen
	}
	return b.state
}
