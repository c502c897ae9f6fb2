package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/suite"
)

// FlagOneProcessChild runs agtpbench as the one-process scenario's child:
// the suite as make run starts it (ServeOneProcessChild).
const FlagOneProcessChild = "one-process-child"

// oneProcessName is the one-process suite in the CPU figures.
const oneProcessName = "agtpsuite"

// OneProcessReport is the one-process scenario: the throughput run's load
// against the suite as make run starts it (every service in one process,
// embedded Redis), with the limit responder measured just before and just
// after it.
type OneProcessReport struct {
	Limit []*loadgen.Result
	Run   *loadgen.Result
}

// Ratio is the run's requests per second as a share of the limit's mean.
func (r *OneProcessReport) Ratio() float64 {
	var sum float64
	for _, l := range r.Limit {
		sum += l.Throughput
	}
	if r.Run == nil || sum == 0 {
		return 0
	}
	return r.Run.Throughput / (sum / float64(len(r.Limit)))
}

// oneProcessAddrs is what the child reports once it serves.
type oneProcessAddrs struct {
	AGTP     string `json:"agtp"`
	Identity string `json:"identity"`
	StateDir string `json:"state_dir"`
}

// ServeOneProcessChild is the child's side of the one-process scenario: it
// runs the suite with the code make run runs (suite.New and Run, the
// embedded Redis, the environment as make run reads it), on free loopback
// ports and a fresh state directory, writes its addresses as a JSON line
// to stdout once the front door answers, and stops when stdin ends.
func ServeOneProcessChild(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	dir, err := os.MkdirTemp("", "agtpbench-suite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var listenErr error
	cfg := suite.Config{StateDir: dir, Out: io.Discard, LookupEnv: os.LookupEnv,
		// Warn level, as the deployed runs: per-request logging is not
		// what is measured.
		LogLevel: "warn",
		Listen: func(string, string) string {
			a, err := freeAddr()
			if err != nil {
				listenErr = err
			}
			return a
		}}
	s, err := suite.New(ctx, cfg)
	if err != nil {
		return err
	}
	if listenErr != nil {
		return listenErr
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	roots, err := keyfile.CertPool(s.Layout().CA())
	if err != nil {
		return err
	}
	target := loadgen.Target{Addr: s.AGTPAddr(), ServerName: "localhost", Roots: roots}
	deadline := time.Now().Add(60 * time.Second)
	for loadgen.Check(ctx, target) != nil {
		if time.Now().After(deadline) {
			return errors.New("the one-process suite's front door did not answer within 60 s")
		}
		select {
		case err := <-done:
			return fmt.Errorf("the one-process suite stopped: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	line, err := json.Marshal(oneProcessAddrs{AGTP: s.AGTPAddr(), Identity: s.Addrs["identitysvc"], StateDir: dir})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	if err := <-done; err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// benchOneProcess runs the one-process scenario: the suite in a child
// process (o.OneProcessCommand), agents registered through its
// identitysvc, and the throughput run's load against it between two runs
// of the limit responder.
func benchOneProcess(ctx context.Context, o BenchOptions, progress func(string, ...any)) (*OneProcessReport, error) {
	progress("one-process: starting the suite as make run does (one process, embedded Redis)")
	cmd := exec.CommandContext(ctx, o.OneProcessCommand[0], append(append([]string{}, o.OneProcessCommand[1:]...), "-"+FlagOneProcessChild)...)
	cmd.Stderr = os.Stderr
	pprof := map[string]string{}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
		// make run serves PPROF_ADDR once, for the whole process.
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		pprof[oneProcessName] = a
		cmd.Env = append(os.Environ(), "PPROF_ADDR="+a)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the one-process suite: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	lines := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, out)
	}()
	var addrs oneProcessAddrs
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &addrs); err != nil || addrs.AGTP == "" {
			return nil, fmt.Errorf("the one-process suite did not say where it listens (%q)", l)
		}
	case <-time.After(90 * time.Second):
		return nil, errors.New("the one-process suite did not start within 90 s")
	}

	layout := devpki.Layout{Dir: addrs.StateDir}
	admin, err := kit.LoadMTLS(layout.CA(), layout.Cert(devpki.Admin), layout.Key(devpki.Admin))
	if err != nil {
		return nil, err
	}
	tel, err := kit.NewTelemetry(ctx, "agtpbench", kit.TelemetryConfig{})
	if err != nil {
		return nil, err
	}
	s := &benchSuite{o: o, progress: progress, procs: map[string]int{oneProcessName: cmd.Process.Pid}, pprof: pprof,
		target: loadgen.Target{Addr: addrs.AGTP, ServerName: "localhost", Roots: admin.Pool()}}
	progress("one-process: registering %d agents", o.Agents)
	s.agents = make([]string, o.Agents)
	s.certs = make([]tls.Certificate, o.Agents)
	for i := range s.agents {
		if s.agents[i], err = registerAgent(ctx, addrs.Identity, admin, tel, fmt.Sprintf("bench-agent-%d", i), benchScopes...); err != nil {
			return nil, err
		}
		s.certs[i] = *AgentCertificate(s.agents[i])
	}

	limit, err := startLimitWith(ctx, o, s.target, layout.Cert(devpki.AGTPServer), layout.Key(devpki.AGTPServer))
	if err != nil {
		return nil, fmt.Errorf("limit responder: %w", err)
	}
	defer limit.stop()
	cfg := loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: o.Concurrency, Mix: loadgen.PipelineMix}
	rep := &OneProcessReport{}
	before, err := s.runLimit(ctx, "one-process limit before", cfg, limit)
	if err != nil {
		return nil, err
	}
	if rep.Run, err = s.run(ctx, ScenarioOneProcess, cfg); err != nil {
		return nil, err
	}
	after, err := s.runLimit(ctx, "one-process limit after", cfg, limit)
	if err != nil {
		return nil, err
	}
	rep.Limit = []*loadgen.Result{before, after}
	progress("one-process: %.2f of the limit measured around it, %.0f µs CPU per request in the suite's process",
		rep.Ratio(), float64(rep.Run.CPUPerRequest(oneProcessName).Microseconds()))
	return rep, nil
}

// write is the report's one-process section.
func (r *OneProcessReport) write(w io.Writer) {
	fmt.Fprintf(w, "## One process (make run)\n\n"+
		"The suite as `make run` starts it (every service in one process, the embedded in-memory Redis instead of redis-server; "+
		"`agtpbench -%s`, a child process), with the throughput run's load and the limit responder just before and just after. "+
		"Not the deployed form: the services still call each other over mTLS gRPC on loopback, but share one heap and scheduler, "+
		"and Redis is the embedded in-memory one, whose scripts run in the same process.\n\n",
		FlagOneProcessChild)
	fmt.Fprintf(w, "| run | achieved req/s | p50 ms | p99 ms | server CPU µs/req | generator CPU µs/req | machine busy | load avg |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(res *loadgen.Result, proc string) {
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %d | %d | %.0f%% | %.2f |\n", res.Name, res.Throughput, loadgen.Ms(res.Latency.P50), loadgen.Ms(res.Latency.P99),
			res.CPUPerRequest(proc).Microseconds(), res.CPUPerRequest("loadgen").Microseconds(), 100*res.MachineBusy, res.LoadAvg[0])
	}
	row(r.Limit[0], "limit")
	row(r.Run, oneProcessName)
	row(r.Limit[1], "limit")
	fmt.Fprintf(w, "\n**One process: %.2f of the limit** (the deployed form's figure is in \"The limit\" above).\n\n", r.Ratio())
}
