package upstream

import (
	"fmt"
	"testing"
	"time"
)

// The breakers of upstreams that are not failing are dropped once there
// are many: a caller naming a new webhook host each time leaves none
// behind for long, while an open circuit stays.
func TestBreakersOfHealthyUpstreamsAreDropped(t *testing.T) {
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	failing := e.breaker("https://failing.example")
	for range e.opts.Breaker.FailureThreshold {
		gen, ok, _ := failing.allow()
		if !ok {
			t.Fatal("a closed circuit refused a call")
		}
		failing.done(gen, failed)
	}
	if failing.current() != CircuitOpen {
		t.Fatalf("circuit %s after %d failures", failing.current(), e.opts.Breaker.FailureThreshold)
	}
	for i := range 10 * maxBreakers {
		b := e.breaker(fmt.Sprintf("https://h%d.example", i))
		if gen, ok, _ := b.allow(); ok {
			b.done(gen, succeeded)
		}
	}
	e.mu.Lock()
	n, kept := len(e.breakers), e.breakers["https://failing.example"] == failing
	e.mu.Unlock()
	if n > maxBreakers || !kept {
		t.Fatalf("%d breakers kept after %d hosts (at most %d), the open one kept: %v", n, 10*maxBreakers, maxBreakers, kept)
	}
}

// TestHalfOpenAdmitsOneProbe: a half-open circuit admits one probe
// (HalfOpenProbes 1) and the probe decides. Calls admitted while the
// circuit was still closed may end while it is half-open (timeout_seconds
// defaults to 30 s, as long as OpenFor): whatever they say, they neither
// free the probe's slot nor close or reopen the circuit.
func TestHalfOpenAdmitsOneProbe(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b := newBreaker(BreakerOptions{FailureThreshold: 2, OpenFor: 30 * time.Second, HalfOpenProbes: 1}, func() time.Time { return now })
	admit := func(what string) uint64 {
		t.Helper()
		gen, ok, _ := b.allow()
		if !ok {
			t.Fatalf("%s refused in state %s", what, b.current())
		}
		return gen
	}
	slowOK, slowFailing, slowGone := admit("a slow call"), admit("a slow call"), admit("a slow call")
	for range 2 {
		b.done(admit("a failing call"), failed)
	}
	if s := b.current(); s != CircuitOpen {
		t.Fatalf("state %s after 2 failures, want open", s)
	}
	now = now.Add(31 * time.Second)
	probe := admit("the probe")
	for _, slow := range []struct {
		name string
		gen  uint64
		v    verdict
	}{{"succeeded", slowOK, succeeded}, {"failed", slowFailing, failed}, {"went away", slowGone, neutral}} {
		b.done(slow.gen, slow.v)
		if s := b.current(); s != CircuitHalfOpen {
			t.Errorf("a call admitted before the circuit opened %s while the probe is in flight: state %s, want half-open", slow.name, s)
		}
		if _, ok, _ := b.allow(); ok {
			t.Fatalf("a call admitted before the circuit opened %s, and a second call was admitted while the one probe is in flight (HalfOpenProbes 1)", slow.name)
		}
	}
	b.done(probe, succeeded)
	if s := b.current(); s != CircuitClosed {
		t.Errorf("state %s after the probe succeeded, want closed", s)
	}
}
