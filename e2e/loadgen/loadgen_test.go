package loadgen

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestHistogramQuantilesAreWithinOnePercent(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100_000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 50 * time.Millisecond}, {0.9, 90 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {0.999, 99900 * time.Microsecond},
	} {
		got := h.Quantile(tc.q)
		if rel := math.Abs(float64(got-tc.want)) / float64(tc.want); rel > 0.01 {
			t.Errorf("q%.3f = %v, want %v within 1%% (off by %.2f%%)", tc.q, got, tc.want, 100*rel)
		}
	}
	if h.Min() != time.Microsecond || h.Max() != 100*time.Millisecond || h.Count() != 100_000 {
		t.Errorf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
	}
	if h.Quantile(1) != h.Max() {
		t.Errorf("q1 = %v, want the max %v", h.Quantile(1), h.Max())
	}
}

func TestHistogramBucketsCoverEveryValueOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		v := r.Uint64() >> r.IntN(64)
		v >>= 24 // stay below 2^40 ns, the last exact bucket
		i := bucketOf(v)
		if hi := bucketHigh(i); hi < v {
			t.Fatalf("value %d in bucket %d whose high is %d", v, i, hi)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Fatalf("value %d also fits bucket %d (high %d)", v, i-1, bucketHigh(i-1))
		}
		if v >= 1<<histBits {
			if rel := float64(bucketHigh(i)-v) / float64(v); rel > 1.0/histHalf {
				t.Fatalf("value %d reported as %d: %.3f%% error", v, bucketHigh(i), 100*rel)
			}
		}
	}
	if bucketOf(math.MaxUint64) != histBuckets-1 {
		t.Fatal("huge values do not land in the last bucket")
	}
}

func TestHistogramMergeKeepsCountsAndExtremes(t *testing.T) {
	var a, b Histogram
	a.Record(3 * time.Millisecond)
	b.Record(time.Millisecond)
	b.Record(9 * time.Millisecond)
	a.Merge(&b)
	if a.Count() != 3 || a.Min() != time.Millisecond || a.Max() != 9*time.Millisecond {
		t.Fatalf("merged: count %d min %v max %v", a.Count(), a.Min(), a.Max())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Min() != 0 {
		t.Fatal("an empty histogram reports values")
	}
}

func TestParseMixRejectsUnknownOpsAndZeroTotals(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"get-order=3,discover=1", true},
		{DefaultMix.String(), true},
		{"get-order=0", false},
		{"frobnicate=1", false},
		{"get-order", false},
		{"get-order=-1", false},
	} {
		_, err := ParseMix(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseMix(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestPickerFollowsWeights(t *testing.T) {
	p := newPicker(Mix{{OpGetOrder, 3}, {OpDiscover, 1}, {OpInspect, 0}})
	r := rand.New(rand.NewPCG(3, 4))
	counts := map[string]int{}
	for range 40_000 {
		counts[Ops[p.pick(r)]]++
	}
	if counts[OpInspect] != 0 {
		t.Fatalf("a zero-weight op was picked %d times", counts[OpInspect])
	}
	if share := float64(counts[OpGetOrder]) / 40_000; math.Abs(share-0.75) > 0.02 {
		t.Fatalf("get-order share %.3f, want 0.75", share)
	}
}

func TestReplaysRepeatKeyBodyAndAgentOfASuccessfulCreate(t *testing.T) {
	ag := agents(3)
	b := &builder{agents: ag, static: staticRequests(ag), pinned: -1}
	r := rand.New(rand.NewPCG(5, 6))
	replayOp := indexOf(OpReplay)
	req, agent, op := b.build(replayOp, r)
	if Ops[op] != OpCreate {
		t.Fatalf("a replay with nothing to replay is %s, want a fresh create", Ops[op])
	}
	b.done(op, req, agent, 200)
	again, agent2, op2 := b.build(replayOp, r)
	if Ops[op2] != OpReplay || again != req || agent2 != agent {
		t.Fatalf("replay = %v agent %d, want the same request and agent %d", Ops[op2], agent2, agent)
	}
	other, _, _ := b.build(indexOf(OpCreate), r)
	if other.Header.Get("Idempotency-Key") == req.Header.Get("Idempotency-Key") {
		t.Fatal("two creates share an Idempotency-Key")
	}
	failed, a3, op3 := b.build(indexOf(OpCreate), r)
	b.done(op3, failed, a3, 500)
	if len(b.replays) != 1 {
		t.Fatalf("a failed create was remembered for replay (%d remembered)", len(b.replays))
	}
}

func indexOf(op string) int {
	for i, o := range Ops {
		if o == op {
			return i
		}
	}
	panic(op)
}

func TestClosedLoopCountsEveryResponseByOpAndStatus(t *testing.T) {
	f := startFake(t)
	r := mustRun(t, Config{
		Target: f.target(), Transport: TransportTCP, Concurrency: 4, Duration: 400 * time.Millisecond,
		Warmup: 100 * time.Millisecond, Agents: agents(2), Procs: map[string]int{"self": os.Getpid()},
	})
	if r.Completed == 0 || r.Failed != 0 {
		t.Fatalf("completed %d failed %d (%v)", r.Completed, r.Failed, r.TransportErrors)
	}
	if got := f.requests.Load(); uint64(got) < r.Completed {
		t.Fatalf("server saw %d requests, generator recorded %d", got, r.Completed)
	}
	if f.accepted.Load() != 4 {
		t.Fatalf("%d connections for 4 workers, want 4 persistent ones", f.accepted.Load())
	}
	var sum uint64
	for _, op := range r.PerOp {
		sum += op.Completed
	}
	if sum != r.Completed || r.Statuses[200]+r.Statuses[463] != r.Completed {
		t.Fatalf("per-op %d, statuses %v, completed %d", sum, r.Statuses, r.Completed)
	}
	if r.PerOp[OpPropose].Statuses[463] == 0 || r.PerOp[OpPropose].Statuses[200] != 0 {
		t.Fatalf("PROPOSE statuses %v, want 463 only", r.PerOp[OpPropose].Statuses)
	}
	if f.mismatch.Load() != 0 || f.replays.Load() == 0 {
		t.Fatalf("replays %d, with another body %d", f.replays.Load(), f.mismatch.Load())
	}
	if r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Throughput <= 0 {
		t.Fatalf("latency %+v throughput %v", r.Latency, r.Throughput)
	}
	if _, ok := r.CPU["self"]; !ok {
		t.Fatalf("no CPU time for the measured process: %v", r.CPU)
	}
	// Four workers and the fake server hand every request between
	// goroutines over loopback: some thread of the process sleeps and
	// wakes in the window.
	if r.CtxSwitches["self"] == 0 || r.CtxSwitches["loadgen"] == 0 {
		t.Fatalf("no context switches for the measured process: %v", r.CtxSwitches)
	}
}

func TestMaxRequestsEndsTheRunEarly(t *testing.T) {
	f := startFake(t)
	start := time.Now()
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCP, Concurrency: 2, Duration: 20 * time.Second, MaxRequests: 300, Mix: Mix{{OpDiscover, 1}}})
	if r.Completed != 300 {
		t.Fatalf("completed %d, want exactly 300", r.Completed)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("MaxRequests did not end the run")
	}
}

func TestNewConnectionModeDialsPerRequest(t *testing.T) {
	f := startFake(t)
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCPNew, Concurrency: 2, Duration: 300 * time.Millisecond, Mix: Mix{{OpDiscover, 1}}})
	if r.Completed == 0 || r.Failed != 0 {
		t.Fatalf("completed %d failed %d %v", r.Completed, r.Failed, r.TransportErrors)
	}
	if got := f.accepted.Load(); got < int64(r.Completed) {
		t.Fatalf("%d connections for %d requests", got, r.Completed)
	}
}

