package e2e

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/devpki"
)

// The performance targets of the front door, on a 2-core
// machine with every service a separate process and a real Redis.
const (
	TargetPerCore        = 6000  // requests per second per front-door core, persistent connections
	AimPerCore           = 10000 // the aim beyond the target
	TargetP50            = time.Millisecond
	TargetP99            = 3 * time.Millisecond
	TargetNewConnPerCore = 1000    // requests per second per front-door core, new TLS connection each
	TargetIdleConns      = 10000   // idle connections held ...
	TargetIdleRSS        = 1 << 30 // ... in less than this much front-door memory
	// TargetLimitRatio is the least throughput of the full pipeline at
	// Concurrency in flight, as a share of the limit responder's with the
	// same load in the same run; AimLimitRatio the aim beyond it.
	TargetLimitRatio = 0.40
	AimLimitRatio    = 0.50
	// TargetProofRatio is the least throughput with Agent Certificates,
	// as a share of the same load with bare Agent-ID headers.
	TargetProofRatio = 0.95
)

// Verdict is one target checked against a measurement.
type Verdict struct {
	Target   string
	Measured string
	Met      bool
	Note     string
}

// Verdicts checks the targets against what was measured; targets
// whose scenario did not run are left out.
func (r *BenchReport) Verdicts() []Verdict {
	var v []Verdict
	if ratio := r.LimitRatio(); ratio > 0 {
		t := r.Runs[ScenarioThroughput]
		v = append(v, Verdict{fmt.Sprintf("≥ %.2f of the limit measured in the same run, full pipeline, %d in flight", TargetLimitRatio, t.Concurrency),
			fmt.Sprintf("%.2f", ratio), ratio >= TargetLimitRatio,
			fmt.Sprintf("%.0f req/s against the limit responder's %s; the aim is %.2f", t.Throughput, limitRates(r.Limit), AimLimitRatio)})
	}
	for _, prefix := range []string{"", "tuned "} {
		label := ""
		if prefix != "" {
			label = " (tuned: " + strings.Join(r.Options.TunedEnv, " ") + ")"
		}
		if t := r.Runs[prefix+ScenarioThroughput]; t != nil {
			pc := t.PerCPUSecond("frontdoor")
			note := fmt.Sprintf("%.0f req/s over %d persistent connections; the aim is %d", t.Throughput, t.Connections, AimPerCore)
			v = append(v, Verdict{fmt.Sprintf("≥ %d req/s per front-door core, full pipeline, persistent connections%s", TargetPerCore, label),
				fmt.Sprintf("%.0f", pc), pc >= TargetPerCore, note})
		}
		if t := r.Runs[prefix+ScenarioLatency]; t != nil {
			v = append(v, Verdict{"one request in flight: p50 ≤ 1 ms" + label, loadgen.Ms(t.Latency.P50) + " ms", t.Latency.P50 <= TargetP50, ""})
			v = append(v, Verdict{"one request in flight: p99 ≤ 3 ms" + label, loadgen.Ms(t.Latency.P99) + " ms", t.Latency.P99 <= TargetP99, ""})
		}
	}
	if len(r.Proof) > 0 {
		ratio, low, high := r.ProofRatio()
		certs, claims := r.proofSides()
		v = append(v, Verdict{fmt.Sprintf("throughput with Agent Certificates within %.0f%% of bare Agent-ID headers, side by side", 100*(1-TargetProofRatio)),
			fmt.Sprintf("×%.3f", ratio), ratio >= TargetProofRatio,
			fmt.Sprintf("%.0f against %.0f req/s over %d alternating rounds (each round ×%.3f to ×%.3f); front door %.0f against %.0f req per CPU-second",
				certs.Throughput, claims.Throughput, len(r.Proof), low, high, certs.PerCPUSecond("frontdoor"), claims.PerCPUSecond("frontdoor"))})
	}
	if t := r.Runs[ScenarioNewConn]; t != nil {
		pc := t.PerCPUSecond("frontdoor")
		v = append(v, Verdict{fmt.Sprintf("new TLS connection per request: ≥ %d req/s per front-door core", TargetNewConnPerCore),
			fmt.Sprintf("%.0f", pc), pc >= TargetNewConnPerCore, fmt.Sprintf("%.0f req/s with %d workers", t.Throughput, t.Concurrency)})
	}
	if a := r.Abuse; a != nil && len(a.Pairs) > 0 {
		ratio, kind, client := a.Worst()
		v = append(v, Verdict{fmt.Sprintf("abuse: other clients' p99 within %.0f× of its value without abuse", AbuseLimit),
			fmt.Sprintf("worst ×%.2f", ratio), ratio <= AbuseLimit,
			fmt.Sprintf("%s, %s client; %d kinds of abuse, well-behaved load %.0f req/s; without abuse the p99 moved by up to ×%.2f between windows",
				kind, client, len(a.Pairs), a.Rate, a.MaxDrift())})
	}
	if i := r.Idle; i != nil {
		met := i.Opened >= TargetIdleConns && i.Established >= TargetIdleConns && i.RSSHeld < TargetIdleRSS
		v = append(v, Verdict{fmt.Sprintf("%d idle connections in < 1 GiB of front-door memory", TargetIdleConns),
			fmt.Sprintf("%d held, RSS %s", i.Opened, mib(i.RSSHeld)), met,
			fmt.Sprintf("%s per connection above the %s baseline", kib(i.PerConn()), mib(i.RSSBefore))})
	}
	return v
}

