package subscription_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/subscription"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestRun against a real redis-server: Up once subscribed, messages in
// order, Down with an error when the subscription connection is killed,
// Up again once go-redis has resubscribed, and Down(nil) when ctx ends.
func TestRun(t *testing.T) {
	rdb := testkit.StartRedis(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu     sync.Mutex
		events []string
		msgs   []string
	)
	record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	snapshot := func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), events...), append([]string(nil), msgs...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		subscription.Run(ctx, rdb, "test:events", subscription.Handler{
			Up: func() { record("up") },
			Down: func(err error) {
				if err == nil {
					record("down:end")
				} else {
					record("down:lost")
				}
			},
			Message: func(p string) { mu.Lock(); msgs = append(msgs, p); mu.Unlock() },
		})
	}()
	waitEvents := func(what string, n int) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, what, func() bool { e, _ := snapshot(); return len(e) >= n })
	}
	waitEvents("the subscription up", 1)
	for _, m := range []string{"a", "b", "c"} {
		if err := rdb.Publish(ctx, "test:events", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "three messages", func() bool { _, m := snapshot(); return len(m) == 3 })
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitEvents("the subscription lost and back", 3)
	if err := rdb.Publish(ctx, "test:events", "d").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the message after the reconnect", func() bool { _, m := snapshot(); return len(m) == 4 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	e, m := snapshot()
	want := []string{"up", "down:lost", "up", "down:end"}
	if len(e) != len(want) {
		t.Fatalf("events %v, want %v", e, want)
	}
	for i := range want {
		if e[i] != want[i] {
			t.Fatalf("events %v, want %v", e, want)
		}
	}
	if m[0] != "a" || m[1] != "b" || m[2] != "c" || m[3] != "d" {
		t.Errorf("messages %v, want [a b c d]", m)
	}
}
