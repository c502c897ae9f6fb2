package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agtpsuite/agtp/services/agtp"
)

// Limits on a run, so that a mistyped flag cannot turn the generator into
// something unbounded.
const (
	MaxConcurrency = 4096
	MaxDuration    = 10 * time.Minute
	MaxRate        = 1_000_000
	// drainGrace is how long an open-loop run keeps sending requests that
	// fell due before the end but could not start in time; what is left
	// afterwards is reported as Unsent.
	drainGrace = 3 * time.Second
)

// Config is one run.
type Config struct {
	// Name labels the run in reports.
	Name   string
	Target Target
	// Transport is TransportTCP, TransportTCPNew or TransportQUIC.
	Transport string
	// Concurrency is how many requests may be in flight at once: the
	// number of workers, each sending one request and waiting for its
	// response. Default 1.
	Concurrency int
	// Connections is how many persistent connections the workers share.
	// TCP: default Concurrency (one request in flight per connection);
	// fewer connections pipeline requests. QUIC: default one connection
	// per 16 workers. Ignored for TransportTCPNew.
	Connections int
	// Rate is the offered load in requests per second (open loop:
	// requests are due on a fixed schedule whether or not earlier ones
	// have been answered, and latency counts from when a request was due,
	// so a stalled server is not hidden by a waiting generator). Zero
	// means closed loop: each worker sends its next request as soon as
	// it has the previous response.
	Rate float64
	// Warmup runs the load unrecorded before measuring. Duration is the
	// measured part. MaxRequests, when positive, ends the run earlier.
	Warmup      time.Duration
	Duration    time.Duration
	MaxRequests int
	// Mix is the request mix; default DefaultMix.
	Mix Mix
	// Agents are the canonical Agent-IDs requests are sent as, picked at
	// random per request.
	Agents []string
	// AgentCerts, aligned with Agents, are their Agent Certificates. With
	// them every connection is one agent's: it presents that agent's
	// certificate and carries only that agent's requests, as a real agent
	// does. Without them the Agent-ID header is the only claim.
	AgentCerts []tls.Certificate
	// Procs are the processes whose CPU time the run measures, by name.
	Procs map[string]int
	// Seed makes the request sequence repeatable; zero picks one.
	Seed uint64
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Concurrency <= 0 {
		d.Concurrency = 1
	}
	if d.Connections <= 0 {
		switch d.Transport {
		case TransportQUIC:
			d.Connections = (d.Concurrency + 15) / 16
		default:
			d.Connections = d.Concurrency
		}
	}
	d.Connections = min(d.Connections, d.Concurrency)
	if len(d.Mix) == 0 {
		d.Mix = DefaultMix
	}
	if d.Seed == 0 {
		d.Seed = uint64(time.Now().UnixNano())
	}
	if d.Name == "" {
		d.Name = fmt.Sprintf("%s c=%d", d.Transport, d.Concurrency)
	}
	return d
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Transport {
	case TransportTCP, TransportTCPNew, TransportQUIC:
	default:
		errs = append(errs, fmt.Errorf("transport %q is not %s, %s or %s", c.Transport, TransportTCP, TransportTCPNew, TransportQUIC))
	}
	if c.Target.Addr == "" {
		errs = append(errs, errors.New("target address is empty"))
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("concurrency %d is outside 1..%d", c.Concurrency, MaxConcurrency))
	}
	if c.Duration <= 0 || c.Duration+c.Warmup > MaxDuration || c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("duration %v and warmup %v must be positive and together at most %v", c.Duration, c.Warmup, MaxDuration))
	}
	if c.Rate < 0 || c.Rate > MaxRate {
		errs = append(errs, fmt.Errorf("rate %v is outside 0..%d", c.Rate, MaxRate))
	}
	if c.MaxRequests < 0 {
		errs = append(errs, errors.New("max requests is negative"))
	}
	mix := c.Mix
	if len(mix) == 0 {
		mix = DefaultMix
	}
	if err := mix.Validate(); err != nil {
		errs = append(errs, err)
	} else if mix.needsAgent() && len(c.Agents) == 0 {
		errs = append(errs, errors.New("the mix sends requests as an agent, but no Agent-IDs are given"))
	}
	if len(c.AgentCerts) > 0 && len(c.AgentCerts) != len(c.Agents) {
		errs = append(errs, fmt.Errorf("%d agent certificates for %d agents", len(c.AgentCerts), len(c.Agents)))
	}
	return errors.Join(errs...)
}