// ProofRatio is the certificate runs' throughput over the bare-header
// runs', pooled over the proof rounds, with the lowest and highest ratio of
// a single round.
func (r *BenchReport) ProofRatio() (ratio, low, high float64) {
	certs, claims := r.proofSides()
	if claims.Throughput == 0 {
		return 0, 0, 0
	}
	low, high = math.Inf(1), 0
	for _, p := range r.Proof {
		if p.Claims.Throughput > 0 {
			q := p.Certs.Throughput / p.Claims.Throughput
			low, high = min(low, q), max(high, q)
		}
	}
	return certs.Throughput / claims.Throughput, low, high
}

// proofSides pools the proof rounds' certificate runs, and their
// bare-header runs, each into one Result whose responses, window and CPU
// are the rounds' added up, so that its Throughput and PerCPUSecond are
// the pooled figures.
func (r *BenchReport) proofSides() (certs, claims *loadgen.Result) {
	pool := func(side func(ProofRound) *loadgen.Result) *loadgen.Result {
		p := &loadgen.Result{CPU: map[string]time.Duration{}}
		for _, round := range r.Proof {
			run := side(round)
			p.Completed += run.Completed
			p.Elapsed += run.Elapsed
			for name, d := range run.CPU {
				p.CPU[name] += d
			}
		}
		if p.Elapsed > 0 {
			p.Throughput = float64(p.Completed) / p.Elapsed.Seconds()
		}
		return p
	}
	return pool(func(p ProofRound) *loadgen.Result { return p.Certs }), pool(func(p ProofRound) *loadgen.Result { return p.Claims })
}

// writeProof writes the proof rounds, one row per run.
func (r *BenchReport) writeProof(w io.Writer) {
	fmt.Fprintf(w, "## Proof of the caller, side by side\n\n"+
		"Short closed-loop runs of the throughput run's load, alternately presenting the agents' Agent Certificates and sending bare Agent-ID headers, "+
		"each side first in every other round, so that the machine's drift over a minute falls on both sides alike.\n\n")
	fmt.Fprintln(w, "| round | certificates req/s | bare headers req/s | ratio | front-door CPU µs/req, certificates against bare headers |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	for i, p := range r.Proof {
		ratio := "–"
		if p.Claims.Throughput > 0 {
			ratio = fmt.Sprintf("×%.3f", p.Certs.Throughput/p.Claims.Throughput)
		}
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %s | %.0f against %.0f |\n", i+1, p.Certs.Throughput, p.Claims.Throughput, ratio,
			float64(p.Certs.CPUPerRequest("frontdoor"))/float64(time.Microsecond), float64(p.Claims.CPUPerRequest("frontdoor"))/float64(time.Microsecond))
	}
	ratio, _, _ := r.ProofRatio()
	certs, claims := r.proofSides()
	fmt.Fprintf(w, "| all | %.0f | %.0f | **×%.3f** | |\n\n", certs.Throughput, claims.Throughput, ratio)
}

