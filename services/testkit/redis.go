// Package testkit has the helpers tests across the suite share: a real
// redis-server on a free loopback port, and a development PKI made once
// per test binary.
package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a running redis-server started for a test.
type Redis struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	args []string
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Client returns a new client for the server, closed at cleanup.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedis starts a real redis-server on a free loopback port with
// persistence off, and stops it at cleanup. Extra arguments are passed to
// the server (e.g. "--appendonly", "yes").
func StartRedis(tb testing.TB, extra ...string) *Redis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server is not installed (make test installs Debian's redis-server): %v", err)
	}
	r := &Redis{Dir: tb.TempDir()}
	port := freePort(tb)
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.args = append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.Dir,
		"--protected-mode", "no",
	}, extra...)
	r.cmd = exec.Command(bin, r.args...)
	r.start(tb)
	tb.Cleanup(r.Stop)
	return r
}

func (r *Redis) start(tb testing.TB) {
	tb.Helper()
	r.cmd = exec.Command(r.cmd.Path, r.args...)
	r.cmd.Stdout, r.cmd.Stderr = nil, os.Stderr
	if err := r.cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(r.Addr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Stop()
	tb.Fatalf("redis-server on %s did not answer PING within 10s", r.Addr)
}

// Stop kills the server (like a crash: no shutdown save).
func (r *Redis) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// Restart kills the server and starts it again on the same port and
// directory, so a test can check what survives a Redis crash.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.Stop()
	r.start(tb)
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int { return freePort(tb) }

// Ports are picked below the kernel's ephemeral range: a port the kernel
// hands out for ":0" is also one it hands out as the source port of
// outgoing connections, so under a test that opens thousands of them it
// was often taken again between the pick and the service's bind. Outside
// that range only another test process picking the same random port can
// collide, and handed-out ports are never reused in this process.
var ports struct {
	sync.Mutex
	given map[int]bool
	rng   *rand.Rand
}

func freePort(tb testing.TB) int {
	tb.Helper()
	port, err := PickPort()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// PickPort is FreePort for code without a testing.TB (the load benchmark).
func PickPort() (int, error) {
	low := ephemeralLow()
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
		ports.rng = rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	}
	const floor = 10000
	for range 200 {
		var port int
		if low-floor >= 1000 {
			port = floor + ports.rng.IntN(low-floor)
		} else {
			var err error
			if port, err = kernelPort(); err != nil {
				return 0, err
			}
		}
		if ports.given[port] || !bindable(port) {
			continue
		}
		ports.given[port] = true
		return port, nil
	}
	return 0, errors.New("find a free port: none of 200 tries was free")
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// bindable reports whether both TCP and UDP (QUIC) can bind port now.
func bindable(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// WaitFor polls cond until it is true or the timeout passes.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("timed out after %v waiting for %s", timeout, what)
}

// Context returns a context cancelled at cleanup.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	return ctx
}
