package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
)

// TestBenchRunsEveryScenarioAgainstTheProcesses runs the load benchmark
// with tiny durations, so that `make bench` cannot rot unnoticed: every
// scenario gets responses, with no transport errors, and the report
// holds every section. Its redis-server runs the production overlay's
// durability (-redis-arg), which the report must say it ran with.
func TestBenchRunsEveryScenarioAgainstTheProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Bench(ctx, BenchOptions{
		Warmup: 100 * time.Millisecond, Duration: 400 * time.Millisecond, SweepDuration: 300 * time.Millisecond,
		SweepFractions: []float64{0.5}, ProofRounds: 2, Concurrency: 4, NewConnConcurrency: 2, Agents: 2, IdleConns: 200,
		AbuseRate: 100, AbuseDuration: 300 * time.Millisecond, AbuseKinds: []string{loadgen.AbuseSlowloris, loadgen.AbuseQUICHandshakeFlood}, AbuseRamp: -1,
		RedisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"},
		Progress:  &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if r := rep.Redis; r.Version == "" || r.AppendOnly != "yes" || r.AppendFsync != "always" {
		t.Errorf("the suite's redis-server reported %+v, want a version and appendonly yes, appendfsync always", r)
	}
	want := []string{ScenarioLatency, ScenarioLatencyMix, ScenarioThroughput, ScenarioThroughputClaims, ScenarioThroughputMix, ScenarioNewConn,
		ScenarioNewConnResumed, ScenarioQUICLatency, ScenarioQUICThroughput, "tuned " + ScenarioLatency, "tuned " + ScenarioThroughput}
	for _, name := range want {
		r := rep.Runs[name]
		if r == nil {
			t.Errorf("no %s run", name)
			continue
		}
		if r.Completed == 0 || r.Failed != 0 {
			t.Errorf("%s: %d responses, %d without (%v)", name, r.Completed, r.Failed, r.ErrorExamples)
		}
		if !strings.Contains(name, "mix") && r.Statuses[200] != r.Completed {
			t.Errorf("%s: statuses %v, want only 200 for QUERY /orders/{order_id}", name, r.Statuses)
		}
		if r.CPU["frontdoor"] <= 0 && r.Completed > 100 {
			t.Errorf("%s: no front-door CPU time measured: %v", name, r.CPU)
		}
		// Every request crosses from the front door's reader to
		// policysvc and auditsvc and back, so its threads sleep and wake.
		if r.CtxSwitches["frontdoor"] == 0 && r.Completed > 0 {
			t.Errorf("%s: no front-door context switches measured: %v", name, r.CtxSwitches)
		}
		// A thread that switched was woken again, and waited for a core
		// however briefly.
		if r.RunqueueWait["frontdoor"] == 0 && r.CtxSwitches["frontdoor"] > 100 {
			t.Errorf("%s: no front-door wait for a CPU measured: %v", name, r.RunqueueWait)
		}
	}
	if mix := rep.Runs[ScenarioThroughputMix]; mix != nil {
		if mix.PerOp[loadgen.OpReplay].Completed+mix.PerOp[loadgen.OpCreate].Completed == 0 {
			t.Errorf("the mix sent no CREATE: %v", mix.PerOp)
		}
	}
	if len(rep.Limit) != 2 || rep.LimitRatio() <= 0 {
		t.Errorf("limit runs %d, ratio %.2f: want two runs around throughput", len(rep.Limit), rep.LimitRatio())
	}
	for _, l := range rep.Limit {
		if l.Completed == 0 || l.Failed != 0 || l.Statuses[200] != l.Completed || l.CPU["limit"] <= 0 || l.CtxSwitches["limit"] == 0 {
			t.Errorf("%s: %d responses, %d without, statuses %v, CPU %v, context switches %v", l.Name, l.Completed, l.Failed, l.Statuses, l.CPU, l.CtxSwitches)
		}
	}
	if len(rep.Proof) != 2 {
		t.Errorf("%d proof rounds, want 2", len(rep.Proof))
	}
	for i, p := range rep.Proof {
		for side, r := range map[string]*loadgen.Result{"certificates": p.Certs, "bare headers": p.Claims} {
			if r == nil || !strings.Contains(r.Name, side) || r.Completed == 0 || r.Failed != 0 || r.Statuses[200] != r.Completed {
				t.Errorf("proof round %d, %s: %+v", i+1, side, r)
			}
		}
	}
	// Each side goes first in every other round, so that a drift through
	// the rounds falls on both.
	log := progress.String()
	order := []string{"proof 1, certificates", "proof 1, bare headers", "proof 2, bare headers", "proof 2, certificates"}
	for i := 1; i < len(order); i++ {
		if a, b := strings.Index(log, order[i-1]+":"), strings.Index(log, order[i]+":"); a < 0 || b < a {
			t.Errorf("%q is not run before %q:\n%s", order[i-1], order[i], log)
		}
	}
	if len(rep.Floors) != 7 {
		t.Errorf("%d floors, want 7", len(rep.Floors))
	}
	for _, f := range rep.Floors {
		if f.Latency.P50 <= 0 {
			t.Errorf("floor %q was not measured", f.Name)
		}
	}
	if len(rep.Sweep) != 1 || rep.Sweep[0].Rate <= 0 || rep.Sweep[0].Completed == 0 {
		t.Errorf("sweep = %+v", rep.Sweep)
	}
	if rep.Idle == nil || rep.Idle.Opened != 200 || rep.Idle.Established < 200 || rep.Idle.RSSHeld <= 0 {
		t.Errorf("idle = %+v", rep.Idle)
	}
	if a := rep.Abuse; a == nil || len(a.Pairs) != 2 {
		t.Errorf("abuse = %+v, want two kinds", a)
	} else {
		for _, p := range a.Pairs {
			for _, c := range []string{ClientTCP, ClientTCPNew, ClientQUIC} {
				for _, r := range []*loadgen.Result{p.Before[c], p.With[c], p.After[c]} {
					if r == nil || r.Completed == 0 || r.Statuses[200] != r.Completed || r.Histogram == nil || r.Histogram.Count() != r.Completed {
						t.Errorf("abuse %s, %s client: %+v", p.Kind, c, r)
					}
				}
			}
			if p.Abuse == nil || p.Abuse.Attempts == 0 {
				t.Errorf("the %s abuser made no attempt: %+v", p.Kind, p.Abuse)
			}
		}
		if a.Pairs[1].Before[ClientTCP] != a.Pairs[0].After[ClientTCP] {
			t.Error("the second kind's window before is not the first kind's window after")
		}
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md, "test", "plot.svg")
	for _, section := range []string{"## Targets", "## Round trips without work", "## The limit", "## Proof of the caller, side by side", "## Closed-loop runs", "## Latency against offered load", "## Idle connections", "## Abuse", "tuned throughput",
		"### Context switches per request by process", "server context switches/req", "AOF on, appendfsync always"} {
		if !strings.Contains(md.String(), section) {
			t.Errorf("report lacks %q", section)
		}
	}
	if !bytes.Contains(rep.SVG(), []byte("<path ")) {
		t.Error("the plot has no lines")
	}
}

func TestStartClusterReportsAFailedStartAndLeavesNothingRunning(t *testing.T) {
	c, stop, err := StartCluster(Options{Services: []string{"no-such-service"}})
	if err == nil {
		stop()
		t.Fatalf("a cluster of a service without a binary started: %+v", c)
	}
	if c != nil || stop != nil {
		t.Fatal("a failed start returned a cluster")
	}
}
