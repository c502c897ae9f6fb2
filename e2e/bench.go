package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/attribution/attributionpb"
	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/identitysvc/genesis"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// BenchOptions configure the suite load benchmark. The zero value is the
// `make bench` default: about two and a half minutes on a 2-core machine.
type BenchOptions struct {
	// Warmup and Duration are each run's unrecorded and measured parts.
	// Defaults 2s and 8s.
	Warmup, Duration time.Duration
	// SweepDuration is each open-loop step of the latency sweep. Default 5s.
	SweepDuration time.Duration
	// ProofRounds is how many rounds the side-by-side proof comparison
	// alternates (ProofRound); default 12, negative skips it.
	ProofRounds int
	// Concurrency is the requests in flight in the throughput runs.
	// Default 64: enough to saturate a 2-core machine and let the
	// services batch their writes, as a busy server does.
	Concurrency int
	// NewConnConcurrency is the workers of the new-connection run, each
	// opening a connection per request. Default 8.
	NewConnConcurrency int
	// SweepFractions are the sweep's offered loads, as fractions of the
	// closed-loop throughput of the mix. Default 0.1 to 1.5.
	SweepFractions []float64
	// Agents is how many agents the load is spread over. Default 8.
	Agents int
	// IdleConns is the idle-connection memory test's size; 0 means 10000,
	// negative skips it.
	IdleConns int
	// Mix is the realistic mix; default loadgen.DefaultMix.
	Mix loadgen.Mix
	// TunedEnv is the environment of the "tuned" scenario's second suite:
	// runtime and telemetry settings that need no code change. Default
	// DefaultTunedEnv.
	TunedEnv []string
	// Only, when set, runs just the named scenarios (see Scenarios).
	Only []string
	// Env is added to every service's environment.
	Env []string
	// RedisArgs are extra arguments of the suite's redis-server, after
	// the harness's own (persistence off): "--appendonly", "yes",
	// "--appendfsync", "always" measures the production overlay's
	// durability (docs/performance.md, "What durability costs").
	RedisArgs []string
	// AbuseRate is the offered load of the abuse scenario's
	// persistent-connection client (its new-connection and QUIC clients
	// offer a tenth each). Default 400 req/s: well under the machine's
	// capacity, so that what the abuse costs shows.
	AbuseRate float64
	// AbuseDuration is each measured window of the abuse scenario.
	// Default 5s.
	AbuseDuration time.Duration
	// AbuseKinds are the abusers run, in order; default every kind
	// (loadgen.AbuseKinds).
	AbuseKinds []string
	// AbuseRamp overrides each abuser's ramp-up before measuring (a kind's
	// default lets held connections build up); negative means none, and
	// no settling between phases either (for tests).
	AbuseRamp time.Duration
	// LimitCommand, when set, runs the limit responder (loadgen.ServeLimit)
	// as a child process: the command, to which the loadgen.FlagLimit*
	// flags are added, must run loadgen.ServeLimitChild (agtpbench does).
	// In-process otherwise, where its CPU time is the generator's.
	LimitCommand []string
	// AbuseCommand, when set, runs each abuser as a child process: the
	// command, to which the loadgen.FlagAbuse* flags are added, must run
	// loadgen.ServeAbuseChild (agtpbench does). In-process otherwise.
	AbuseCommand []string
	// OneProcessCommand, when set, runs the one-process scenario: the
	// command, to which -one-process-child is added, must run
	// ServeOneProcessChild (agtpbench does). Without it the scenario is
	// skipped.
	OneProcessCommand []string
	// ProfileDir, when set, starts every service with a loopback pprof
	// listener (PPROF_ADDR) and saves a CPU profile of each service over
	// the measured part of every closed-loop run, as
	// <ProfileDir>/<scenario>-<service>.pprof. Profiling costs a few
	// percent, so profiled runs are for finding where time goes, not for
	// the figures.
	ProfileDir string
	// Progress receives a line per step.
	Progress io.Writer
}

