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

// Items started without waiting by one caller, with one flusher, are
// executed in the order they were started, each once, and the group is
// idle afterwards.
func TestGroupStartKeepsOrderWithOneFlusher(t *testing.T) {
	var mu sync.Mutex
	var got []int
	g := NewGroup(func(vs []int) {
		mu.Lock()
		got = append(got, vs...)
		mu.Unlock()
	}, 1, 4)
	var done []<-chan struct{}
	for i := range 50 {
		done = append(done, g.Start(i))
	}
	for _, d := range done {
		<-d
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("executed %v, want 0..49 in order", got)
		}
	}
	if len(got) != 50 {
		t.Fatalf("executed %d items, want 50", len(got))
	}
	for !g.Idle() {
		runtime.Gosched() // the last flusher is returning
	}
}

// recordingGroup is a Group of at most 100 items a batch whose exec
// records each batch; batches returns them so far.
func recordingGroup(maxFlushers int) (g *Group[int], batches func() [][]int) {
	var mu sync.Mutex
	var got [][]int
	g = NewGroup(func(vs []int) {
		mu.Lock()
		got = append(got, append([]int(nil), vs...))
		mu.Unlock()
	}, maxFlushers, 100)
	return g, func() [][]int {
		mu.Lock()
		defer mu.Unlock()
		return append([][]int(nil), got...)
	}
}

// Items queued under a Hold wait for its Release, then go out in one
// batch; a Do queued meanwhile waits with them.
func TestGroupSendsHeldItemsTogether(t *testing.T) {
	g, batches := recordingGroup(1)
	g.Hold()
	if g.Idle() {
		t.Fatal("a held group reports itself idle")
	}
	var done []<-chan struct{}
	for i := range 4 {
		done = append(done, g.Start(i))
	}
	var wg sync.WaitGroup
	wg.Go(func() { g.Do(4) })
	for {
		g.mu.Lock()
		n := len(g.pending)
		g.mu.Unlock()
		if n == 5 {
			break
		}
		runtime.Gosched()
	}
	if sent := len(batches()); sent != 0 {
		t.Fatalf("%d batches sent during the hold", sent)
	}
	g.Release()
	for _, d := range done {
		<-d
	}
	wg.Wait()
	if b := batches(); len(b) != 1 || len(b[0]) != 5 {
		t.Fatalf("batches %v, want the five held items in one", b)
	}
}

// ReleaseNow sends the held items in one batch, in the caller's
// goroutine, even while another Hold is still open; that Hold's Release
// then starts no send of its own when nothing is queued.
func TestGroupReleaseNowSendsDespiteOtherHolds(t *testing.T) {
	g, batches := recordingGroup(2)
	g.Hold() // the caller of ReleaseNow
	g.Hold() // another holder, released later
	var done []<-chan struct{}
	for i := range 4 {
		done = append(done, g.Start(i))
	}
	g.ReleaseNow()
	for _, d := range done {
		select {
		case <-d:
		default:
			t.Fatal("an item queued before ReleaseNow was not sent by it")
		}
	}
	if b := batches(); len(b) != 1 || len(b[0]) != 4 {
		t.Fatalf("batches %v, want the four items in one", b)
	}
	if g.Release() {
		t.Fatal("Release started a send with nothing queued")
	}
	if !g.Idle() {
		t.Fatal("the group is not idle after its last Release")
	}
}
