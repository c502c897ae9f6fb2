package upstream

import (
	"fmt"
	"testing"
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
		if ok, _ := failing.allow(); !ok {
			t.Fatal("a closed circuit refused a call")
		}
		failing.done(failed)
	}
	if failing.current() != CircuitOpen {
		t.Fatalf("circuit %s after %d failures", failing.current(), e.opts.Breaker.FailureThreshold)
	}
	for i := range 10 * maxBreakers {
		b := e.breaker(fmt.Sprintf("https://h%d.example", i))
		if ok, _ := b.allow(); ok {
			b.done(succeeded)
		}
	}
	e.mu.Lock()
	n, kept := len(e.breakers), e.breakers["https://failing.example"] == failing
	e.mu.Unlock()
	if n > maxBreakers || !kept {
		t.Fatalf("%d breakers kept after %d hosts (at most %d), the open one kept: %v", n, 10*maxBreakers, maxBreakers, kept)
	}
}