// Scenario names, in run order.
const (
	ScenarioLatency          = "latency"           // QUERY /orders/{id}, TCP, one request in flight
	ScenarioLatencyMix       = "latency-mix"       // the mix, TCP, one request in flight
	ScenarioThroughput       = "throughput"        // QUERY /orders/{id}, TCP, Concurrency in flight
	ScenarioThroughputClaims = "throughput-claims" // the same with bare Agent-ID headers instead of Agent Certificates
	ScenarioThroughputMix    = "throughput-mix"    // the mix, TCP, Concurrency in flight
	ScenarioNewConn          = "new-conn"          // QUERY /orders/{id}, a new TLS connection per request
	ScenarioNewConnResumed   = "new-conn-resumed"  // the same, resuming the TLS session from a ticket
	ScenarioQUICLatency      = "quic-latency"      // QUERY /orders/{id}, QUIC, one request in flight
	ScenarioQUICThroughput   = "quic-throughput"   // QUERY /orders/{id}, QUIC, Concurrency in flight
	ScenarioSweep            = "sweep"             // the mix, open loop at rising offered loads
	ScenarioIdle             = "idle"              // front-door memory with IdleConns idle TLS connections
	ScenarioAbuse            = "abuse"             // well-behaved clients' latency with each kind of abuse alongside
	ScenarioTuned            = "tuned"             // latency and throughput again, on a suite started with TunedEnv
	ScenarioOneProcess       = "one-process"       // throughput against the suite as make run starts it, in one process
)

// Scenarios lists every scenario in run order.
var Scenarios = []string{ScenarioLatency, ScenarioLatencyMix, ScenarioThroughput, ScenarioThroughputClaims, ScenarioThroughputMix,
	ScenarioNewConn, ScenarioNewConnResumed, ScenarioQUICLatency, ScenarioQUICThroughput, ScenarioSweep, ScenarioIdle, ScenarioAbuse, ScenarioTuned, ScenarioOneProcess}

// DeployedProcessors is each service's GOMAXPROCS in the benchmark's
// suite: the CPU the production Kubernetes overlay requests for it, rounded
// up, which is what the manifests set (docs/performance.md, "Processors per
// service"). Without it every service would run a P per core of the
// machine, which is not how the suite is deployed, and each goroutine that
// becomes runnable would wake an idle thread (see
// TestDeployedProcessorsFollowTheManifests).
var DeployedProcessors = map[string]int{
	"frontdoor": 1, "catalogsvc": 1, "policysvc": 1, "rcnssvc": 1, "identitysvc": 1, "auditsvc": 1,
}

// setsGOMAXPROCS reports whether an environment sets GOMAXPROCS, in place
// of DeployedProcessors.
func setsGOMAXPROCS(env []string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") })
}

// DefaultTunedEnv is what the "tuned" scenario changes on top of the
// deployed suite, found by profiling (docs/performance.md): a less eager
// GC, since the heaps are small. Both settings it once showed are the
// deployed form now: one P per service (DeployedProcessors) and this GC
// target (command.DefaultGCPercent), so by default the tuned suite
// measures the deployed one a second time (BenchOptions.TunedEnv
// changes what it tries).
var DefaultTunedEnv = []string{"GOGC=400"}

// ProcNames are the measured processes in report order; "redis" is the
// redis-server and "loadgen" the benchmark itself.
var ProcNames = append(append([]string{}, devpki.ServiceNames...), "redis", "loadgen")

