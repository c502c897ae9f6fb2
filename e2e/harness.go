// Package e2e runs the suite the way it is deployed: every service as its
// own process, talking mTLS gRPC on loopback, with a real redis-server.
// The harness here is shared by the conformance tests and the load
// benchmark.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/suite"
	"github.com/agtpsuite/agtp/services/testkit"
)

// BinDirEnv names a directory holding prebuilt service binaries (make test
// sets it); without it the harness builds them once per test binary.
const BinDirEnv = "AGTP_BIN_DIR"

// Proc is one service process.
type Proc struct {
	Name     string
	GRPCAddr string
	HTTPAddr string
	// AGTPAddr and HTTPSAddr are the front door's public listeners.
	AGTPAddr  string
	HTTPSAddr string
	Env       []string
	cmd       *exec.Cmd
	logs      *testkit.SyncBuffer
	exited    chan struct{}
}

// Logs is what the process wrote so far.
func (p *Proc) Logs() string {
	if p.logs == nil {
		return "(in-process: logs went to the test's stderr)"
	}
	return p.logs.String()
}

// Cluster is a running suite of processes.
type Cluster struct {
	// Redis is the redis-server Start started; nil when Options.RedisURL
	// named an existing one.
	Redis *testkit.Redis
	// RedisURL is what the processes were given as REDIS_URL.
	RedisURL string
	PKI      devpki.Layout
	Procs    map[string]*Proc
	// Admin is the operator's mTLS material, for calls into the services.
	Admin *kit.MTLS
	tel   *kit.Telemetry
	bin   string
}