func TestQUICSendsOneStreamPerRequest(t *testing.T) {
	f := startFake(t)
	r := mustRun(t, Config{Target: f.target(), Transport: TransportQUIC, Concurrency: 8, Duration: 300 * time.Millisecond, Agents: agents(1)})
	if r.Completed == 0 || r.Failed != 0 {
		t.Fatalf("completed %d failed %d %v", r.Completed, r.Failed, r.TransportErrors)
	}
	if f.accepted.Load() != 1 {
		t.Fatalf("%d QUIC connections for 8 workers, want 1", f.accepted.Load())
	}
	if got := f.streams.Load(); got < int64(r.Completed) {
		t.Fatalf("%d streams for %d requests", got, r.Completed)
	}
}

func TestOpenLoopOffersTheConfiguredRate(t *testing.T) {
	f := startFake(t)
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCP, Concurrency: 8, Rate: 500, Duration: time.Second, Mix: Mix{{OpDiscover, 1}}})
	if r.Completed < 450 || r.Completed > 550 {
		t.Fatalf("completed %d at 500/s for 1s", r.Completed)
	}
	if r.Unsent != 0 || math.Abs(r.Throughput-500) > 75 {
		t.Fatalf("throughput %.0f, unsent %d", r.Throughput, r.Unsent)
	}
}

// When the server is slower than the offered rate, latency must show the
// queueing (it counts from when each request was due), instead of the
// generator quietly slowing down.
func TestOpenLoopLatencyIncludesQueueingBehindASlowServer(t *testing.T) {
	f := startFake(t)
	f.delay = 20 * time.Millisecond // one worker: at most 50/s
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCP, Concurrency: 1, Rate: 100, Duration: time.Second, Mix: Mix{{OpDiscover, 1}}})
	if r.Latency.Max < 200*time.Millisecond {
		t.Fatalf("max latency %v at twice the server's capacity; queueing is hidden", r.Latency.Max)
	}
}

