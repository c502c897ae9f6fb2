// Package testkit has the helpers tests across the suite share: a real
// redis-server on a free loopback port, and a development PKI made once
// per test binary.
package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	bin  string
	args []string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *tailBuffer   // the server's log, for a failure message
	hold   net.Listener  // a stopped server's port, kept (see Stop)
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr }

// Client returns a new client for the server, closed at cleanup; opts
// adjust its options (timeouts, retries, pool size).
func (r *Redis) Client(tb testing.TB, opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: r.Addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedis starts a real redis-server on a free loopback port with
// persistence off, and stops it at cleanup. Extra arguments are passed to
// the server (e.g. "--appendonly", "yes"). A server that cannot start on
// its port (taken between the pick and the bind) is started again on
// another one.
func StartRedis(tb testing.TB, extra ...string) *Redis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server is not installed (make test installs Debian's redis-server): %v", err)
	}
	// A cluster node also listens on its port + 10000 (the cluster bus),
	// which must be free too and below the ephemeral range as well.
	busOffset := 0
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "--cluster-enabled" && extra[i+1] == "yes" {
			busOffset = clusterBusOffset
		}
	}
	r := &Redis{Dir: tb.TempDir(), bin: bin}
	tb.Cleanup(func() {
		r.kill()
		r.releasePort()
	})
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port, err := pickPort(busOffset)
		if err != nil {
			tb.Fatal(err)
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		r.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", r.Dir,
			"--protected-mode", "no",
		}, extra...)
		err = r.launch()
		if err == nil {
			return r
		}
		if attempt == attempts {
			tb.Fatal(err)
		}
		tb.Logf("%v; starting it on another port", err)
	}
}

// clusterBusOffset is where Redis Cluster puts a node's bus port.
const clusterBusOffset = 10000

func (r *Redis) start(tb testing.TB) {
	tb.Helper()
	if err := r.launch(); err != nil {
		tb.Fatal(err)
	}
}

// launch starts the server and waits until it answers PING, it exits, or
// 10 s pass; a failure says why with the end of the server's log.
func (r *Redis) launch() error {
	r.releasePort()
	r.log = &tailBuffer{max: 4 << 10}
	r.cmd = exec.Command(r.bin, r.args...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(r.cmd, r.exited)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// The server answering must be this one: on a port taken between
		// the pick and the bind, another test's server could answer.
		if pid, ok := serverPID(r.Addr); ok {
			if pid == r.cmd.Process.Pid {
				return nil
			}
			r.kill()
			return fmt.Errorf("redis-server on %s: the port is another server's (pid %d)", r.Addr, pid)
		}
		select {
		case <-r.exited:
			return fmt.Errorf("redis-server on %s exited at start: %s", r.Addr, r.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s: %s", r.Addr, r.log.String())
}

// Stop kills the server (like a crash: no shutdown save) and keeps its
// port until the server starts again or the test ends: a connection to it
// is accepted and closed at once. A freed port could be picked by another
// test process, whose fresh server would then answer this test's clients
// as if the Redis had never gone.
func (r *Redis) Stop() {
	r.kill()
	if r.hold == nil {
		r.hold = holdPort(r.Addr)
	}
}

func (r *Redis) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

func (r *Redis) releasePort() {
	if r.hold != nil {
		_ = r.hold.Close()
		r.hold = nil
	}
}

// holdPort listens on addr and closes every connection it accepts; nil
// when addr cannot be bound (someone else has it already).
func holdPort(addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil
	}
	go closeAccepted(ln, nil)
	return ln
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Restart kills the server and starts it again on the same port and
// directory, so a test can check what survives a Redis crash.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.Stop()
	r.start(tb)
}

// RestartWith is Restart with extra server arguments, kept for later
// restarts too.
func (r *Redis) RestartWith(tb testing.TB, extra ...string) {
	tb.Helper()
	r.Stop()
	r.args = append(r.args, extra...)
	r.start(tb)
}

// serverPID asks the server on addr for its process id (INFO server).
func serverPID(addr string) (int, bool) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, false
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, false // loading, or not a Redis
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n <= 0 || n > 1<<20 {
		return 0, false
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			return pid, err == nil
		}
	}
	return 0, false
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
func PickPort() (int, error) { return pickPort(0) }

// pickPort picks a free port; with offset > 0, port+offset must be free
// and below the ephemeral range too.
func pickPort(offset int) (int, error) {
	low := ephemeralLow() - offset
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
		if ports.given[port] || !bindable(port) || offset > 0 && (ports.given[port+offset] || !bindable(port+offset)) {
			continue
		}
		ports.given[port] = true
		if offset > 0 {
			ports.given[port+offset] = true
		}
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

// Run runs a component's Run loop (a server, a hub, a worker) until
// cleanup, when it cancels it, waits for it to return and reports an
// error it returned under what.
func Run(tb testing.TB, what string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("%s: %v", what, err)
		}
	})
}
