package batchrpc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/services/grpcerr"
)

// held is a unary function that holds its first call until release is
// closed, so that later calls queue behind it.
func held() (one func(context.Context, int) (int, error), entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	one = func(_ context.Context, v int) (int, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
		return v * 10, nil
	}
	return one, entered, release
}

// queueBehindAHeldCall makes one held call, queues n more and lets the
// held one finish; it returns each queued call's answer.
func queueBehindAHeldCall(t *testing.T, c *Caller[int, int], entered, release chan struct{}, n int) ([]int, []error) {
	t.Helper()
	go func() { _, _ = c.Do(context.Background(), 0) }()
	<-entered
	got, errs := make([]int, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = c.Do(context.Background(), i+1) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", c.Stats().Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	return got, errs
}

func TestQueuedCallsGoInOneBatch(t *testing.T) {
	one, entered, release := held()
	var batches [][]int
	batch := func(_ context.Context, rs []int) ([]Result[int], error) {
		batches = append(batches, append([]int(nil), rs...))
		out := make([]Result[int], len(rs))
		for i, r := range rs {
			if r == 2 {
				out[i].Err = grpcerr.InvalidArgument("two", "two is refused")
				continue
			}
			out[i].Resp = r * 10
		}
		return out, nil
	}
	c := NewCaller(one, batch, Options{MaxInFlight: 1})
	got, errs := queueBehindAHeldCall(t, c, entered, release, 3)
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("batches %v, want one of three", batches)
	}
	for i, v := range got {
		if i == 1 {
			if _, reason, _, _ := grpcerr.Reason(errs[i]); reason != "two" {
				t.Errorf("item 2: %v, want its own error", errs[i])
			}
			continue
		}
		if errs[i] != nil || v != (i+1)*10 {
			t.Errorf("item %d: %d %v, want %d", i+1, v, errs[i], (i+1)*10)
		}
	}
}

// A server without the batch RPC answers Unimplemented: the batch's
// items are sent one by one, and no batch is tried again.
func TestUnimplementedBatchFallsBackToUnary(t *testing.T) {
	one, entered, release := held()
	tried := 0
	batch := func(context.Context, []int) ([]Result[int], error) {
		tried++
		return nil, status.Error(codes.Unimplemented, "unknown method")
	}
	c := NewCaller(one, batch, Options{MaxInFlight: 1})
	got, errs := queueBehindAHeldCall(t, c, entered, release, 2)
	for i := range got {
		if errs[i] != nil || got[i] != (i+1)*10 {
			t.Errorf("item %d: %d %v", i+1, got[i], errs[i])
		}
	}
	if tried != 1 {
		t.Fatalf("batch tried %d times, want 1", tried)
	}
	if _, err := c.Do(context.Background(), 5); err != nil || c.Stats().Batches != 1 {
		t.Errorf("after fallback: %v, stats %+v", err, c.Stats())
	}
}

// A batch that fails as a whole (the connection dropped) fails each item
// with that error, and a short answer fails them as Internal.
func TestAFailedBatchFailsEveryItem(t *testing.T) {
	tests := []struct {
		name  string
		batch func(context.Context, []int) ([]Result[int], error)
		want  codes.Code
	}{
		{"transport failure", func(context.Context, []int) ([]Result[int], error) {
			return nil, status.Error(codes.Unavailable, "connection lost")
		}, codes.Unavailable},
		{"short answer", func(context.Context, []int) ([]Result[int], error) {
			return []Result[int]{{Resp: 1}}, nil
		}, codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			one, entered, release := held()
			c := NewCaller(one, tc.batch, Options{MaxInFlight: 1})
			_, errs := queueBehindAHeldCall(t, c, entered, release, 2)
			for i, err := range errs {
				if status.Code(err) != tc.want {
					t.Errorf("item %d: %v, want %v", i+1, err, tc.want)
				}
			}
		})
	}
}

// A batch lasts until the latest of its callers' deadlines, and never
// ends with one caller's cancellation.
func TestBatchContext(t *testing.T) {
	c := NewCaller[int, int](nil, nil, Options{Timeout: time.Minute})
	early, cancelEarly := context.WithTimeout(context.Background(), time.Second)
	defer cancelEarly()
	late, cancelLate := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLate()
	ctx, cancel := c.batchContext([]*call[int, int]{{ctx: early}, {ctx: late}})
	defer cancel()
	if d, _ := ctx.Deadline(); d.Before(time.Now().Add(59 * time.Minute)) {
		t.Errorf("deadline %v, want the latest caller's", d)
	}
	cancelEarly()
	if ctx.Err() != nil {
		t.Error("a caller's cancellation ended the batch")
	}
	ctx2, cancel2 := c.batchContext([]*call[int, int]{{ctx: late}, {ctx: context.Background()}})
	defer cancel2()
	if d, ok := ctx2.Deadline(); !ok || d.After(time.Now().Add(2*time.Minute)) {
		t.Errorf("deadline %v %v, want Options.Timeout when a caller has none", d, ok)
	}
}