func (o BenchOptions) withDefaults() BenchOptions {
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 8 * time.Second
	}
	if o.SweepDuration <= 0 {
		o.SweepDuration = 5 * time.Second
	}
	if o.ProofRounds == 0 {
		o.ProofRounds = 12
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.NewConnConcurrency <= 0 {
		o.NewConnConcurrency = 8
	}
	if len(o.SweepFractions) == 0 {
		// Past 1.0 too: the closed-loop peak is measured on a shared
		// machine and can be low, and the knee should be in the plot.
		o.SweepFractions = []float64{0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5}
	}
	if o.Agents <= 0 {
		o.Agents = 8
	}
	if o.IdleConns == 0 {
		o.IdleConns = 10_000
	}
	if len(o.Mix) == 0 {
		o.Mix = loadgen.DefaultMix
	}
	if o.AbuseRate <= 0 {
		o.AbuseRate = 400
	}
	if o.AbuseDuration <= 0 {
		o.AbuseDuration = 5 * time.Second
	}
	if len(o.AbuseKinds) == 0 {
		o.AbuseKinds = loadgen.AbuseKinds
	}
	if o.TunedEnv == nil {
		o.TunedEnv = DefaultTunedEnv
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

func (o BenchOptions) runs(name string) bool {
	if len(o.Only) == 0 {
		return true
	}
	for _, s := range o.Only {
		if s == name {
			return true
		}
	}
	return false
}

// BenchReport is everything a benchmark measured.
type BenchReport struct {
	Started  time.Time
	Finished time.Time
	Machine  loadgen.Machine
	// Load is the load average before the cluster started.
	Load    [3]float64
	Options BenchOptions
	// Runs are the closed-loop scenarios by name.
	Runs  map[string]*loadgen.Result
	Order []string
	// Proof are the rounds of the side-by-side proof comparison.
	Proof []ProofRound
	// Limit are the limit responder's runs, with the throughput run's
	// load, just before and just after it (docs/performance.md, "The
	// limit").
	Limit []*loadgen.Result
	// Sweep is the open-loop latency-against-load series.
	Sweep []*loadgen.Result
	Idle  *loadgen.IdleResult
	Abuse *AbuseReport
	// FileLimit is the soft RLIMIT_NOFILE the services were started with.
	FileLimit uint64
	// Floors are round trips that do no work, measured one at a time
	// before the latency run: what any request pays per hop.
	Floors []Floor
	// OneProcess is the one-process scenario (make run's suite).
	OneProcess *OneProcessReport
	// Redis is the version and persistence of the suite's redis-server,
	// as the server reported them.
	Redis RedisSettings
}

// RedisSettings are what a redis-server reports of its version and of
// how durable an acknowledged write is.
type RedisSettings struct {
	Pid         int
	Version     string
	AppendOnly  string // CONFIG GET appendonly: "yes" or "no"
	AppendFsync string // CONFIG GET appendfsync: "always", "everysec" or "no"
	Save        string // CONFIG GET save: the snapshot schedule, "" for none
}

// Floor is the latency of a round trip that does (almost) no work.
type Floor struct {
	Name     string
	Latency  loadgen.Summary
	Statuses map[int]uint64
}

// Bench starts the suite as processes against a real redis-server,
// registers agents, and runs the scenarios. It needs the service binaries
// (AGTP_BIN_DIR, or it builds them) and redis-server on PATH.
func Bench(ctx context.Context, opts BenchOptions) (*BenchReport, error) {
	o := opts.withDefaults()
	rep := &BenchReport{Started: time.Now(), Machine: loadgen.DescribeMachine(), Options: o, Runs: map[string]*loadgen.Result{}}
	rep.Load, _ = loadgen.LoadAvg()
	var progressMu sync.Mutex // the abuse scenario runs its clients at once
	progress := func(format string, args ...any) {
		l, _ := loadgen.LoadAvg()
		progressMu.Lock()
		defer progressMu.Unlock()
		fmt.Fprintf(o.Progress, "%s  [load %.2f]  %s\n", time.Now().Format("15:04:05"), l[0], fmt.Sprintf(format, args...))
	}

	// Raised before the services start, so they inherit it: the idle test
	// holds a descriptor per connection on both sides.
	var err error
	if rep.FileLimit, err = loadgen.RaiseFileLimit(uint64(max(o.IdleConns, 0)) + 4096); err != nil {
		return nil, fmt.Errorf("raise the open-file limit: %w", err)
	}

	if len(o.Only) == 1 && o.Only[0] == ScenarioOneProcess {
		// Nothing needs the deployed suite.
		if len(o.OneProcessCommand) == 0 {
			return rep, errors.New("one-process: no command to run the suite's child process with")
		}
		if rep.OneProcess, err = benchOneProcess(ctx, o, progress); err != nil {
			return rep, fmt.Errorf("one-process: %w", err)
		}
		rep.Finished = time.Now()
		return rep, nil
	}

	s, err := startSuite(ctx, o, nil, progress)
	if err != nil {
		return nil, err
	}
	rep.Redis = s.redis
	defer func() {
		if s != nil { // nil when the tuned suite failed to start
			s.stop()
		}
	}()

	closed := []struct {
		name string
		cfg  loadgen.Config
		// claims sends bare Agent-ID headers instead of presenting the
		// agents' certificates: the comparison for what proof costs.
		claims bool
	}{
		{ScenarioLatency, loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: 1, Mix: loadgen.PipelineMix}, false},
		{ScenarioLatencyMix, loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: 1, Mix: o.Mix}, false},
		{ScenarioThroughput, loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: o.Concurrency, Mix: loadgen.PipelineMix}, false},
		{ScenarioThroughputClaims, loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: o.Concurrency, Mix: loadgen.PipelineMix}, true},
		{ScenarioThroughputMix, loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: o.Concurrency, Mix: o.Mix}, false},
		{ScenarioNewConn, loadgen.Config{Transport: loadgen.TransportTCPNew, Concurrency: o.NewConnConcurrency, Mix: loadgen.PipelineMix}, false},
		{ScenarioNewConnResumed, loadgen.Config{Transport: loadgen.TransportTCPNew, Concurrency: o.NewConnConcurrency, Mix: loadgen.PipelineMix,
			Target: loadgen.Target{Resume: true}}, false},
		{ScenarioQUICLatency, loadgen.Config{Transport: loadgen.TransportQUIC, Concurrency: 1, Mix: loadgen.PipelineMix}, false},
		{ScenarioQUICThroughput, loadgen.Config{Transport: loadgen.TransportQUIC, Concurrency: o.Concurrency, Mix: loadgen.PipelineMix}, false},
	}
	if o.runs(ScenarioLatency) {
		progress("floors: round trips without work, one at a time")
		if rep.Floors, err = s.c.floors(ctx, s.target, floorSamples); err != nil {
			return rep, fmt.Errorf("floors: %w", err)
		}
	}
	var limit *limitServer
	if o.runs(ScenarioThroughput) {
		if limit, err = startLimit(ctx, o, s); err != nil {
			return rep, fmt.Errorf("limit responder: %w", err)
		}
		defer limit.stop()
	}
	for _, sc := range closed {
		if !o.runs(sc.name) {
			continue
		}
		if sc.name == ScenarioThroughput {
			lr, err := s.runLimit(ctx, "limit before", sc.cfg, limit)
			if err != nil {
				return rep, err
			}
			rep.Limit = append(rep.Limit, lr)
		}
		r, err := s.runAs(ctx, sc.name, sc.cfg, !sc.claims)
		if err != nil {
			return rep, err
		}
		rep.Runs[sc.name] = r
		rep.Order = append(rep.Order, sc.name)
		if sc.name == ScenarioThroughput {
			lr, err := s.runLimit(ctx, "limit after", sc.cfg, limit)
			if err != nil {
				return rep, err
			}
			rep.Limit = append(rep.Limit, lr)
			s.progress("throughput: %.2f of the limit measured around it", rep.LimitRatio())
		}
		if sc.name == ScenarioThroughputClaims && o.runs(ScenarioThroughput) && o.ProofRounds > 0 {
			if rep.Proof, err = s.proofRounds(ctx, sc.cfg); err != nil {
				return rep, err
			}
			ratio, low, high := rep.ProofRatio()
			s.progress("proof side by side: ×%.3f over %d rounds (×%.3f to ×%.3f)", ratio, len(rep.Proof), low, high)
		}
	}

	if o.runs(ScenarioSweep) {
		peak := rep.Runs[ScenarioThroughputMix]
		if peak == nil {
			if peak, err = s.run(ctx, "sweep-peak", loadgen.Config{Transport: loadgen.TransportTCP, Concurrency: o.Concurrency, Mix: o.Mix, Duration: o.SweepDuration}); err != nil {
				return rep, err
			}
		}
		for _, f := range o.SweepFractions {
			rate := max(10, roundRate(f*peak.Throughput))
			// Enough workers that queueing happens in the server, not in
			// the generator, up to twice the closed-loop concurrency.
			r, err := s.run(ctx, fmt.Sprintf("sweep %.0f%%", 100*f), loadgen.Config{
				Transport: loadgen.TransportTCP, Concurrency: 2 * o.Concurrency, Rate: rate, Mix: o.Mix,
				Warmup: time.Second, Duration: o.SweepDuration,
			})
			if err != nil {
				return rep, err
			}
			rep.Sweep = append(rep.Sweep, r)
		}
	}

	if o.runs(ScenarioIdle) && o.IdleConns > 0 {
		progress("idle: opening %d TLS connections and holding them", o.IdleConns)
		rep.Idle, err = loadgen.MeasureIdle(ctx, loadgen.IdleConfig{Target: s.target, Conns: o.IdleConns, PID: s.procs["frontdoor"], Hold: 5 * time.Second,
			Sources: idleSources(o.IdleConns)})
		if err != nil {
			return rep, fmt.Errorf("idle: %w", err)
		}
		progress("idle: %d open (%d established), front door RSS %s before, %s held (%s per connection)",
			rep.Idle.Opened, rep.Idle.Established, mib(rep.Idle.RSSBefore), mib(rep.Idle.RSSHeld), kib(rep.Idle.PerConn()))
	}

	if o.runs(ScenarioAbuse) {
		progress("abuse: %s alongside clients at %.0f req/s", strings.Join(o.AbuseKinds, ", "), o.AbuseRate)
		if rep.Abuse, err = s.abuse(ctx); err != nil {
			return rep, err
		}
	}

	if o.runs(ScenarioTuned) && len(o.TunedEnv) > 0 {
		// A fresh suite, so that nothing of the first one (its Redis
		// contents, its processes' heaps) is measured again.
		s.stop()
		if s, err = startSuite(ctx, o, o.TunedEnv, progress); err != nil {
			return rep, fmt.Errorf("tuned: %w", err)
		}
		for _, sc := range closed[:3] { // latency, latency-mix, throughput
			if sc.name == ScenarioLatencyMix {
				continue
			}
			name := "tuned " + sc.name
			r, err := s.run(ctx, name, sc.cfg)
			if err != nil {
				return rep, err
			}
			rep.Runs[name] = r
			rep.Order = append(rep.Order, name)
		}
	}
	// Last, on a suite of its own once the others are stopped.
	if o.runs(ScenarioOneProcess) && len(o.OneProcessCommand) > 0 {
		s.stop()
		s = nil
		if rep.OneProcess, err = benchOneProcess(ctx, o, progress); err != nil {
			return rep, fmt.Errorf("one-process: %w", err)
		}
	}
	rep.Finished = time.Now()
	return rep, nil
}