// Options tune a cluster.
type Options struct {
	// Env is added to every process's environment.
	Env []string
	// Services limits which services start; nil starts all six.
	Services []string
	// ServiceEnv is added to the named service's environment, after Env
	// (the load benchmark gives each service its own PPROF_ADDR).
	ServiceEnv map[string][]string
	// InProcess runs the six services in this process (services/suite,
	// the same constructors as make run) instead of as separate processes:
	// the fast way to run the same scenarios. Env is then the environment
	// every service of the suite reads, as under make run; ServiceEnv
	// does not apply.
	InProcess bool
	// RedisURL points the processes at an existing Redis (e.g. a
	// redis+cluster:// URL, or another Cluster's RedisURL to run replicas
	// against one store); empty starts a fresh redis-server.
	RedisURL string
	// RedisArgs are extra redis-server arguments for the fresh server
	// (e.g. "--appendonly", "yes" for tests that restart it).
	RedisArgs []string
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func binaries(tb testing.TB) string {
	tb.Helper()
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir
	}
	if !testing.Testing() {
		// A program builds for each cluster it starts, into a directory
		// removed with it.
		dir := tb.TempDir()
		if err := buildServices(dir); err != nil {
			tb.Fatal(err)
		}
		return dir
	}
	buildOnce.Do(func() {
		// Stays the error if BinaryTempDir ends the test.
		buildErr = errors.New("no directory to build the services into")
		buildDir = testkit.BinaryTempDir(tb, "agtp-e2e-bin-")
		buildErr = buildServices(buildDir)
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildDir
}

// buildServices builds every service's binary into dir.
func buildServices(dir string) error {
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, s := range devpki.ServiceNames {
		args = append(args, "github.com/agtpsuite/agtp/"+s+"/cmd/"+s)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// Start launches the suite's processes against a fresh redis-server and
// waits until every one reports SERVING over mTLS.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.InProcess {
		return startInProcess(tb, opts)
	}
	c := &Cluster{RedisURL: opts.RedisURL, PKI: testkit.PKI(tb), Procs: map[string]*Proc{}, bin: binaries(tb)}
	if c.RedisURL == "" {
		c.Redis = testkit.StartRedis(tb, opts.RedisArgs...)
		c.RedisURL = c.Redis.URL()
	}
	var err error
	if c.Admin, err = kit.LoadMTLS(c.PKI.CA(), c.PKI.Cert(devpki.Admin), c.PKI.Key(devpki.Admin)); err != nil {
		tb.Fatal(err)
	}
	if c.tel, err = kit.NewTelemetry(context.Background(), "e2e", kit.TelemetryConfig{}); err != nil {
		tb.Fatal(err)
	}
	names := opts.Services
	if names == nil {
		names = devpki.ServiceNames
	}
	var peers []string
	for _, n := range names {
		p := &Proc{Name: n, GRPCAddr: addr(tb), HTTPAddr: addr(tb)}
		c.Procs[n] = p
		peers = append(peers, n+"="+p.GRPCAddr)
	}
	for _, n := range names {
		p := c.Procs[n]
		p.Env = append(os.Environ(),
			"GRPC_ADDR="+p.GRPCAddr,
			"HTTP_ADDR="+p.HTTPAddr,
			"AGTP_CA_FILE="+c.PKI.CA(),
			"AGTP_CERT_FILE="+c.PKI.Cert(n),
			"AGTP_KEY_FILE="+c.PKI.Key(n),
			"AGTP_SIGNING_KEY_FILE="+c.PKI.SigningKey(),
			"REDIS_URL="+c.RedisURL,
			"AGTP_PEERS="+strings.Join(peers, ","),
			"LOG_LEVEL=info",
		)
		if n == "frontdoor" {
			p.AGTPAddr, p.HTTPSAddr = addr(tb), addr(tb)
			p.Env = append(p.Env,
				"AGTP_ADDR="+p.AGTPAddr,
				"HTTPS_ADDR="+p.HTTPSAddr,
				"HTTP_ADDR=",
				"AGTP_SERVER_CERT_FILE="+c.PKI.Cert(devpki.AGTPServer),
				"AGTP_SERVER_KEY_FILE="+c.PKI.Key(devpki.AGTPServer),
				"AGTP_AGENT_CA_FILE="+c.PKI.AgentCA(),
			)
		}
		if n == "catalogsvc" || n == "rcnssvc" || n == "frontdoor" {
			p.Env = append(p.Env, "AGTP_DEMO=true")
		}
		if n == "policysvc" {
			// NOTIFY deliveries to other suites present the AGTP server
			// certificate, which a suite that trusts this one as a peer
			// takes as proof of the sending agent.
			p.Env = append(p.Env, "AGTP_NOTIFY_CLIENT_CERT_FILE="+c.PKI.Cert(devpki.AGTPServer), "AGTP_NOTIFY_CLIENT_KEY_FILE="+c.PKI.Key(devpki.AGTPServer))
		}
		if n == "identitysvc" {
			p.Env = append(p.Env, "AGTP_AGENT_CA_CERT_FILE="+c.PKI.AgentCA(), "AGTP_AGENT_CA_KEY_FILE="+c.PKI.AgentCAKey())
		}
		p.Env = append(p.Env, opts.Env...)
		p.Env = append(p.Env, opts.ServiceEnv[n]...)
		c.start(tb, p)
	}
	for _, n := range names {
		c.WaitServing(tb, n, 20*time.Second)
	}
	return c
}

// startInProcess runs the suite in this process on free loopback ports,
// against a real redis-server, with its own PKI.
func startInProcess(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if len(opts.ServiceEnv) > 0 {
		tb.Fatal("e2e: Options.ServiceEnv does not apply to an in-process suite")
	}
	env := map[string]string{}
	for _, kv := range opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	c := &Cluster{RedisURL: opts.RedisURL, Procs: map[string]*Proc{}}
	if c.RedisURL == "" {
		c.Redis = testkit.StartRedis(tb)
		c.RedisURL = c.Redis.URL()
	}
	for _, n := range devpki.ServiceNames {
		c.Procs[n] = &Proc{Name: n, GRPCAddr: addr(tb), HTTPAddr: addr(tb)}
	}
	front := c.Procs["frontdoor"]
	front.AGTPAddr, front.HTTPSAddr = addr(tb), addr(tb)
	cfg := suite.Config{
		StateDir:  tb.TempDir(),
		RedisURL:  c.RedisURL,
		LogLevel:  "warn",
		Out:       io.Discard,
		Telemetry: kit.TelemetryConfig{},
		LookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		Listen: func(service, listener string) string {
			if service == "console" {
				return addr(tb)
			}
			p := c.Procs[service]
			switch listener {
			case "grpc":
				return p.GRPCAddr
			case "http":
				return p.HTTPAddr
			case "agtp":
				return p.AGTPAddr
			case "https":
				return p.HTTPSAddr
			}
			tb.Fatalf("e2e: no address for %s's %q listener", service, listener)
			return ""
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := suite.New(ctx, cfg)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("in-process suite: %v", err)
		}
	})
	c.PKI = s.Layout()
	if c.Admin, err = kit.LoadMTLS(c.PKI.CA(), c.PKI.Cert(devpki.Admin), c.PKI.Key(devpki.Admin)); err != nil {
		tb.Fatal(err)
	}
	if c.tel, err = kit.NewTelemetry(context.Background(), "e2e", kit.TelemetryConfig{}); err != nil {
		tb.Fatal(err)
	}
	for _, n := range devpki.ServiceNames {
		c.WaitServing(tb, n, 20*time.Second)
	}
	return c
}

func addr(tb testing.TB) string {
	return "127.0.0.1:" + strconv.Itoa(testkit.FreePort(tb))
}

func (c *Cluster) start(tb testing.TB, p *Proc) {
	tb.Helper()
	p.logs = &testkit.SyncBuffer{}
	p.cmd = exec.Command(filepath.Join(c.bin, p.Name))
	p.cmd.Env = p.Env
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", p.Name, err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	tb.Cleanup(func() {
		c.Stop(p.Name, syscall.SIGKILL)
		if tb.Failed() {
			tb.Logf("--- %s logs ---\n%s", p.Name, p.Logs())
		}
	})
}

