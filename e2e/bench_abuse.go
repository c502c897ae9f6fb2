package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agtpsuite/agtp/e2e/loadgen"
)

// AbuseLimit is the abuse bound: with abuse running, other clients' p99
// latency stays within this factor of its value without it.
const AbuseLimit = 2.0

// Well-behaved clients of the abuse scenario, in report order.
const (
	ClientTCP     = "tcp"     // persistent TLS connections, at the scenario's rate
	ClientTCPNew  = "tcp-new" // a new TLS connection per request, a tenth of the rate
	ClientQUIC    = "quic"    // QUIC streams, a tenth of the rate
	defaultSettle = 3 * time.Second
)

// AbuseReport is the abuse scenario: for each kind of abuse, the
// well-behaved clients at a fixed offered load with the abuse running
// alongside, against the same clients without abuse just before and just
// after it. The two windows without abuse bracket the one with it, so
// drift in what else the shared machine runs is not counted against the
// abuse, and their spread shows how far the measurement moves by itself.
type AbuseReport struct {
	// Rate is the persistent-connection client's offered load; see
	// wellBehaved for the others.
	Rate     float64
	Duration time.Duration
	Pairs    []*AbusePair
}

// AbusePair is one kind of abuse: what the abuser did, and what the
// well-behaved clients saw before, with and after it. After is the next
// kind's Before: the windows without abuse are shared between
// neighbours.
type AbusePair struct {
	Kind                string
	Abuse               *loadgen.AbuseResult
	Before, With, After map[string]*loadgen.Result
	// AbuserCores is the CPU the abuser process used while the clients
	// ran with it (their warm-up and measured window), in cores;
	// AbuserMeasured is false when the abuser ran inside the measuring
	// process. On a machine the abuser shares with the suite, its CPU is
	// taken from the suite as surely as the server's own work is, and it
	// would not be in a real attack from elsewhere.
	AbuserCores    float64
	AbuserMeasured bool
}

// Baseline is a client's p99 without the abuse: over the responses of
// both windows that bracket it, pooled, which doubles the samples a p99
// rests on (at the minor clients' rates one window holds a few hundred).
// With only one window measured it is that window's p99; 0 with none.
func (p *AbusePair) Baseline(client string) time.Duration {
	var pooled loadgen.Histogram
	var single time.Duration
	n := 0
	for _, r := range []*loadgen.Result{p.Before[client], p.After[client]} {
		if r == nil {
			continue
		}
		n++
		single = r.Latency.P99
		if r.Histogram == nil {
			return single
		}
		pooled.Merge(r.Histogram)
	}
	if n < 2 {
		return single
	}
	return pooled.Quantile(0.99)
}

// Ratio is a client's p99 with the abuse against its Baseline; 0 when
// either was not measured.
func (p *AbusePair) Ratio(client string) float64 {
	base, cur := p.Baseline(client), p.With[client]
	if base <= 0 || cur == nil {
		return 0
	}
	return float64(cur.Latency.P99) / float64(base)
}

// Drift is how far a client's p99 moved between the two windows without
// abuse, as the larger over the smaller (1 when it did not move; 0 when
// either was not measured): the ratio that noise alone produced around
// this kind.
func (p *AbusePair) Drift(client string) float64 {
	a, b := p.Before[client], p.After[client]
	if a == nil || b == nil || a.Latency.P99 <= 0 || b.Latency.P99 <= 0 {
		return 0
	}
	x := float64(b.Latency.P99) / float64(a.Latency.P99)
	return max(x, 1/x)
}

// Worst is the largest ratio over every kind and client, and where.
func (r *AbuseReport) Worst() (ratio float64, kind, client string) {
	for _, p := range r.Pairs {
		for _, c := range abuseClients {
			if x := p.Ratio(c); x > ratio {
				ratio, kind, client = x, p.Kind, c
			}
		}
	}
	return ratio, kind, client
}

// MaxDrift is the largest Drift over every kind and client.
func (r *AbuseReport) MaxDrift() float64 {
	var d float64
	for _, p := range r.Pairs {
		for _, c := range abuseClients {
			d = max(d, p.Drift(c))
		}
	}
	return d
}

var abuseClients = []string{ClientTCP, ClientTCPNew, ClientQUIC}

// minorRates are the new-connection and QUIC clients' offered loads.
func minorRates(rate float64) (tcpNew, quic float64) { return max(5, rate/10), max(5, rate/5) }

// wellBehaved are the clients measured in every phase.
func wellBehaved(rate float64) map[string]loadgen.Config {
	tcpNew, quic := minorRates(rate)
	return map[string]loadgen.Config{
		ClientTCP:    {Transport: loadgen.TransportTCP, Concurrency: 16, Rate: rate, Mix: loadgen.PipelineMix},
		ClientTCPNew: {Transport: loadgen.TransportTCPNew, Concurrency: 4, Rate: tcpNew, Mix: loadgen.PipelineMix},
		ClientQUIC:   {Transport: loadgen.TransportQUIC, Concurrency: 4, Rate: quic, Mix: loadgen.PipelineMix},
	}
}