// idleSources spreads n idle connections over loopback addresses
// 127.0.1.x, at most 500 from each: the front door allows 1000
// connections per address by default, and the test measures memory, not
// that limit.
func idleSources(n int) []string {
	out := make([]string, max(1, (n+499)/500))
	for i := range out {
		out[i] = fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
	}
	return out
}

// benchSuite is one running suite with its registered agents.
type benchSuite struct {
	o        BenchOptions
	c        *Cluster
	stop     func()
	target   loadgen.Target
	procs    map[string]int
	agents   []string
	certs    []tls.Certificate // the agents' Agent Certificates
	pprof    map[string]string
	progress func(string, ...any)
	// redis is what the suite's redis-server said of itself.
	redis RedisSettings
}

// startSuite starts the services with env added to their environment and
// registers the agents.
func startSuite(ctx context.Context, o BenchOptions, env []string, progress func(string, ...any)) (_ *benchSuite, err error) {
	what := "the suite (six service processes and redis-server)"
	if len(env) > 0 {
		what += " with " + strings.Join(env, " ")
	}
	progress("starting %s", what)
	// Warn level: the harness keeps process output in memory, and
	// per-request logging is not what is being measured.
	// The load generator calls as the agents, with their Agent
	// Certificates; caller_proof informational also takes bare headers on
	// read-only endpoints, so that the throughput-claims scenario measures
	// the same QUERY without proof, side by side.
	copts := Options{Env: append(append([]string{"LOG_LEVEL=warn", "AGTP_CALLER_PROOF=informational"}, o.Env...), env...), ServiceEnv: map[string][]string{},
		RedisArgs: o.RedisArgs}
	// A GOMAXPROCS of the caller's (Env, the tuned scenario's) replaces the
	// deployed sizing rather than being overridden by it.
	if !setsGOMAXPROCS(copts.Env) {
		for n, procs := range DeployedProcessors {
			copts.ServiceEnv[n] = append(copts.ServiceEnv[n], "GOMAXPROCS="+strconv.Itoa(procs))
		}
	}
	s := &benchSuite{o: o, pprof: map[string]string{}, progress: progress}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
		for _, n := range devpki.ServiceNames {
			a, err := freeAddr()
			if err != nil {
				return nil, err
			}
			s.pprof[n] = a
			copts.ServiceEnv[n] = append(copts.ServiceEnv[n], "PPROF_ADDR="+a)
		}
	}
	// One retry: the harness picks free ports by listening and closing,
	// and another program on the machine can take one in between.
	s.c, s.stop, err = StartCluster(copts)
	if err != nil && ctx.Err() == nil {
		progress("the suite did not start, retrying once: %v", firstLine(err))
		s.c, s.stop, err = StartCluster(copts)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	s.target = loadgen.Target{Addr: s.c.Procs["frontdoor"].AGTPAddr, ServerName: "localhost", Roots: s.c.Admin.Pool()}
	if err := loadgen.Check(ctx, s.target); err != nil {
		return nil, fmt.Errorf("the front door does not answer: %w", err)
	}
	if s.redis, err = s.c.redisSettings(ctx); err != nil {
		return nil, err
	}
	if s.procs, err = s.c.pids(s.redis.Pid); err != nil {
		return nil, err
	}
	progress("registering %d agents", o.Agents)
	s.agents = make([]string, o.Agents)
	s.certs = make([]tls.Certificate, o.Agents)
	for i := range s.agents {
		if s.agents[i], err = s.c.RegisterAgent(ctx, fmt.Sprintf("bench-agent-%d", i), benchScopes...); err != nil {
			return nil, err
		}
		s.certs[i] = *AgentCertificate(s.agents[i])
	}
	return s, nil
}

