package batchrpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Every item gets its own response or error at its own index, and runs
// exactly once, whether or not items wait.
func TestServeAnswersEveryItemOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		waits bool
	}{
		{"running", false},
		{"waiting", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := make([]int, 40)
			for i := range items {
				items[i] = i
			}
			calls := make([]atomic.Int32, len(items))
			resps, errs := Serve(context.Background(), quiet, "/test/Batch", items, func(ctx context.Context, i int) (int, error) {
				calls[i].Add(1)
				if tc.waits {
					Blocking(ctx)
				}
				if i%5 == 0 {
					return 0, status.Error(codes.FailedPrecondition, fmt.Sprint("refused ", i))
				}
				return i * 10, nil
			})
			for i := range items {
				if n := calls[i].Load(); n != 1 {
					t.Errorf("item %d ran %d times", i, n)
				}
				if i%5 == 0 {
					if status.Code(errs[i]) != codes.FailedPrecondition || resps[i] != 0 {
						t.Errorf("item %d: %v, %v; want its own error", i, resps[i], errs[i])
					}
					continue
				}
				if errs[i] != nil || resps[i] != i*10 {
					t.Errorf("item %d: %v, %v; want %d", i, resps[i], errs[i], i*10)
				}
			}
		})
	}
}

// Items that never wait run one after another on the caller's goroutine:
// Serve starts no goroutine for them.
func TestServeRunsItemsThatNeverWaitOnTheCaller(t *testing.T) {
	items := make([]int, 50)
	var inFlight, most atomic.Int32
	before := goroutinesCreated()
	_, errs := Serve(context.Background(), quiet, "/test/Batch", items, func(context.Context, int) (int, error) {
		n := inFlight.Add(1)
		if n > most.Load() {
			most.Store(n)
		}
		inFlight.Add(-1)
		return 1, nil
	})
	created := goroutinesCreated() - before
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		t.Fatalf("errors: %v", errs)
	}
	if created != 0 || most.Load() != 1 {
		t.Errorf("%d goroutines created, %d items at once; want 0 and 1", created, most.Load())
	}
}

// Items that say they wait overlap: each of these waits until all have
// started, which only completes if none holds up the others.
func TestServeOverlapsItemsThatWait(t *testing.T) {
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	items := make([]int, n)
	_, errs := Serve(context.Background(), quiet, "/test/Batch", items, func(ctx context.Context, _ int) (int, error) {
		Blocking(ctx)
		started.Done()
		return 0, waitAll(all)
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
}

// Batches served at once, with items that wait, each get their own
// answers: workers that served one batch serve the next.
func TestServeConcurrentBatches(t *testing.T) {
	var wg sync.WaitGroup
	for b := range 20 {
		wg.Go(func() {
			for range 20 {
				items := make([]int, 1+b%12)
				for i := range items {
					items[i] = b*100 + i
				}
				resps, errs := Serve(context.Background(), quiet, "/test/Batch", items, func(ctx context.Context, v int) (int, error) {
					Blocking(ctx)
					runtime.Gosched()
					return v + 1, nil
				})
				for i, v := range items {
					if errs[i] != nil || resps[i] != v+1 {
						t.Errorf("batch %d item %d: %v, %v", b, i, resps[i], errs[i])
					}
				}
			}
		})
	}
	wg.Wait()
}

// A panicking item gets an Internal error of its own; the others are
// answered, on the calling goroutine or after a wait alike.
func TestServePanickingItemFailsAlone(t *testing.T) {
	for _, waits := range []bool{false, true} {
		t.Run(fmt.Sprint("waits=", waits), func(t *testing.T) {
			items := []int{0, 1, 2, 3}
			resps, errs := Serve(context.Background(), quiet, "/test/Batch", items, func(ctx context.Context, v int) (int, error) {
				if waits {
					Blocking(ctx)
				}
				if v == 1 {
					panic("item one")
				}
				return v + 1, nil
			})
			for i, v := range items {
				switch {
				case v == 1:
					if status.Code(errs[i]) != codes.Internal {
						t.Errorf("panicking item: %v; want Internal", errs[i])
					}
				case errs[i] != nil || resps[i] != v+1:
					t.Errorf("item %d: %v, %v", i, resps[i], errs[i])
				}
			}
		})
	}
}

// Blocking outside Serve does nothing.
func TestBlockingOutsideServe(t *testing.T) {
	before := goroutinesCreated()
	Blocking(context.Background())
	if created := goroutinesCreated() - before; created != 0 {
		t.Errorf("%d goroutines created", created)
	}
}

// waitAll waits for all to close; the bound only turns a hang (items that
// do not overlap) into a failure.
func waitAll(all chan struct{}) error {
	select {
	case <-all:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the other items never started")
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
