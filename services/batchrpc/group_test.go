package batchrpc

import (
	"runtime"
	"sync"
	"testing"
)

// Items that wait while a batch is in flight go out together in the next
// batch, and every item is executed exactly once.
func TestGroupCommitsWaitingItemsTogether(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var batches [][]int
	first := true
	g := NewGroup(func(vs []int) {
		mu.Lock()
		hold := first
		first = false
		batches = append(batches, append([]int(nil), vs...))
		mu.Unlock()
		if hold {
			close(entered)
			<-release
		}
	}, 1, 100)
	var wg sync.WaitGroup
	wg.Go(func() { g.Do(0) })
	<-entered
	for i := 1; i <= 5; i++ {
		wg.Go(func() { g.Do(i) })
	}
	for {
		g.mu.Lock()
		n := len(g.pending)
		g.mu.Unlock()
		if n == 5 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if len(batches) != 2 || len(batches[0]) != 1 || len(batches[1]) != 5 {
		t.Fatalf("batches %v, want [0] then the five that waited", batches)
	}
	seen := map[int]bool{}
	for _, b := range batches {
		for _, v := range b {
			if seen[v] {
				t.Fatalf("item %d executed twice", v)
			}
			seen[v] = true
		}
	}
}

func TestGroupBoundsItsBatches(t *testing.T) {
	var mu sync.Mutex
	largest := 0
	g := NewGroup(func(vs []int) {
		mu.Lock()
		largest = max(largest, len(vs))
		mu.Unlock()
	}, 2, 3)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() { g.Do(i) })
	}
	wg.Wait()
	if largest > 3 {
		t.Fatalf("a batch of %d items, want at most 3", largest)
	}
}