// ProofRound is one round of the comparison of what proof of the caller
// costs: a short throughput run presenting Agent Certificates and one with
// bare Agent-ID headers, back to back on one suite.
type ProofRound struct {
	Certs, Claims *loadgen.Result
}

// proofRounds runs BenchOptions.ProofRounds rounds of short certificate
// and bare-header runs with cfg's load, in the order certificates, headers,
// headers, certificates and so on. On this shared machine throughput
// drifts by tens of per cent over a minute; runs a few seconds apart, each
// side first in every other round, see the same machine, so a drift does
// not count for or against proof as it does between two full-length runs
// half a minute apart.
func (s *benchSuite) proofRounds(ctx context.Context, cfg loadgen.Config) ([]ProofRound, error) {
	cfg.Warmup, cfg.Duration = max(s.o.Warmup/4, 10*time.Millisecond), max(s.o.Duration/4, 10*time.Millisecond)
	// Profiles are of the full-length runs; a round is too short for one.
	unprofiled := *s
	unprofiled.pprof = nil
	rounds := make([]ProofRound, s.o.ProofRounds)
	for i := range rounds {
		certsFirst := i%2 == 0
		for _, certs := range []bool{certsFirst, !certsFirst} {
			name := fmt.Sprintf("proof %d, bare headers", i+1)
			if certs {
				name = fmt.Sprintf("proof %d, certificates", i+1)
			}
			r, err := unprofiled.runAs(ctx, name, cfg, certs)
			if err != nil {
				return nil, err
			}
			if certs {
				rounds[i].Certs = r
			} else {
				rounds[i].Claims = r
			}
		}
	}
	return rounds, nil
}