// abuse runs the abuse scenario on the suite: a window without abuse,
// then for each kind a window with it and one without after it, which is
// also the next kind's window before.
func (s *benchSuite) abuse(ctx context.Context) (*AbuseReport, error) {
	rep := &AbuseReport{Rate: s.o.AbuseRate, Duration: s.o.AbuseDuration}
	// Unrecorded: the first seconds after start-up or after the previous
	// scenario are not what "without abuse" means.
	if _, err := s.clients(ctx, "abuse warm-up"); err != nil {
		return rep, err
	}
	before, err := s.clients(ctx, "abuse without")
	if err != nil {
		return rep, err
	}
	for _, kind := range s.o.AbuseKinds {
		p, err := s.abusePair(ctx, kind, before)
		if err != nil {
			return rep, fmt.Errorf("abuse %s: %w", kind, err)
		}
		rep.Pairs = append(rep.Pairs, p)
		before = p.After
		s.progress("abuse %s: p99 ×%.2f (tcp), ×%.2f (tcp-new), ×%.2f (quic) of without; without moved ×%.2f, ×%.2f, ×%.2f", kind,
			p.Ratio(ClientTCP), p.Ratio(ClientTCPNew), p.Ratio(ClientQUIC), p.Drift(ClientTCP), p.Drift(ClientTCPNew), p.Drift(ClientQUIC))
	}
	return rep, nil
}