// OpResult is what one operation of the mix saw.
type OpResult struct {
	Completed uint64
	Errors    uint64 // transport errors
	Statuses  map[int]uint64
	Latency   Summary
}

// Result is the outcome of a run.
type Result struct {
	Name        string
	Transport   string
	Concurrency int
	Connections int
	// Rate is the offered load (0 for closed loop).
	Rate float64
	Mix  string
	// Elapsed is the measured window.
	Elapsed time.Duration
	// Completed counts responses of any status; Failed counts requests
	// that got no response (TransportErrors says why); Unsent counts
	// open-loop requests that fell due but were never sent, because the
	// workers were all busy until the drain deadline.
	Completed, Failed, Unsent uint64
	// Throughput is Completed per second of Elapsed.
	Throughput float64
	// Latency is over every response, whatever its status; Histogram
	// holds the same values, so that runs can be pooled (Histogram.Merge).
	Latency         Summary
	Histogram       *Histogram
	Statuses        map[int]uint64
	TransportErrors map[string]uint64
	// ErrorExamples are the first few messages of each transport error.
	ErrorExamples map[string][]string
	PerOp         map[string]OpResult
	// CPU is the CPU time (user+system) each measured process used during
	// the window; "loadgen" is this process.
	CPU map[string]time.Duration
	// CtxSwitches are the context switches each measured process's
	// threads made during the window (CtxSwitches), keyed as CPU.
	CtxSwitches map[string]uint64
	// RunqueueWait is the time each measured process's threads were
	// runnable but waiting for a CPU during the window (RunqueueWait),
	// keyed as CPU.
	RunqueueWait map[string]time.Duration
	// MachineBusy is the share of all cores that was busy.
	MachineBusy float64
	// LoadAvg is the load average when the run started.
	LoadAvg [3]float64
}

// CPUPerRequest is a process's CPU time per completed request.
func (r *Result) CPUPerRequest(proc string) time.Duration {
	if r.Completed == 0 {
		return 0
	}
	return r.CPU[proc] / time.Duration(r.Completed)
}

// RunqueueWaitPerRequest is how long a process's threads waited for a CPU
// per completed request.
func (r *Result) RunqueueWaitPerRequest(proc string) time.Duration {
	if r.Completed == 0 {
		return 0
	}
	return r.RunqueueWait[proc] / time.Duration(r.Completed)
}

// CtxSwitchesPerRequest is a process's context switches per completed
// request.
func (r *Result) CtxSwitchesPerRequest(proc string) float64 {
	if r.Completed == 0 {
		return 0
	}
	return float64(r.CtxSwitches[proc]) / float64(r.Completed)
}

// PerCPUSecond is completed requests per CPU-second of a process: for the
// front door, the requests per second one of its cores serves.
func (r *Result) PerCPUSecond(proc string) float64 {
	cpu := r.CPU[proc].Seconds()
	if cpu <= 0 {
		return 0
	}
	return float64(r.Completed) / cpu
}

// SuccessRatio is the share of responses with a 2xx status.
func (r *Result) SuccessRatio() float64 {
	if r.Completed == 0 {
		return 0
	}
	var ok uint64
	for s, n := range r.Statuses {
		if agtp.IsSuccess(s) {
			ok += n
		}
	}
	return float64(ok) / float64(r.Completed)
}

// opStats is shared by all workers; every field is updated atomically.
type opStats struct {
	hist     Histogram
	statuses [600]atomic.Uint64 // index is the status code
	errors   atomic.Uint64
}

type recorder struct {
	all      Histogram
	ops      []opStats
	mu       sync.Mutex
	errs     map[string]uint64
	examples map[string][]string
}

// maxErrorExamples bounds the messages kept per transport error kind.
const maxErrorExamples = 3

func (r *recorder) record(op int, resp *agtp.Response, err error, d time.Duration) {
	s := &r.ops[op]
	if err != nil {
		s.errors.Add(1)
		kind := "other"
		var te *transportError
		if errors.As(err, &te) {
			kind = string(te.kind)
		}
		r.mu.Lock()
		r.errs[kind]++
		if len(r.examples[kind]) < maxErrorExamples {
			r.examples[kind] = append(r.examples[kind], Ops[op]+": "+err.Error())
		}
		r.mu.Unlock()
		return
	}
	s.hist.Record(d)
	r.all.Record(d)
	if resp.Status >= 100 && resp.Status < len(s.statuses) {
		s.statuses[resp.Status].Add(1)
	} else {
		s.statuses[0].Add(1)
	}
}

// job is one open-loop request: when it was due, and whether it counts.
type job struct {
	due    time.Time
	record bool
}