// run is one load run against the suite, with the suite's target,
// agents (calling with their Agent Certificates) and processes filled in.
func (s *benchSuite) run(ctx context.Context, name string, cfg loadgen.Config) (*loadgen.Result, error) {
	return s.runAs(ctx, name, cfg, true)
}

// runAs is run, with the agents presenting their certificates or, without
// withCerts, naming themselves in a bare Agent-ID header.
func (s *benchSuite) runAs(ctx context.Context, name string, cfg loadgen.Config, withCerts bool) (*loadgen.Result, error) {
	resume := cfg.Target.Resume
	cfg.Name, cfg.Target, cfg.Agents, cfg.Procs = name, s.target, s.agents, s.procs
	if withCerts {
		cfg.AgentCerts = s.certs
	}
	cfg.Target.Resume = resume
	if cfg.Warmup == 0 {
		cfg.Warmup = s.o.Warmup
	}
	if cfg.Duration == 0 {
		cfg.Duration = s.o.Duration
	}
	s.progress("%s: %s, %d in flight, offered %s, mix %s", name, cfg.Transport, max(cfg.Concurrency, 1), offered(cfg.Rate), mixName(cfg.Mix))
	profiled := profile(ctx, s.o.ProfileDir, name, s.pprof, cfg.Warmup, cfg.Duration)
	r, err := loadgen.Run(ctx, cfg)
	if perr := profiled(); perr != nil {
		s.progress("%s: profiling: %v", name, perr)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.progress("%s: %.0f req/s, p50 %s ms, p99 %s ms, %.1f%% 2xx, front door %.0f req per CPU-second, %.1f context switches/req",
		name, r.Throughput, loadgen.Ms(r.Latency.P50), loadgen.Ms(r.Latency.P99), 100*r.SuccessRatio(), r.PerCPUSecond("frontdoor"),
		r.CtxSwitchesPerRequest("frontdoor"))
	return r, nil
}

func offered(rate float64) string {
	if rate <= 0 {
		return "closed loop"
	}
	return fmt.Sprintf("%.0f/s", rate)
}

func mixName(m loadgen.Mix) string {
	if len(m) == 0 {
		return "default"
	}
	return m.String()
}

// roundRate rounds to two significant digits, so the sweep's rates read
// well in tables.
func roundRate(r float64) float64 {
	if r < 100 {
		return float64(int(r))
	}
	p := 1.0
	for r/p >= 100 {
		p *= 10
	}
	return float64(int(r/p+0.5)) * p
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }

// pids returns the processes the benchmark measures: every service and
// the redis-server (redisPid, as it reported it in INFO).
func (c *Cluster) pids(redisPid int) (map[string]int, error) {
	out := map[string]int{}
	for name, p := range c.Procs {
		if pid := p.Pid(); pid > 0 {
			out[name] = pid
		}
	}
	if redisPid > 0 {
		out["redis"] = redisPid
	}
	if out["frontdoor"] == 0 {
		return nil, errors.New("the front door is not running")
	}
	return out, nil
}

// redisClient is a client of the suite's redis-server, from the URL the
// processes were given; the caller closes it.
func (c *Cluster) redisClient() (*redis.Client, error) {
	o, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	return redis.NewClient(o), nil
}

// redisSettings asks the suite's redis-server for its process, version
// and persistence, so that a report states what the server ran with
// rather than what the command asked for.
func (c *Cluster) redisSettings(ctx context.Context) (RedisSettings, error) {
	rc, err := c.redisClient()
	if err != nil {
		return RedisSettings{}, err
	}
	defer rc.Close()
	var out RedisSettings
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return out, fmt.Errorf("redis INFO: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			out.Pid, _ = strconv.Atoi(v)
		} else if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			out.Version = v
		}
	}
	conf, err := rc.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return out, fmt.Errorf("redis CONFIG GET: %w", err)
	}
	save, err := rc.ConfigGet(ctx, "save").Result()
	if err != nil {
		return out, fmt.Errorf("redis CONFIG GET: %w", err)
	}
	out.AppendOnly, out.AppendFsync, out.Save = conf["appendonly"], conf["appendfsync"], save["save"]
	return out, nil
}