// clients runs the well-behaved clients at once and returns their results.
func (s *benchSuite) clients(ctx context.Context, name string) (map[string]*loadgen.Result, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		out  = map[string]*loadgen.Result{}
	)
	for client, cfg := range wellBehaved(s.o.AbuseRate) {
		cfg.Warmup, cfg.Duration = time.Second, s.o.AbuseDuration
		wg.Go(func() {
			r, err := s.run(ctx, name+" "+client, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[client] = r
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// abusePair measures the clients with the abuse of one kind, given the
// window without abuse before it, and then the window after it.
func (s *benchSuite) abusePair(ctx context.Context, kind string, before map[string]*loadgen.Result) (*AbusePair, error) {
	p := &AbusePair{Kind: kind, Before: before}
	var err error
	cfg := loadgen.AbuseConfig{Kind: kind, Target: s.target}
	var stop func() (*loadgen.AbuseResult, error)
	abuserPid := 0
	if len(s.o.AbuseCommand) > 0 {
		ap, err := loadgen.StartAbuseProcess(ctx, s.o.AbuseCommand, cfg, s.c.PKI.CA())
		if err != nil {
			return nil, err
		}
		stop, abuserPid = ap.Stop, ap.Pid()
	} else {
		ab, err := loadgen.StartAbuse(ctx, cfg)
		if err != nil {
			return nil, err
		}
		stop = func() (*loadgen.AbuseResult, error) { return ab.Stop(), nil }
	}
	d := loadgen.AbuseDefaults[kind]
	ramp := d.Ramp
	if s.o.AbuseRamp != 0 {
		ramp = max(s.o.AbuseRamp, 0)
	}
	s.progress("abuse %s: %.0f attempts/s from %d address(es), ramping up for %v", kind, d.Rate, d.Sources, ramp)
	sleep(ctx, ramp)
	measure := abuserCPU(abuserPid)
	with, cerr := s.clients(ctx, "abuse "+kind+" with")
	p.With = with
	p.AbuserCores, p.AbuserMeasured = measure()
	p.Abuse, err = stop()
	if err = errors.Join(cerr, err); err != nil {
		return nil, err
	}
	s.progress("abuse %s: %d attempts, at most %d held: %s", kind, p.Abuse.Attempts, p.Abuse.MaxHeld, p.Abuse.FormatOutcomes())
	// Let the server's side of what the abuser held close before the next
	// measurement. Half-open QUIC handshakes the client abandoned last
	// until the front door's handshake timeout (10 s by default).
	settle := defaultSettle
	if kind == loadgen.AbuseQUICHandshakeFlood {
		settle = 11 * time.Second
	}
	if s.o.AbuseRamp < 0 {
		settle = 0
	}
	sleep(ctx, settle)
	if p.After, err = s.clients(ctx, "abuse after "+kind); err != nil {
		return nil, err
	}
	return p, nil
}

// abuserCPU starts measuring the CPU of the abuser process pid (0: none);
// the function it returns gives the cores it used since, and whether it
// could tell.
func abuserCPU(pid int) func() (float64, bool) {
	if pid == 0 {
		return func() (float64, bool) { return 0, false }
	}
	start := time.Now()
	before, err := loadgen.CPUTime(pid)
	return func() (float64, bool) {
		after, err2 := loadgen.CPUTime(pid)
		elapsed := time.Since(start)
		if err != nil || err2 != nil || elapsed <= 0 {
			return 0, false
		}
		return float64(after-before) / float64(elapsed), true
	}
}

// windowP99 is one window's p99 for the report, "-" when it was not
// measured.
func windowP99(r *loadgen.Result) string {
	if r == nil {
		return "-"
	}
	return loadgen.Ms(r.Latency.P99)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// write writes the abuse section of the report.
func (r *AbuseReport) write(w io.Writer) {
	if len(r.Pairs) == 0 {
		return
	}
	tcpNew, quic := minorRates(r.Rate)
	fmt.Fprintf(w, "## Abuse\n\n")
	fmt.Fprintf(w, "Well-behaved clients from 127.0.0.1, open loop at a fixed offered load, `QUERY /orders/{order_id}` through the full pipeline: "+
		"`tcp` %.0f req/s over 16 persistent TLS connections, `tcp-new` %.0f req/s with a new TLS connection per request, "+
		"`quic` %.0f req/s on QUIC streams, each measured for %v after 1 s of warm-up. For each kind of abuse they are measured "+
		"with the abuser running alongside (started before the warm-up and, for the kinds that hold connections, a ramp-up; "+
		"stopped after the window), between a window without abuse before it and one after it (each kind's after is the next "+
		"kind's before). Each abuser is a separate process sending from its own loopback addresses "+
		"(127.0.0.2 on) at a bounded rate chosen to exceed the front door's limits while leaving the two shared cores to the "+
		"benchmark. **Without** is the p99 of the two windows without abuse pooled (each window's own in brackets); **×** is "+
		"p99 with the abuse over it; above %.0f× is flagged. **Without moved** is the larger over the smaller of the two "+
		"windows' p99, for the client where it moved most: what the machine did by itself around that kind.\n\n",
		r.Rate, tcpNew, quic, r.Duration, AbuseLimit)
	fmt.Fprintf(w, "| abuse | tcp p99 ms without (before, after) → with | × | tcp-new p99 ms | × | quic p99 ms | × | without moved × | tcp p50 ms with | 2xx with | no response | machine busy without → with | load avg | within %.0f× |\n", AbuseLimit)
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range r.Pairs {
		cells := []string{p.Kind}
		within := true
		var ok, completed, failed uint64
		var drift float64
		for _, c := range abuseClients {
			with := p.With[c]
			base := p.Baseline(c)
			if base <= 0 || with == nil {
				cells = append(cells, "", "")
				continue
			}
			ratio := p.Ratio(c)
			cells = append(cells, loadgen.Ms(base)+" ("+windowP99(p.Before[c])+", "+windowP99(p.After[c])+") → "+loadgen.Ms(with.Latency.P99),
				fmt.Sprintf("%.2f", ratio))
			within = within && ratio <= AbuseLimit
			drift = max(drift, p.Drift(c))
			completed += with.Completed
			failed += with.Failed + with.Unsent
			ok += uint64(with.SuccessRatio()*float64(with.Completed) + 0.5)
		}
		share := 0.0
		if completed > 0 {
			share = 100 * float64(ok) / float64(completed)
		}
		moved := "-"
		if drift > 0 {
			moved = fmt.Sprintf("%.2f", drift)
		}
		p50, busy, load := "", "", ""
		if a, b := p.Before[ClientTCP], p.With[ClientTCP]; a != nil && b != nil {
			p50 = loadgen.Ms(b.Latency.P50)
			busy = fmt.Sprintf("%.0f%% → %.0f%%", 100*a.MachineBusy, 100*b.MachineBusy)
			load = fmt.Sprintf("%.1f", a.LoadAvg[0])
		}
		verdict := "yes"
		if !within {
			verdict = "**no**"
		}
		cells = append(cells, moved, p50, fmt.Sprintf("%.1f%%", share), fmt.Sprint(failed), busy, load, verdict)
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	if d := r.MaxDrift(); d > 0 {
		fmt.Fprintf(w, "\nWithout any abuse, a client's p99 moved by up to ×%.2f from one window to the next in this run.\n", d)
	}
	fmt.Fprintf(w, "\n**abuser CPU** is what the abuser process itself used while the clients ran alongside it (warm-up and measured window), in cores. "+
		"On this machine it shares the cores with the suite, which a real attack from elsewhere would not, so it runs at **idle** "+
		"priority (Linux's SCHED_IDLE class) where the system allows: it gets the CPU the suite and the measuring clients leave "+
		"free, and its attempts show whether that was enough to keep its rate.\n\n")
	fmt.Fprintf(w, "| abuse | attempts/s | sources | held at most | attempts | abuser CPU | abuser priority | what the front door did with them |\n|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, p := range r.Pairs {
		if a := p.Abuse; a != nil {
			held := "-"
			if a.Hold > 0 {
				held = fmt.Sprintf("%d (bound %d)", a.MaxHeld, a.Hold)
			}
			cores, priority := "-", "-"
			if p.AbuserMeasured {
				cores, priority = fmt.Sprintf("%.2f", p.AbuserCores), "normal"
				if a.IdlePriority {
					priority = "idle"
				}
			}
			fmt.Fprintf(w, "| %s | %.0f | %d | %s | %d | %s | %s | %s |\n", a.Kind, a.Rate, len(a.Sources), held, a.Attempts, cores, priority, a.FormatOutcomes())
		}
	}
	fmt.Fprintln(w)
}