func TestABrokenConnectionIsCountedAndRedialled(t *testing.T) {
	f := startFake(t)
	f.closeNext.Store(true)
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCP, Concurrency: 1, Duration: 300 * time.Millisecond, Mix: Mix{{OpDiscover, 1}}})
	if r.Failed != 1 || r.TransportErrors[string(errClosed)] != 1 {
		t.Fatalf("failed %d %v, want one closed-by-server", r.Failed, r.TransportErrors)
	}
	if r.Completed < 10 || f.accepted.Load() != 2 {
		t.Fatalf("completed %d over %d connections: not redialled", r.Completed, f.accepted.Load())
	}
}

func TestPipelinedRequestsGetTheirOwnResponses(t *testing.T) {
	f := startFake(t)
	r := mustRun(t, Config{Target: f.target(), Transport: TransportTCP, Concurrency: 16, Connections: 2, Duration: 300 * time.Millisecond, Agents: agents(4)})
	if r.Failed != 0 || r.Completed == 0 || f.accepted.Load() != 2 {
		t.Fatalf("completed %d failed %d over %d connections", r.Completed, r.Failed, f.accepted.Load())
	}
	// PROPOSE is the only 463: a response delivered to the wrong sender
	// would show up as a 463 under another op or a 200 under PROPOSE.
	for op, o := range r.PerOp {
		if (op == OpPropose) != (o.Statuses[463] > 0) || (op == OpPropose && o.Statuses[200] > 0) {
			t.Fatalf("op %s got statuses %v", op, o.Statuses)
		}
	}
}

func TestValidateRejectsUnboundedRuns(t *testing.T) {
	good := Config{Target: Target{Addr: "127.0.0.1:1"}, Transport: TransportTCP, Duration: time.Second, Mix: Mix{{OpDiscover, 1}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no duration":       func(c *Config) { c.Duration = 0 },
		"too long":          func(c *Config) { c.Duration = MaxDuration + time.Second },
		"too many workers":  func(c *Config) { c.Concurrency = MaxConcurrency + 1 },
		"rate too high":     func(c *Config) { c.Rate = MaxRate * 2 },
		"unknown transport": func(c *Config) { c.Transport = "udp" },
		"agent ops, no agents": func(c *Config) {
			c.Mix = Mix{{OpGetOrder, 1}}
		},
	} {
		c := good
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMeasureIdleHoldsConnectionsAndSeesThemEstablished(t *testing.T) {
	f := startFake(t)
	res, err := MeasureIdle(context.Background(), IdleConfig{Target: f.target(), Conns: 50, Hold: 300 * time.Millisecond, PID: os.Getpid(), Probes: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Opened != 50 || res.Established < 50 {
		t.Fatalf("opened %d, established %d, errors %v", res.Opened, res.Established, res.Errors)
	}
	if res.RSSHeld <= 0 || res.RSSBefore <= 0 || res.Probe.Count != 5 || res.FDLimit == 0 {
		t.Fatalf("%+v", res)
	}
}

func TestProcReadersSeeThisProcess(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A shared machine may give this process little of the wall clock, so
	// spin until the reader reports 50 ms of CPU (or give up after 10 s of
	// wall time): a reader that never moves fails, a slow machine does not.
	start := time.Now()
	var after time.Duration
	for time.Since(start) < 10*time.Second {
		for spin := time.Now(); time.Since(spin) < 20*time.Millisecond; {
		}
		if after, err = CPUTime(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if after-before >= 50*time.Millisecond {
			break
		}
	}
	wall := time.Since(start)
	if grew := after - before; grew < 50*time.Millisecond || grew > wall*time.Duration(runtime.NumCPU())+time.Second {
		t.Fatalf("CPU time grew by %v over %v of spinning", grew, wall)
	}
	if rss, err := RSS(os.Getpid()); err != nil || rss < 1<<20 {
		t.Fatalf("RSS %d, %v", rss, err)
	}
	if m := DescribeMachine(); m.CPUs <= 0 || m.MemTotal <= 0 || m.GoVersion == "" {
		t.Fatalf("%+v", m)
	}
	a, _ := MachineCPU()
	time.Sleep(50 * time.Millisecond)
	b, _ := MachineCPU()
	if u := Utilisation(a, b); u < 0 || u > 1 {
		t.Fatalf("utilisation %v", u)
	}
}

func TestPlotSVGIsWellFormedWithAPathPerPercentile(t *testing.T) {
	var pts []SweepPoint
	for i, rate := range []float64{500, 1000, 2000, 4000} {
		d := time.Duration(i+1) * time.Millisecond
		pts = append(pts, SweepPoint{Offered: rate, Achieved: rate * 0.99, Latency: Summary{P50: d / 2, P90: d, P99: 2 * d, P999: 5 * d}})
	}
	svg := PlotSVG("latency <&> load", "test", pts)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
	}
	if n := strings.Count(string(svg), "<path "); n != len(plotSeries) {
		t.Fatalf("%d paths, want %d", n, len(plotSeries))
	}
	if !bytes.Contains(PlotSVG("t", "s", nil), []byte("no data")) {
		t.Fatal("an empty sweep does not say so")
	}
}