// RegisterAgent registers and activates a new agent with the given scopes
// through identitysvc, and returns its canonical Agent-ID; its Agent
// Certificate is then AgentCertificate(id).
func (c *Cluster) RegisterAgent(ctx context.Context, name string, scopes ...string) (string, error) {
	return registerAgent(ctx, c.Procs["identitysvc"].GRPCAddr, c.Admin, c.tel, name, scopes...)
}

// benchScopes are the scopes of the agents the load runs as.
var benchScopes = []string{"orders:read", "orders:write", "documents:read", "reports:run"}

// registerAgent registers and activates an agent through the identitysvc
// at addr, as admin, and issues it an Agent Certificate
// (AgentCertificate).
func registerAgent(ctx context.Context, addr string, admin *kit.MTLS, tel *kit.Telemetry, name string, scopes ...string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	g, err := genesis.Create(genesis.Template{
		Owner: "bench@example.test", Archetype: genesis.ArchetypeExecutor, GovernanceZone: "development",
		Scope: scopes, TrustTier: genesis.TierOrgAsserted, VerificationPath: genesis.PathOrgAsserted, OrgLabel: name,
	}, priv)
	if err != nil {
		return "", err
	}
	conn, err := kit.DialService(addr, "identitysvc", admin, tel)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := identityv1.NewIdentityServiceClient(conn).RegisterGenesis(ctx,
		&identityv1.RegisterGenesisRequest{Genesis: string(g.Bytes()), Name: name, Activate: true})
	if err != nil {
		return "", fmt.Errorf("register %s: %w", name, err)
	}
	id := resp.GetAgent().GetAgentId()
	if _, err := issueAgentCert(id, priv); err != nil {
		return "", err
	}
	return id, nil
}