// Run performs one bounded run: it dials its connections, sends load for
// Warmup+Duration (or MaxRequests), waits for what is in flight and
// returns the measurements. Cancelling ctx ends the run early with what
// was measured so far.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	senders, agentOf, closeAll, err := openSenders(ctx, c)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	rec := &recorder{ops: make([]opStats, len(Ops)), errs: map[string]uint64{}, examples: map[string][]string{}}
	static := staticRequests(c.Agents)
	pick := newPicker(c.Mix)
	load, _ := LoadAvg()

	start := time.Now()
	measureFrom := start.Add(c.Warmup)
	end := measureFrom.Add(c.Duration)
	var sent atomic.Int64 // recorded requests started, for MaxRequests
	var unsent atomic.Uint64
	budget := func() bool {
		return c.MaxRequests <= 0 || sent.Add(1) <= int64(c.MaxRequests)
	}

	var jobs chan job
	if c.Rate > 0 {
		jobs = make(chan job, c.Concurrency)
	}

	// CPU and context switches are sampled when measuring starts and when
	// the last worker is done.
	procStart := make(chan procSnapshot, 1)
	go func() {
		t := time.NewTimer(time.Until(measureFrom))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		procStart <- snapshot(c.Procs)
	}()

	var wg sync.WaitGroup
	for w := range c.Concurrency {
		b := &builder{agents: c.Agents, worker: w, static: static, pinned: agentOf[w]}
		rng := rand.New(rand.NewPCG(c.Seed, uint64(w)))
		snd := senders[w]
		one := func(due time.Time, record bool) {
			req, agent, op := b.build(pick.pick(rng), rng)
			resp, err := snd.send(ctx, req)
			if err == nil {
				b.done(op, req, agent, resp.Status)
			}
			if record && ctx.Err() == nil {
				rec.record(op, resp, err, time.Since(due))
			}
		}
		wg.Go(func() {
			if jobs == nil { // closed loop
				for ctx.Err() == nil {
					now := time.Now()
					if !now.Before(end) {
						return
					}
					record := !now.Before(measureFrom)
					if record && !budget() {
						return
					}
					one(now, record)
				}
				return
			}
			for j := range jobs {
				if ctx.Err() != nil || time.Now().After(end.Add(drainGrace)) {
					if j.record {
						unsent.Add(1)
					}
					continue
				}
				one(j.due, j.record)
			}
		})
	}
	if jobs != nil {
		schedule(ctx, jobs, c.Rate, start, measureFrom, end, budget, &unsent)
	}
	wg.Wait()
	stop := snapshot(c.Procs)
	first := <-procStart
	elapsed := stop.at.Sub(measureFrom)
	if ctx.Err() != nil && elapsed <= 0 {
		return nil, ctx.Err()
	}

	res := &Result{
		Name: c.Name, Transport: c.Transport, Concurrency: c.Concurrency, Connections: c.Connections,
		Rate: c.Rate, Mix: c.Mix.String(), Elapsed: elapsed, Unsent: unsent.Load(),
		Latency: rec.all.Summarize(), Histogram: &rec.all, Statuses: map[int]uint64{}, TransportErrors: rec.errs, ErrorExamples: rec.examples,
		PerOp: map[string]OpResult{}, CPU: map[string]time.Duration{}, CtxSwitches: map[string]uint64{}, RunqueueWait: map[string]time.Duration{}, LoadAvg: load,
		MachineBusy: Utilisation(first.machine, stop.machine),
	}
	for i := range rec.ops {
		s := &rec.ops[i]
		or := OpResult{Errors: s.errors.Load(), Statuses: map[int]uint64{}, Latency: s.hist.Summarize()}
		for code := range s.statuses {
			if n := s.statuses[code].Load(); n > 0 {
				or.Statuses[code] += n
				res.Statuses[code] += n
				or.Completed += n
			}
		}
		res.Completed += or.Completed
		res.Failed += or.Errors
		if or.Completed+or.Errors > 0 {
			res.PerOp[Ops[i]] = or
		}
	}
	if elapsed > 0 {
		res.Throughput = float64(res.Completed) / elapsed.Seconds()
	}
	for name, b := range stop.cpu {
		if a, ok := first.cpu[name]; ok {
			res.CPU[name] = b - a
		}
	}
	for name, b := range stop.switches {
		// A thread that ended in the window took its count with it and
		// can leave the sum below the start's: no figure then, rather
		// than one wrapped round.
		if a, ok := first.switches[name]; ok && b >= a {
			res.CtxSwitches[name] = b - a
		}
	}
	for name, b := range stop.waits {
		if a, ok := first.waits[name]; ok && b >= a {
			res.RunqueueWait[name] = b - a
		}
	}
	return res, nil
}

