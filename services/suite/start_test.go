package suite

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/testkit"
)

// banner notes that the suite started printing its start-up banner, which
// it does once the start-up tasks are done, and passes the text on.
type banner struct {
	once    sync.Once
	printed chan struct{}
	out     io.Writer
}

func (b *banner) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.printed) })
	if b.out != nil {
		return b.out.Write(p)
	}
	return len(p), nil
}

// embeddedRedis as a Config.RedisURL asks startTestSuite for make run's
// embedded Redis instead of a redis-server.
const embeddedRedis = "embedded"

// startTestSuite runs the suite as make run does, on free ports, against
// a real redis-server (cfg's, else one of its own), until the test ends.
// It returns once the start-up tasks are done: stopping before them would
// fail the run.
func startTestSuite(t *testing.T, cfg Config) *Suite {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	switch cfg.RedisURL {
	case embeddedRedis:
		cfg.RedisURL = ""
	case "":
		cfg.RedisURL = testkit.StartRedis(t).URL()
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	cfg.Listen = func(string, string) string { return "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)) }
	started := &banner{printed: make(chan struct{}), out: cfg.Out}
	cfg.Out = started
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("suite: %v", err)
		}
	})
	select {
	case <-started.printed:
	case err := <-done:
		t.Fatalf("the suite stopped before its banner: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the suite never printed its banner")
	}
	return s
}