func TestEncodedErrorsKeepCodeAndReason(t *testing.T) {
	err := DecodeError(EncodeError(grpcerr.Conflict("some-reason", "explained", "k", "v")))
	code, reason, expl, md := grpcerr.Reason(err)
	if code != codes.Aborted || reason != "some-reason" || expl != "explained" || md["k"] != "v" {
		t.Errorf("decoded %v %s %q %v", code, reason, expl, md)
	}
	masked := DecodeError(EncodeError(grpcerr.Internal(errors.New("secret cause"))))
	if st := status.Convert(masked); st.Code() != codes.Internal || st.Message() != "internal error" {
		t.Errorf("internal error decoded as %v %q, want masked", st.Code(), st.Message())
	}
}

func BenchmarkCallerUnary(b *testing.B) {
	c := NewCaller(func(_ context.Context, v int) (int, error) { return v, nil }, nil, Options{})
	ctx := context.Background()
	for b.Loop() {
		_, _ = c.Do(ctx, 1)
	}
}

// Calls are reused once answered; a call whose caller gave up while its
// batch was out is answered later by that batch and must never carry a
// newer caller's request, or the newer caller would get the old answer.
func TestGivenUpCallsAreNotReused(t *testing.T) {
	one, entered, release := held()
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	entering := make(chan int, 2)
	var n atomic.Int32
	batch := func(_ context.Context, rs []int) ([]Result[int], error) {
		// Batches run one at a time (MaxInFlight 1); the first two are
		// held until the test lets them go.
		if i := int(n.Add(1)) - 1; i < len(gates) {
			entering <- i
			<-gates[i]
		}
		out := make([]Result[int], len(rs))
		for i, r := range rs {
			out[i].Resp = r * 10
		}
		return out, nil
	}
	c := NewCaller(one, batch, Options{MaxInFlight: 1})

	// Calls 1..8 queue behind a held unary call and go out in one batch,
	// which is held; their callers give up.
	go func() { _, _ = c.Do(context.Background(), 0) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	var gaveUp sync.WaitGroup
	for i := 1; i <= 8; i++ {
		gaveUp.Go(func() {
			if _, err := c.Do(ctx, i); status.Code(err) != codes.Canceled {
				t.Errorf("call %d: %v, want Canceled", i, err)
			}
		})
	}
	for c.Stats().Waiting != 8 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-entering
	cancel()
	gaveUp.Wait()

	// New calls queue while that batch is out. It then answers its
	// callers, who are gone, and the new calls go out in the next batch,
	// held until any new caller the old batch answered has returned.
	got := make([]int, 8)
	var returned atomic.Int32
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			v, err := c.Do(context.Background(), 100+i)
			if err != nil {
				t.Errorf("call %d: %v", 100+i, err)
			}
			got[i] = v
			returned.Add(1)
		})
	}
	for c.Stats().Waiting != 8 {
		time.Sleep(time.Millisecond)
	}
	close(gates[0])
	<-entering
	for end := time.Now().Add(100 * time.Millisecond); returned.Load() == 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	close(gates[1])
	wg.Wait()
	for i, v := range got {
		if v != (100+i)*10 {
			t.Errorf("call %d answered %d, want %d", 100+i, v, (100+i)*10)
		}
	}
}

// Many concurrent callers, with calls in flight most of the time: each
// gets its own answer, and every call is sent exactly once, unary or in a
// batch.
func TestConcurrentCallersEachGetTheirOwnAnswer(t *testing.T) {
	one := func(_ context.Context, v int) (int, error) { return v * 10, nil }
	batch := func(_ context.Context, rs []int) ([]Result[int], error) {
		out := make([]Result[int], len(rs))
		for i, r := range rs {
			out[i].Resp = r * 10
		}
		return out, nil
	}
	c := NewCaller(one, batch, Options{})
	const workers, each = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				v := w*each + i
				got, err := c.Do(context.Background(), v)
				if err != nil || got != v*10 {
					errs <- fmt.Errorf("call %d: %d %v, want %d", v, got, err, v*10)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := c.Stats(); st.Unary+st.Batched != workers*each || st.Waiting != 0 {
		t.Errorf("stats %+v: want %d calls sent once each, none waiting", st, workers*each)
	}
}

// BenchmarkCallerConcurrent is the front door's shape: 64 callers, each
// making its next call when its last one is answered, against a round
// trip of about 50 µs; it reports how many calls each stream (a unary
// call or a batch) carried, the figure that sets the per-call cost of
// the internal hops.
func BenchmarkCallerConcurrent(b *testing.B) {
	rtt := func() {
		for end := time.Now().Add(50 * time.Microsecond); time.Now().Before(end); {
			runtime.Gosched()
		}
	}
	one := func(_ context.Context, v int) (int, error) { rtt(); return v, nil }
	batch := func(_ context.Context, rs []int) ([]Result[int], error) {
		rtt()
		out := make([]Result[int], len(rs))
		for i, r := range rs {
			out[i].Resp = r
		}
		return out, nil
	}
	c := NewCaller(one, batch, Options{})
	b.SetParallelism(32) // 64 callers on 2 Ps
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			_, _ = c.Do(ctx, 1)
		}
	})
	st := c.Stats()
	b.ReportMetric(float64(st.Unary+st.Batched)/float64(st.Unary+st.Batches), "calls/stream")
	b.ReportMetric(float64(st.Unary)/float64(st.Unary+st.Batched), "unary/call")
}
