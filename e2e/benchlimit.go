package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"

	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/devpki"
)

// limitServer is the limit responder the throughput run is compared with:
// a child process (BenchOptions.LimitCommand), or a goroutine of this
// process.
type limitServer struct {
	target loadgen.Target
	procs  map[string]int
	stop   func()
}

// startLimit starts the limit responder with the front door's own AGTP
// server certificate, so that the client's handshake and verification
// are the same.
func startLimit(ctx context.Context, o BenchOptions, s *benchSuite) (*limitServer, error) {
	return startLimitWith(ctx, o, s.target, s.c.PKI.Cert(devpki.AGTPServer), s.c.PKI.Key(devpki.AGTPServer))
}

// startLimitWith starts the limit responder with the AGTP server
// certificate in certFile and keyFile, for clients of suite.
func startLimitWith(ctx context.Context, o BenchOptions, suite loadgen.Target, certFile, keyFile string) (*limitServer, error) {
	l := &limitServer{target: loadgen.Target{ServerName: suite.ServerName, Roots: suite.Roots}}
	if len(o.LimitCommand) > 0 {
		p, err := loadgen.StartLimitProcess(ctx, o.LimitCommand, certFile, keyFile)
		if err != nil {
			return nil, err
		}
		l.target.Addr, l.procs, l.stop = p.Addr, map[string]int{"limit": p.Pid}, p.Stop
		return l, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = loadgen.ServeLimit(lctx, ln, cert)
	}()
	l.target.Addr, l.procs = ln.Addr().String(), map[string]int{"limit": os.Getpid()}
	l.stop = func() { cancel(); <-done }
	return l, nil
}

// runLimit runs cfg, the throughput run's load, against the limit
// responder, with the same agents and certificates.
func (s *benchSuite) runLimit(ctx context.Context, name string, cfg loadgen.Config, l *limitServer) (*loadgen.Result, error) {
	cfg.Name, cfg.Target, cfg.Agents, cfg.AgentCerts, cfg.Procs = name, l.target, s.agents, s.certs, l.procs
	cfg.Warmup, cfg.Duration = s.o.Warmup, s.o.Duration
	s.progress("%s: the limit responder (TLS 1.3, AGTP framing, one Ed25519 signature and a hash chain per response), %d in flight", name, cfg.Concurrency)
	r, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.progress("%s: %.0f req/s, p50 %s ms, p99 %s ms, responder %.0f µs CPU and %.1f context switches per request", name, r.Throughput,
		loadgen.Ms(r.Latency.P50), loadgen.Ms(r.Latency.P99), float64(r.CPUPerRequest("limit").Microseconds()), r.CtxSwitchesPerRequest("limit"))
	return r, nil
}

// LimitRatio is the throughput run's requests per second as a share of
// the limit responder's, the mean of its runs just before and after; 0
// when either was not measured.
func (r *BenchReport) LimitRatio() float64 {
	t := r.Runs[ScenarioThroughput]
	if t == nil || len(r.Limit) == 0 {
		return 0
	}
	var sum float64
	for _, l := range r.Limit {
		sum += l.Throughput
	}
	if sum == 0 {
		return 0
	}
	return t.Throughput / (sum / float64(len(r.Limit)))
}