// schedule emits open-loop jobs at rate per second from start until end,
// marking those due from measureFrom on as recorded. A job that cannot be
// handed to a worker waits with its due time unchanged, so its queueing
// shows in its latency; after end+drainGrace the rest are counted unsent.
func schedule(ctx context.Context, jobs chan<- job, rate float64, start, measureFrom, end time.Time, budget func() bool, unsent *atomic.Uint64) {
	defer close(jobs)
	interval := time.Duration(float64(time.Second) / rate)
	total := int64(end.Sub(start) / interval)
	deadline := time.NewTimer(time.Until(end.Add(drainGrace)))
	defer deadline.Stop()
	for i := int64(0); i < total; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			// Sleeping rounds up to the timer's granularity; the due time,
			// not the wake-up, is what latency counts from.
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
		record := !due.Before(measureFrom)
		if record && !budget() {
			return
		}
		select {
		case jobs <- job{due: due, record: record}:
		case <-ctx.Done():
			return
		case <-deadline.C:
			for ; i < total; i++ {
				if !start.Add(time.Duration(i) * interval).Before(measureFrom) {
					unsent.Add(1)
				}
			}
			return
		}
	}
}

// procSnapshot is what the measured processes had used at one moment.
type procSnapshot struct {
	at       time.Time
	cpu      map[string]time.Duration
	switches map[string]uint64
	waits    map[string]time.Duration
	machine  CPUSample
}

func snapshot(procs map[string]int) procSnapshot {
	s := procSnapshot{cpu: map[string]time.Duration{}, switches: map[string]uint64{}, waits: map[string]time.Duration{}}
	s.machine, _ = MachineCPU()
	all := make(map[string]int, len(procs)+1)
	for name, pid := range procs {
		all[name] = pid
	}
	all["loadgen"] = os.Getpid()
	for name, pid := range all {
		if d, err := CPUTime(pid); err == nil {
			s.cpu[name] = d
		}
		if n, err := CtxSwitches(pid); err == nil {
			s.switches[name] = n
		}
		if d, err := RunqueueWait(pid); err == nil {
			s.waits[name] = d
		}
	}
	s.at = time.Now()
	return s
}

// openSenders dials what the workers use: one sender per worker.
func openSenders(ctx context.Context, c Config) ([]sender, []int, func(), error) {
	senders := make([]sender, c.Concurrency)
	// agentOf[w] is the agent worker w speaks for when connections are
	// agents' own (AgentCerts), else -1: any agent, per request.
	agentOf := make([]int, c.Concurrency)
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	// target is connection i's: with AgentCerts, agent i%len(Agents)'s.
	target := func(i int) (Target, int) {
		if len(c.AgentCerts) == 0 {
			return c.Target, -1
		}
		t, a := c.Target, i%len(c.AgentCerts)
		t.Certificate = &c.AgentCerts[a]
		return t, a
	}
	switch c.Transport {
	case TransportTCP:
		slots := make([]*tcpSlot, c.Connections)
		slotAgent := make([]int, c.Connections)
		for i := range slots {
			t, a := target(i)
			slots[i], slotAgent[i] = &tcpSlot{t: t, conf: t.tlsConfig()}, a
			closers = append(closers, slots[i].close)
			if _, err := slots[i].get(ctx); err != nil {
				closeAll()
				return nil, nil, nil, fmt.Errorf("dial %s: %w", c.Target.Addr, err)
			}
		}
		for w := range senders {
			senders[w], agentOf[w] = slots[w%len(slots)], slotAgent[w%len(slots)]
		}
	case TransportTCPNew:
		for w := range senders {
			t, a := target(w)
			senders[w], agentOf[w] = newNewConnSender(t), a
		}
	case TransportQUIC:
		conns := make([]*quicSender, c.Connections)
		connAgent := make([]int, c.Connections)
		for i := range conns {
			t, a := target(i)
			qc, err := dialQUIC(ctx, t)
			if err != nil {
				closeAll()
				return nil, nil, nil, fmt.Errorf("dial QUIC %s: %w", c.Target.Addr, err)
			}
			conns[i], connAgent[i] = &quicSender{conn: qc}, a
			closers = append(closers, conns[i].close)
		}
		for w := range senders {
			senders[w], agentOf[w] = conns[w%len(conns)], connAgent[w%len(conns)]
		}
	}
	return senders, agentOf, closeAll, nil
}
