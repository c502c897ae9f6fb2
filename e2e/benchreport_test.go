package e2e

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
)

// tableCell returns the cell of the first Markdown table under heading
// that has a column named column, in the row whose first cell is row, or
// "" without one.
func tableCell(md, heading, column, row string) string {
	_, section, ok := strings.Cut(md, heading+"\n")
	if !ok {
		return ""
	}
	lines := strings.Split(section, "\n")
	col := -1
	for i, line := range lines {
		if strings.HasPrefix(line, "#") {
			return "" // the next section
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|---") {
			// A table's header: look for the column in this table.
			col = -1
			for j, c := range cells {
				if c == column {
					col = j
				}
			}
			continue
		}
		if col >= 0 && cells[0] == row && col < len(cells) {
			return cells[col]
		}
	}
	return ""
}

// TestReportShowsContextSwitchesPerRequestByProcess writes the report of
// runs made up here, without running anything: the closed-loop section has
// a context-switch table beside the CPU one, with a row per run and sweep
// step and a column per process, and "The limit" gives each row's server
// context switches per request, the suite's summed over its processes.
func TestReportShowsContextSwitchesPerRequestByProcess(t *testing.T) {
	run := func(name string, completed uint64, switches map[string]uint64) *loadgen.Result {
		cpu := map[string]time.Duration{}
		for p := range switches {
			cpu[p] = time.Duration(completed) * 10 * time.Microsecond
		}
		return &loadgen.Result{Name: name, Transport: loadgen.TransportTCP, Completed: completed, Elapsed: time.Second,
			Throughput: float64(completed), CPU: cpu, CtxSwitches: switches}
	}
	rep := &BenchReport{
		Runs: map[string]*loadgen.Result{
			ScenarioLatency: run(ScenarioLatency, 1000, map[string]uint64{"frontdoor": 23000, "policysvc": 11000, "auditsvc": 17000, "loadgen": 9000}),
			ScenarioThroughput: run(ScenarioThroughput, 20000, map[string]uint64{"frontdoor": 26000, "policysvc": 14000, "auditsvc": 24000,
				"redis": 2000, "loadgen": 40000}),
		},
		Order: []string{ScenarioLatency, ScenarioThroughput},
		Limit: []*loadgen.Result{
			run("limit before", 40000, map[string]uint64{"limit": 20000, "loadgen": 50000}),
			run("limit after", 40000, map[string]uint64{"limit": 36000, "loadgen": 50000}),
		},
		Sweep: []*loadgen.Result{run("sweep 50%", 500, map[string]uint64{"frontdoor": 5000})},
	}
	var b bytes.Buffer
	rep.WriteMarkdown(&b, "test", "")
	md := b.String()

	const switches = "### Context switches per request by process"
	if cpu, cs := strings.Index(md, "### CPU time per request by process"), strings.Index(md, switches); cpu < 0 || cs < cpu {
		t.Fatalf("the context-switch table is not after the CPU table:\n%s", md)
	}
	for _, tc := range []struct {
		heading, column, row, want string
	}{
		{switches, "frontdoor", ScenarioLatency, "23.0"},
		{switches, "policysvc", ScenarioLatency, "11.0"},
		{switches, "auditsvc", ScenarioLatency, "17.0"},
		{switches, "catalogsvc", ScenarioLatency, "0.0"},
		{switches, "loadgen", ScenarioLatency, "9.0"},
		{switches, "total", ScenarioLatency, "60.0"},
		{switches, "frontdoor", ScenarioThroughput, "1.3"},
		{switches, "policysvc", ScenarioThroughput, "0.7"},
		{switches, "auditsvc", ScenarioThroughput, "1.2"},
		{switches, "redis", ScenarioThroughput, "0.1"},
		{switches, "total", ScenarioThroughput, "5.3"},
		{switches, "frontdoor", "sweep 50%", "10.0"},
		// The generator's switches are not the server's.
		{"## The limit", "server context switches/req", "limit before", "0.5"},
		{"## The limit", "server context switches/req", ScenarioThroughput, "3.3"},
		{"## The limit", "server context switches/req", "limit after", "0.9"},
		{"## The limit", "server CPU µs/req", ScenarioThroughput, "40"},
	} {
		if got := tableCell(md, tc.heading, tc.column, tc.row); got != tc.want {
			t.Errorf("%s, %s of %s: got %q, want %q", tc.heading, tc.column, tc.row, got, tc.want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", md)
	}
}

// The report's header names the GOMAXPROCS the services ran with: the
// deployed sizing, or the command's own when -env set one.
func TestReportNamesTheServicesProcessors(t *testing.T) {
	for _, tc := range []struct {
		name, want, notWant string
		env                 []string
	}{
		{"deployed sizing", "(frontdoor 1, catalogsvc 1, policysvc 1, rcnssvc 1, identitysvc 1, auditsvc 1)", "-env", nil},
		{"the command's", "GOMAXPROCS of the command's -env", "Kubernetes", []string{"GOGC=200", "GOMAXPROCS=4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &BenchReport{Options: BenchOptions{Env: tc.env}}
			var b bytes.Buffer
			rep.WriteMarkdown(&b, "test", "")
			if md := b.String(); !strings.Contains(md, tc.want) || strings.Contains(md, tc.notWant) {
				t.Errorf("header does not say %q (or says %q):\n%s", tc.want, tc.notWant, md)
			}
		})
	}
}

// The report's header says how durable the suite's redis-server made a
// write, from what the server reported: the harness runs it without
// persistence, and a command can add the production overlay's AOF.
func TestReportNamesTheRedisPersistence(t *testing.T) {
	for _, tc := range []struct {
		name, want, notWant string
		redis               RedisSettings
		args                []string
	}{
		{"harness default", "redis-server (7.0.15, persistence off: no AOF, no snapshots)", "AOF on",
			RedisSettings{Version: "7.0.15", AppendOnly: "no", AppendFsync: "everysec"}, nil},
		{"the production overlay's", "redis-server (7.0.15, AOF on, appendfsync always; -redis-arg --appendonly yes --appendfsync always)", "persistence off",
			RedisSettings{Version: "7.0.15", AppendOnly: "yes", AppendFsync: "always"}, []string{"--appendonly", "yes", "--appendfsync", "always"}},
		{"snapshots only", "redis-server (7.0.15, no AOF, snapshots (save 3600 1); -redis-arg --save 3600 1)", "persistence off",
			RedisSettings{Version: "7.0.15", AppendOnly: "no", AppendFsync: "everysec", Save: "3600 1"}, []string{"--save", "3600 1"}},
		{"not asked", "redis-server (persistence not reported)", "AOF", RedisSettings{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &BenchReport{Options: BenchOptions{RedisArgs: tc.args}, Redis: tc.redis}
			var b bytes.Buffer
			rep.WriteMarkdown(&b, "test", "")
			if md := b.String(); !strings.Contains(md, tc.want) || strings.Contains(md, tc.notWant) {
				t.Errorf("header does not say %q (or says %q):\n%s", tc.want, tc.notWant, md)
			}
		})
	}
}

// TestAbuseReportShowsTheAbusersOwnCPU writes the abuse section of pairs
// made up here: an abuser run as a process has the cores it used while the
// clients were measured, and one that ran inside the measuring process has
// none to show.
func TestAbuseReportShowsTheAbusersOwnCPU(t *testing.T) {
	client := func(p99 time.Duration) map[string]*loadgen.Result {
		out := map[string]*loadgen.Result{}
		for _, c := range abuseClients {
			h := new(loadgen.Histogram)
			for range 100 {
				h.Record(p99)
			}
			out[c] = &loadgen.Result{Name: c, Completed: 100, Latency: loadgen.Summary{P50: p99 / 4, P99: p99}, Histogram: h}
		}
		return out
	}
	rep := &AbuseReport{Rate: 400, Duration: 5 * time.Second, Pairs: []*AbusePair{
		{Kind: loadgen.AbuseQUICFlood, Abuse: &loadgen.AbuseResult{Kind: loadgen.AbuseQUICFlood, Rate: 150, Attempts: 2100, IdlePriority: true},
			Before: client(8 * time.Millisecond), With: client(15 * time.Millisecond), After: client(8 * time.Millisecond), AbuserCores: 0.234, AbuserMeasured: true},
		{Kind: loadgen.AbuseGarbage, Abuse: &loadgen.AbuseResult{Kind: loadgen.AbuseGarbage, Rate: 50, Attempts: 300},
			Before: client(8 * time.Millisecond), With: client(9 * time.Millisecond), After: client(10 * time.Millisecond)},
	}}
	var b bytes.Buffer
	rep.write(&b)
	md := b.String()
	for _, tc := range []struct{ kind, want string }{
		{loadgen.AbuseQUICFlood, "0.23"},
		{loadgen.AbuseGarbage, "-"},
	} {
		if got := tableCell(md, "## Abuse", "abuser CPU", tc.kind); got != tc.want {
			t.Errorf("%s: abuser CPU %q, want %q\n%s", tc.kind, got, tc.want, md)
		}
	}
	for _, tc := range []struct{ kind, want string }{
		{loadgen.AbuseQUICFlood, "idle"},
		{loadgen.AbuseGarbage, "-"},
	} {
		if got := tableCell(md, "## Abuse", "abuser priority", tc.kind); got != tc.want {
			t.Errorf("%s: abuser priority %q, want %q", tc.kind, got, tc.want)
		}
	}
	if got := tableCell(md, "## Abuse", "×", loadgen.AbuseQUICFlood); got != "1.88" {
		t.Errorf("quic-flood tcp ratio %q, want 1.88 (15 ms over 8 ms)", got)
	}
	if got := tableCell(md, "## Abuse", "without moved ×", loadgen.AbuseGarbage); got != "1.25" {
		t.Errorf("garbage: without moved %q, want 1.25 (10 ms after, 8 ms before)", got)
	}
	if !strings.Contains(md, "moved by up to ×1.25") {
		t.Errorf("the report does not give the run's largest move without abuse:\n%s", md)
	}
}

// TestAbuseRatioPoolsTheWindowsWithoutAbuse: a kind is compared with the
// p99 of both windows without abuse around it taken together, so that one
// window's outlier, high or low, does not decide the ratio alone; Drift
// is how far those two windows' own p99s are apart.
func TestAbuseRatioPoolsTheWindowsWithoutAbuse(t *testing.T) {
	const ms = time.Millisecond
	window := func(values ...time.Duration) map[string]*loadgen.Result {
		h := new(loadgen.Histogram)
		for _, v := range values {
			h.Record(v)
		}
		return map[string]*loadgen.Result{ClientTCP: {Completed: h.Count(), Latency: h.Summarize(), Histogram: h}}
	}
	repeat := func(v time.Duration, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	for _, tc := range []struct {
		name                string
		before, with, after map[string]*loadgen.Result
		baseline            time.Duration
		ratio, drift        float64
	}{
		{"the window after slower than the one before", window(repeat(2*ms, 100)...), window(repeat(6*ms, 100)...), window(repeat(4*ms, 100)...), 4 * ms, 1.5, 2},
		{"two slow responses in the 200 of both windows are within their p99",
			window(repeat(1*ms, 100)...), window(repeat(3*ms, 100)...), window(append(repeat(1*ms, 98), 9*ms, 9*ms)...), 1 * ms, 3, 9},
		{"only the window before", window(repeat(5*ms, 100)...), window(repeat(10*ms, 100)...), nil, 5 * ms, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &AbusePair{Before: tc.before, With: tc.with, After: tc.after}
			if got := p.Baseline(ClientTCP); !near(float64(got), float64(tc.baseline)) {
				t.Errorf("baseline %v, want %v", got, tc.baseline)
			}
			if got := p.Ratio(ClientTCP); !near(got, tc.ratio) {
				t.Errorf("ratio %.3f, want %.3f", got, tc.ratio)
			}
			if got := p.Drift(ClientTCP); !near(got, tc.drift) {
				t.Errorf("drift %.3f, want %.3f", got, tc.drift)
			}
		})
	}
}

// near is within the histogram's resolution (under 1 %).
func near(got, want float64) bool { return math.Abs(got-want) <= 0.01*math.Abs(want) }

// TestCommandLineKeepsTheMachineOutOfTheReport: an absolute path under the
// working directory is shown relative to it, in either flag form; other
// arguments, and paths elsewhere, are shown as given.
func TestCommandLineKeepsTheMachineOutOfTheReport(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-out", "/src/agtp/docs/bench"}, "agtpbench -out docs/bench"},
		{[]string{"-out=/src/agtp/docs/bench", "-only", "throughput"}, "agtpbench -out=docs/bench -only throughput"},
		{[]string{"-profile", "/var/prof", "-out", ""}, "agtpbench -profile /var/prof -out "},
		{[]string{"-out", "/src/agtp-other/x"}, "agtpbench -out /src/agtp-other/x"},
		{[]string{"-env", "GOGC=400"}, "agtpbench -env GOGC=400"},
	} {
		if got := CommandLine(tc.args, "/src/agtp"); got != tc.want {
			t.Errorf("CommandLine(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// The verdict on what proof costs pools the alternating rounds: a machine
// that speeds up or slows down through them moves both sides alike, and a
// cost counts in proportion to the rounds it shows in.
func TestProofVerdictPoolsTheAlternatingRounds(t *testing.T) {
	run := func(name string, rate float64) *loadgen.Result {
		return &loadgen.Result{Name: name, Throughput: rate, Completed: uint64(2 * rate), Elapsed: 2 * time.Second}
	}
	for _, tc := range []struct {
		name          string
		certs, claims []float64 // req/s of each round's runs
		wantRatio     float64
		wantLow       float64
		wantHigh      float64
		wantMet       bool
	}{
		{"the machine slows down through the rounds, proof costs nothing", []float64{8000, 6000, 5000, 4000}, []float64{8000, 6000, 5000, 4000}, 1, 1, 1, true},
		{"a slow round on the certificates' side still counts", []float64{4000, 6000, 6000, 6000}, []float64{6000, 6000, 6000, 6000}, 22000.0 / 24000, 4000.0 / 6000, 1, false},
		{"proof costs 3 % in every round", []float64{5820, 4850, 6790}, []float64{6000, 5000, 7000}, 0.97, 0.97, 0.97, true},
		{"proof costs 8 % in every round", []float64{5520, 4600}, []float64{6000, 5000}, 0.92, 0.92, 0.92, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &BenchReport{Runs: map[string]*loadgen.Result{}}
			for i := range tc.certs {
				rep.Proof = append(rep.Proof, ProofRound{Certs: run("certificates", tc.certs[i]), Claims: run("bare headers", tc.claims[i])})
			}
			ratio, low, high := rep.ProofRatio()
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if !near(ratio, tc.wantRatio) || !near(low, tc.wantLow) || !near(high, tc.wantHigh) {
				t.Errorf("ProofRatio = %.4f (%.4f to %.4f), want %.4f (%.4f to %.4f)", ratio, low, high, tc.wantRatio, tc.wantLow, tc.wantHigh)
			}
			var proof *Verdict
			for _, v := range rep.Verdicts() {
				if strings.Contains(v.Target, "Agent Certificates") {
					proof = &v
				}
			}
			if proof == nil || proof.Met != tc.wantMet {
				t.Fatalf("proof verdict = %+v, want met %v", proof, tc.wantMet)
			}
		})
	}
}
