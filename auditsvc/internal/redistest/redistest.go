// Package redistest starts real redis-server processes for auditsvc tests,
// including ones with AOF persistence that a test can kill and restart.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/testkit"
	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Addr string
	Dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
	out  lockedBuffer
}

// lockedBuffer collects the server's log, shown only when a test fails.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Config says how to run the server.
type Config struct {
	// AOF turns on appendonly with appendfsync always in Dir, so that
	// every acknowledged write survives a kill -9.
	AOF bool
}

// Start runs redis-server on a free loopback port and stops it when the
// test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed: %v", err)
	}
	port := testkit.FreePort(t)
	s := &Server{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: t.TempDir()}
	s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", s.Dir,
		"--protected-mode", "no", "--loglevel", "warning"}
	if cfg.AOF {
		s.args = append(s.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		s.args = append(s.args, "--appendonly", "no")
	}
	s.start()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", s, s.out.String())
		}
	})
	return s
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer PING: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a new client for the server, closed when the test ends.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server (SIGKILL, no shutdown save) and starts it again
// on the same port and directory, so it reloads its AOF.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// String names the server in test output.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s (%s)", s.Addr, s.Dir) }