// WriteMarkdown writes the report: machine, targets, every run, the
// sweep and the idle test. command is how the run was started; svgName,
// when set, is the plot's file name beside the report.
func (r *BenchReport) WriteMarkdown(w io.Writer, command, svgName string) {
	m := r.Machine
	fmt.Fprintf(w, "# Load benchmark results\n\n")
	fmt.Fprintf(w, "Generated by `%s` on %s (%s).\n\n", command, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second))
	fmt.Fprintf(w, "| machine | |\n|---|---|\n")
	fmt.Fprintf(w, "| CPUs (nproc) | %d |\n| CPU model | %s |\n| memory | %.1f GiB |\n| kernel | %s |\n| Go | %s |\n",
		m.CPUs, m.CPUModel, float64(m.MemTotal)/(1<<30), m.Kernel, m.GoVersion)
	fmt.Fprintf(w, "| load average before the run | %.2f %.2f %.2f |\n| open-file limit (services inherit it) | %d |\n\n", r.Load[0], r.Load[1], r.Load[2], r.FileLimit)
	fmt.Fprintf(w, "All services ran as separate processes with mTLS gRPC between them and a real redis-server (%s), on loopback, "+
		"on the same %d cores as the load generator, %s. Each run: %v warm-up, then %v measured. Latency is from sending the "+
		"request (open loop: from when it was due) to reading the whole response.\n\n", r.redisText(), m.CPUs, r.processorsText(), r.Options.Warmup, r.Options.Duration)

	if v := r.Verdicts(); len(v) > 0 {
		fmt.Fprintf(w, "## Targets\n\n| target | measured | met | |\n|---|---:|---|---|\n")
		for _, x := range v {
			met := "**no**"
			if x.Met {
				met = "yes"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", x.Target, x.Measured, met, x.Note)
		}
		fmt.Fprintln(w)
	}

	if len(r.Floors) > 0 {
		fmt.Fprintf(w, "## Round trips without work\n\n"+
			"Measured one at a time before the latency run: the floor each part of a request's path costs.\n\n")
		fmt.Fprintf(w, "| round trip | p50 ms | p90 ms | p99 ms | p99.9 ms |\n|---|---:|---:|---:|---:|\n")
		for _, f := range r.Floors {
			name := f.Name
			if len(f.Statuses) > 0 {
				name += "; statuses " + loadgen.FormatStatuses(f.Statuses)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", name, loadgen.Ms(f.Latency.P50), loadgen.Ms(f.Latency.P90), loadgen.Ms(f.Latency.P99), loadgen.Ms(f.Latency.P999))
		}
		fmt.Fprintln(w)
	}

	if len(r.Limit) > 0 {
		r.writeLimit(w)
	}
	if len(r.Proof) > 0 {
		r.writeProof(w)
	}

	runs := make([]*loadgen.Result, 0, len(r.Order))
	for _, n := range r.Order {
		runs = append(runs, r.Runs[n])
	}
	if len(runs) > 0 {
		fmt.Fprintf(w, "## Closed-loop runs\n\n")
		fmt.Fprintf(w, "`latency*` and `throughput*` use persistent TLS connections, one request in flight per connection; "+
			"runs without `-mix` send only QUERY /orders/{order_id} (the full pipeline: identity cache, policysvc Authorize "+
			"or the decision it marked reusable for that caller's identical request, handler, auditsvc SignAndAppend); `-mix` runs send the realistic mix `%s`. "+
			"`tuned` runs use a second suite started with `%s` (environment only, no code change).\n\n",
			r.Options.Mix, strings.Join(r.Options.TunedEnv, " "))
		loadgen.WriteTable(w, runs, "frontdoor")
		fmt.Fprintf(w, "\n### CPU time per request by process (µs)\n\n")
		loadgen.WriteCPU(w, append(runs, r.Sweep...), ProcNames)
		fmt.Fprintf(w, "\n### Context switches per request by process\n\n"+
			"Voluntary and involuntary, over every thread of each process: each is a thread that blocked or was preempted, "+
			"and is paid for again when it is woken, which on a virtual machine can cost more than the request's own work "+
			"(docs/performance.md, \"Running it\").\n\n")
		loadgen.WriteCtxSwitches(w, append(runs, r.Sweep...), ProcNames)
		fmt.Fprintf(w, "\n### Waiting for a CPU per request by process (µs)\n\n"+
			"Time the process's threads were runnable but not running, over every thread: a woken thread queued for a core. "+
			"Beside \"machine busy\" it tells queueing for busy cores from work left queued while a core idled (docs/performance.md, "+
			"\"Waiting for a core\").\n\n")
		loadgen.WriteRunqueueWait(w, append(runs, r.Sweep...), ProcNames)
		fmt.Fprintln(w)
		for _, res := range runs {
			fmt.Fprintf(w, "### %s: by operation\n\n", res.Name)
			loadgen.WriteOps(w, res)
			fmt.Fprintln(w)
		}
	}

	if len(r.Sweep) > 0 {
		fmt.Fprintf(w, "## Latency against offered load (open loop, realistic mix)\n\n")
		if svgName != "" {
			fmt.Fprintf(w, "![latency percentiles against offered load](%s)\n\n", svgName)
		}
		loadgen.WriteTable(w, r.Sweep, "frontdoor")
		fmt.Fprintln(w)
	}

	if a := r.Abuse; a != nil {
		a.write(w)
	}

	if r.OneProcess != nil {
		r.OneProcess.write(w)
	}

	if i := r.Idle; i != nil {
		fmt.Fprintf(w, "## Idle connections\n\n")
		fmt.Fprintf(w, "| requested | opened | established on the server | time to open | front-door RSS before | held (max) | after closing | per connection | front-door open-file limit | DISCOVER p50 / p99 while held |\n")
		fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		fmt.Fprintf(w, "| %d | %d | %d | %v | %s | %s | %s | %s | %d | %s / %s ms |\n", i.Requested, i.Opened, i.Established,
			i.OpenTime.Round(10*time.Millisecond), mib(i.RSSBefore), mib(i.RSSHeld), mib(i.RSSAfter), kib(i.PerConn()), i.FDLimit,
			loadgen.Ms(i.Probe.P50), loadgen.Ms(i.Probe.P99))
		for e, n := range i.Errors {
			fmt.Fprintf(w, "\n%d connections failed: %s\n", n, e)
		}
		fmt.Fprintln(w)
	}
}

// SVG plots the sweep.
func (r *BenchReport) SVG() []byte {
	pts := make([]loadgen.SweepPoint, len(r.Sweep))
	for i, s := range r.Sweep {
		pts[i] = loadgen.PointFrom(s)
	}
	sub := fmt.Sprintf("AGTP over TLS, realistic mix, %d agents; all six services + redis on %d cores (%s)",
		r.Options.Agents, r.Machine.CPUs, r.Started.UTC().Format("2006-01-02"))
	return loadgen.PlotSVG("Front door latency against offered load", sub, pts)
}

func limitRates(runs []*loadgen.Result) string {
	parts := make([]string, len(runs))
	for i, l := range runs {
		parts[i] = fmt.Sprintf("%.0f", l.Throughput)
	}
	return strings.Join(parts, " and ") + " req/s"
}

// writeLimit writes the limit responder's runs beside the throughput run
// and the suite's share of the limit.
func (r *BenchReport) writeLimit(w io.Writer) {
	fmt.Fprintf(w, "## The limit\n\n"+
		"A minimal responder of the same wire (TLS 1.3 with the front door's certificate, AGTP framing through services/agtp, "+
		"one Ed25519 signature and a hash-chain link per response, nothing else; `loadgen.ServeLimit`, its own process) "+
		"measured with the throughput run's load, request and concurrency just before and just after it. "+
		"The machine is shared, so compare within this table rather than with other runs.\n\n")
	fmt.Fprintln(w, "| run | achieved req/s | p50 ms | p99 ms | server CPU µs/req | server context switches/req | server wait for a CPU µs/req | generator CPU µs/req | machine busy | load avg |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	// row sums the server figures over the processes that serve the run.
	row := func(res *loadgen.Result, server []string) {
		var cpu, wait time.Duration
		var switches float64
		for _, p := range server {
			cpu += res.CPUPerRequest(p)
			switches += res.CtxSwitchesPerRequest(p)
			wait += res.RunqueueWaitPerRequest(p)
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.0f | %.1f | %.0f | %.0f | %.0f%% | %.2f |\n", res.Name, res.Throughput, loadgen.Ms(res.Latency.P50), loadgen.Ms(res.Latency.P99),
			float64(cpu)/float64(time.Microsecond), switches, float64(wait)/float64(time.Microsecond),
			float64(res.CPUPerRequest("loadgen"))/float64(time.Microsecond), 100*res.MachineBusy, res.LoadAvg[0])
	}
	limit := []string{"limit"}
	if len(r.Limit) > 0 {
		row(r.Limit[0], limit)
	}
	if t := r.Runs[ScenarioThroughput]; t != nil {
		var suite []string
		for _, p := range ProcNames {
			if p != "loadgen" {
				suite = append(suite, p)
			}
		}
		row(t, suite)
	}
	for _, l := range r.Limit[1:] {
		row(l, limit)
	}
	fmt.Fprintf(w, "\nThe suite's server figures are every service and redis-server together (by process in the CPU and context-switch tables below). "+
		"**Throughput as a share of the limit: %.2f** (target ≥ %.2f, aim %.2f).\n\n", r.LimitRatio(), TargetLimitRatio, AimLimitRatio)
}

// processorsText says what GOMAXPROCS the services ran with: the
// command's -env when it set one, else DeployedProcessors in service order.
func (r *BenchReport) processorsText() string {
	if setsGOMAXPROCS(r.Options.Env) {
		return "each with the GOMAXPROCS of the command's -env"
	}
	parts := make([]string, 0, len(devpki.ServiceNames))
	for _, n := range devpki.ServiceNames {
		parts = append(parts, fmt.Sprintf("%s %d", n, DeployedProcessors[n]))
	}
	return "each with the GOMAXPROCS the Kubernetes manifests give it (" + strings.Join(parts, ", ") + ") unless a run says otherwise"
}

// redisText says how durable the suite's redis-server made a write, as
// the server reported it: the harness runs it without persistence unless
// the command's -redis-arg turned it on, as the production overlay does
// with the AOF and appendfsync always.
func (r *BenchReport) redisText() string {
	rs := r.Redis
	var parts []string
	if rs.Version != "" {
		parts = append(parts, rs.Version)
	}
	switch {
	case rs.AppendOnly == "":
		parts = append(parts, "persistence not reported")
	case rs.AppendOnly == "no" && rs.Save == "":
		parts = append(parts, "persistence off: no AOF, no snapshots")
	default:
		if rs.AppendOnly == "yes" {
			parts = append(parts, "AOF on, appendfsync "+rs.AppendFsync)
		} else {
			parts = append(parts, "no AOF")
		}
		if rs.Save != "" {
			parts = append(parts, "snapshots (save "+rs.Save+")")
		}
	}
	text := strings.Join(parts, ", ")
	if len(r.Options.RedisArgs) > 0 {
		text += "; -redis-arg " + strings.Join(r.Options.RedisArgs, " ")
	}
	return text
}

// CommandLine is how a report names the run that made it: args (without
// the program) after "agtpbench", with every absolute path under wd made
// relative to it, so that a report committed to the repository does not
// carry the layout of the machine that generated it.
func CommandLine(args []string, wd string) string {
	out := []string{"agtpbench"}
	for _, a := range args {
		flag, value, isFlag := strings.Cut(a, "=")
		if !isFlag || !strings.HasPrefix(flag, "-") {
			flag, value = "", a
		}
		if filepath.IsAbs(value) && wd != "" {
			if rel, err := filepath.Rel(wd, value); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				value = rel
			}
		}
		if flag != "" {
			value = flag + "=" + value
		}
		out = append(out, value)
	}
	return strings.Join(out, " ")
}
