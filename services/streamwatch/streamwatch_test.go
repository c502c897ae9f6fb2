package streamwatch_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/streamwatch"
)

// script is a stream that yields its messages, then ends with err.
type script struct {
	msgs []int
	err  error
}

func (s *script) Recv() (int, error) {
	if len(s.msgs) == 0 {
		return 0, s.err
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

// TestFollow: streams that fail to open, end or break are reopened; every
// message is delivered in order; Interrupted runs once per ended stream;
// a stream that delivered resets the wait to the shortest; ctx ends it.
func TestFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu          sync.Mutex
		opens       []time.Time
		got         []int
		interrupted int
	)
	streams := []func() (streamwatch.Receiver[int], error){
		func() (streamwatch.Receiver[int], error) { return nil, errors.New("refused") },
		func() (streamwatch.Receiver[int], error) { return nil, errors.New("refused") },
		func() (streamwatch.Receiver[int], error) { return &script{msgs: []int{1, 2}, err: io.EOF}, nil },
		func() (streamwatch.Receiver[int], error) {
			return &script{msgs: []int{3}, err: errors.New("reset")}, nil
		},
	}
	logged := &backoffLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		streamwatch.Follow(ctx, slog.New(logged), streamwatch.Stream[int]{
			Open: func(context.Context) (streamwatch.Receiver[int], error) {
				mu.Lock()
				defer mu.Unlock()
				opens = append(opens, time.Now())
				if n := len(opens); n <= len(streams) {
					return streams[n-1]()
				}
				cancel()
				return nil, context.Canceled
			},
			Receive:     func(m int) { mu.Lock(); got = append(got, m); mu.Unlock() },
			Interrupted: func() { mu.Lock(); interrupted++; mu.Unlock() },
			Warning:     "test watch interrupted",
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after ctx ended")
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("messages %v, want [1 2 3]", got)
	}
	if len(opens) != 5 || interrupted != 5 {
		t.Fatalf("%d opens, %d interruptions; want 5 and 5", len(opens), interrupted)
	}
	// The waits logged: 100 ms, 200 ms, then 100 ms after each stream
	// that delivered (the backoff starts over), each stretched by jitter
	// of at most half. Timers never fire early.
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	if len(logged.backoffs) != len(want) {
		t.Fatalf("logged waits %v, want %v", logged.backoffs, want)
	}
	for i, w := range want {
		got := logged.backoffs[i]
		if got < w || got >= w+w/2 {
			t.Errorf("logged waits %v, want %v each plus less than half again", logged.backoffs, want)
			break
		}
		if wait := opens[i+1].Sub(opens[i]); wait < got {
			t.Errorf("wait %d was %v, shorter than the %v logged", i, wait, got)
		}
	}
	// The two refusals before anything was delivered are the server still
	// starting; the breaks after it delivered are warnings.
	if want := []slog.Level{slog.LevelInfo, slog.LevelInfo, slog.LevelWarn, slog.LevelWarn}; !slices.Equal(logged.levels, want) {
		t.Errorf("logged levels %v, want %v", logged.levels, want)
	}
}

// TestFollowWarnsOncePastTheStartupGrace: a server that never answers is
// warned about once the grace is over, though no stream ever delivered.
func TestFollowWarnsOncePastTheStartupGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logged := &backoffLog{}
	opens := 0
	streamwatch.Follow(ctx, slog.New(logged), streamwatch.Stream[int]{
		Open: func(context.Context) (streamwatch.Receiver[int], error) {
			if opens++; opens > 2 {
				cancel()
				return nil, context.Canceled
			}
			return nil, errors.New("refused")
		},
		Receive:      func(int) {},
		Warning:      "test watch interrupted",
		StartupGrace: time.Nanosecond,
	})
	if want := []slog.Level{slog.LevelWarn, slog.LevelWarn}; !slices.Equal(logged.levels, want) {
		t.Errorf("logged levels %v, want %v", logged.levels, want)
	}
}

// backoffLog records the level and backoff of each warning.
type backoffLog struct {
	mu       sync.Mutex
	backoffs []time.Duration
	levels   []slog.Level
}

func (l *backoffLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *backoffLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *backoffLog) WithGroup(string) slog.Handler            { return l }
func (l *backoffLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.levels = append(l.levels, r.Level)
	l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "backoff" {
			l.mu.Lock()
			l.backoffs = append(l.backoffs, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