// Restart starts a stopped process again with the same configuration.
func (c *Cluster) Restart(tb testing.TB, name string) {
	tb.Helper()
	c.start(tb, c.Procs[name])
	c.WaitServing(tb, name, 20*time.Second)
}

// Stop signals a process and waits for it to exit; it returns the exit
// code (-1 when killed by a signal).
func (c *Cluster) Stop(name string, sig syscall.Signal) int {
	p := c.Procs[name]
	if p.cmd == nil || p.cmd.Process == nil {
		return -1
	}
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	return p.cmd.ProcessState.ExitCode()
}

// Dial connects to a service with the operator's certificate.
func (c *Cluster) Dial(tb testing.TB, name string) *grpc.ClientConn {
	tb.Helper()
	conn, err := kit.DialService(c.Procs[name].GRPCAddr, name, c.Admin, c.tel)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// DialAs connects to a service presenting the certificate of another name
// of the PKI (a service, devpki.InternalSystem), for the RPCs whose access
// table admits only that identity (docs/access.md).
func (c *Cluster) DialAs(tb testing.TB, name, as string) *grpc.ClientConn {
	tb.Helper()
	conn, err := c.dialServiceAs(name, as)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (c *Cluster) dialServiceAs(name, as string) (*grpc.ClientConn, error) {
	m, err := kit.LoadMTLS(c.PKI.CA(), c.PKI.Cert(as), c.PKI.Key(as))
	if err != nil {
		return nil, err
	}
	return kit.DialService(c.Procs[name].GRPCAddr, name, m, c.tel)
}

// WaitServing waits until the service's health reports SERVING.
func (c *Cluster) WaitServing(tb testing.TB, name string, timeout time.Duration) {
	tb.Helper()
	conn := c.Dial(tb, name)
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-c.Procs[name].exited:
			tb.Fatalf("%s exited during start-up:\n%s", name, c.Procs[name].Logs())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("%s not SERVING after %v (last error: %v)\n%s", name, timeout, last, c.Procs[name].Logs())
}