// profile fetches a CPU profile of every service in addrs over the
// measured window of a run starting now, in the background; the returned
// function waits for the profiles and reports what failed. With no
// directory it does nothing.
func profile(ctx context.Context, dir, scenario string, addrs map[string]string, warmup, duration time.Duration) func() error {
	if dir == "" || len(addrs) == 0 {
		return func() error { return nil }
	}
	secs := max(1, int(duration/time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, len(addrs))
	for name, addr := range addrs {
		wg.Go(func() {
			select {
			case <-time.After(warmup):
			case <-ctx.Done():
				return
			}
			file := filepath.Join(dir, strings.ReplaceAll(scenario, " ", "_")+"-"+name+".pprof")
			if err := fetchProfile(ctx, "http://"+addr+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), file); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	return func() error {
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		return errors.Join(all...)
	}
}

func fetchProfile(ctx context.Context, url, file string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

func freeAddr() (string, error) {
	port, err := testkit.PickPort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// floorSamples is how many round trips each floor measures.
const floorSamples = 2000

// floors measures the round trips a request is made of, each doing no
// work: AGTP over TLS to the front door and back without any internal
// call (a 459 method-invalid the transport answers itself), the same with
// only the audit hop (a 404), a gRPC unary call over the suite's mTLS
// (health Check, to policysvc and auditsvc), and a Redis PING.
func (c *Cluster) floors(ctx context.Context, target loadgen.Target, n int) ([]Floor, error) {
	var out []Floor
	bad, err := agtp.NewRequest("query", "/orders")
	if err != nil {
		return nil, err
	}
	s, statuses, err := loadgen.Probe(ctx, target, bad, n, 0)
	if err != nil {
		return nil, err
	}
	out = append(out, Floor{"AGTP round trip, no internal call (459 method-invalid from the transport)", s, statuses})
	notFound, err := agtp.NewRequest("QUERY", "/nothing-here")
	if err != nil {
		return nil, err
	}
	if s, statuses, err = loadgen.Probe(ctx, target, notFound, n, 0); err != nil {
		return nil, err
	}
	out = append(out, Floor{"AGTP round trip with one internal call (404 from the catalog snapshot, signed by auditsvc)", s, statuses})
	for _, svc := range []string{"policysvc", "auditsvc"} {
		conn, err := kit.DialService(c.Procs[svc].GRPCAddr, svc, c.Admin, c.tel)
		if err != nil {
			return nil, err
		}
		hc := healthpb.NewHealthClient(conn)
		var h loadgen.Histogram
		for i := 0; i < n && ctx.Err() == nil; i++ {
			begin := time.Now()
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				conn.Close()
				return nil, fmt.Errorf("%s health: %w", svc, err)
			}
			if i > 0 { // the first call sets up the connection
				h.Record(time.Since(begin))
			}
		}
		conn.Close()
		out = append(out, Floor{"gRPC unary call over mTLS (health Check on " + svc + ")", h.Summarize(), nil})
	}
	if f, err := c.policyFloor(ctx, n); err == nil {
		out = append(out, f)
	} else {
		out = append(out, Floor{Name: "policysvc Authorize called directly: not measured (" + firstLine(err) + ")"})
	}
	if f, err := c.auditFloor(ctx, n); err == nil {
		out = append(out, f)
	} else {
		out = append(out, Floor{Name: "auditsvc SignAndAppend called directly: not measured (" + firstLine(err) + ")"})
	}
	rc, err := c.redisClient()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var h loadgen.Histogram
	for i := 0; i < n && ctx.Err() == nil; i++ {
		begin := time.Now()
		if err := rc.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("redis PING: %w", err)
		}
		if i > 0 {
			h.Record(time.Since(begin))
		}
	}
	out = append(out, Floor{"Redis PING", h.Summarize(), nil})
	return out, nil
}

func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// auditFloor calls auditsvc SignAndAppend directly, one at a time, with
// the payload of a small anonymous response: the audit hop on its own.
func (c *Cluster) auditFloor(ctx context.Context, n int) (Floor, error) {
	// Only the front door signs records (docs/access.md).
	conn, err := c.dialServiceAs("auditsvc", "frontdoor")
	if err != nil {
		return Floor{}, err
	}
	defer conn.Close()
	ac := auditv1.NewAuditServiceClient(conn)
	var h loadgen.Histogram
	for i := 0; i < n && ctx.Err() == nil; i++ {
		// Typed claims, as the front door sends them.
		claims := attributionpb.Claims(&attribution.Payload{
			ServerID: "agtp.localhost", Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
			RequestHash: strings.Repeat("a", 64), Status: 404, Method: "QUERY",
			ResponseID: fmt.Sprintf("bench-%d", i), ResultHash: strings.Repeat("b", 64),
		})
		begin := time.Now()
		if _, err := ac.SignAndAppend(ctx, &auditv1.SignAndAppendRequest{Claims: claims}); err != nil {
			return Floor{}, err
		}
		if i > 0 {
			h.Record(time.Since(begin))
		}
	}
	return Floor{Name: "auditsvc SignAndAppend called directly (gRPC, server chain)", Latency: h.Summarize()}, nil
}

// policyFloor calls policysvc Authorize directly, one at a time, with the
// request the front door sends for QUERY /orders/{order_id}: the policy
// hop on its own.
func (c *Cluster) policyFloor(ctx context.Context, n int) (Floor, error) {
	conn, err := c.dialServiceAs("policysvc", "frontdoor")
	if err != nil {
		return Floor{}, err
	}
	defer conn.Close()
	pc := policyv1.NewPolicyServiceClient(conn)
	req := &policyv1.AuthorizeRequest{
		AgentId: strings.Repeat("ab", 32), AgentScopes: []string{"orders:read", "orders:write"},
		Method: "QUERY", PathTemplate: "/orders/{order_id}", RequiredScopes: []string{"orders:read"},
		EndpointIdempotent: true, ClientIp: "127.0.0.1", Principal: "bench@example.test",
	}
	var h loadgen.Histogram
	for i := 0; i < n && ctx.Err() == nil; i++ {
		begin := time.Now()
		out, err := pc.Authorize(ctx, req)
		if err != nil {
			return Floor{}, err
		}
		if out.GetDecision() != policyv1.Decision_DECISION_ALLOW {
			return Floor{}, fmt.Errorf("decision %v", out.GetDecision())
		}
		if i > 0 {
			h.Record(time.Since(begin))
		}
	}
	return Floor{Name: "policysvc Authorize called directly (gRPC, QUERY /orders/{order_id})", Latency: h.Summarize()}, nil
}
