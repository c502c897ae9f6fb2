// Command agtpbench is the suite load benchmark behind `make bench`: it
// starts every service as a process against a real redis-server, drives
// the front door with the e2e/loadgen generator, prints the results and
// writes them, with a latency-against-load plot, to -out.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agtpsuite/agtp/e2e"
	"github.com/agtpsuite/agtp/e2e/loadgen"
	"github.com/agtpsuite/agtp/services/keyfile"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		o     e2e.BenchOptions
		out   = flag.String("out", "docs/bench", "directory for results.md and latency-vs-load.svg; empty writes nothing")
		mix   = flag.String("mix", loadgen.DefaultMix.String(), "realistic mix as op=weight,...")
		only  = flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(e2e.Scenarios, ","))
		sweep = flag.String("sweep", "", "sweep offered loads as fractions of the mix's closed-loop throughput, e.g. 0.25,0.5,1")
	)
	flag.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unrecorded warm-up of each run")
	flag.DurationVar(&o.Duration, "duration", 8*time.Second, "measured part of each run")
	flag.DurationVar(&o.SweepDuration, "sweep-duration", 5*time.Second, "measured part of each sweep step")
	flag.IntVar(&o.Concurrency, "concurrency", 64, "requests in flight in the throughput runs")
	flag.IntVar(&o.NewConnConcurrency, "newconn-concurrency", 8, "workers of the new-connection run")
	flag.IntVar(&o.Agents, "agents", 8, "agents the load is spread over")
	flag.IntVar(&o.ProofRounds, "proof-rounds", 12, "alternating rounds of the side-by-side proof comparison (negative skips)")
	flag.IntVar(&o.IdleConns, "idle-conns", 10000, "idle TLS connections to hold (negative skips)")
	flag.Func("env", "KEY=VALUE added to every service's environment, repeatable (e.g. -env GOGC=200)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", v)
		}
		o.Env = append(o.Env, v)
		return nil
	})
	flag.Func("redis-arg", "argument added to the suite's redis-server command line, repeatable (e.g. -redis-arg --appendonly -redis-arg yes)", func(v string) error {
		o.RedisArgs = append(o.RedisArgs, v)
		return nil
	})
	flag.Float64Var(&o.AbuseRate, "abuse-rate", 400, "offered load of the abuse scenario's persistent-connection client, req/s (its new-connection and QUIC clients offer a tenth each)")
	abuse := flag.String("abuse-kinds", strings.Join(loadgen.AbuseKinds, ","), "abusers the abuse scenario runs, in order")
	flag.DurationVar(&o.AbuseDuration, "abuse-duration", 5*time.Second, "measured window of each abuse-scenario measurement")
	flag.DurationVar(&o.AbuseRamp, "abuse-ramp", 0, "ramp-up of every abuser before measuring (default: each kind's own)")
	var child loadgen.AbuseConfig
	caFile := flag.String(loadgen.FlagAbuseCA, "", "child mode: PEM roots of the target's certificate")
	flag.StringVar(&child.Kind, loadgen.FlagAbuseChild, "", "child mode (used by the abuse scenario): run this abuser until stdin ends, then print its result as JSON")
	flag.StringVar(&child.Target.Addr, loadgen.FlagAbuseAddr, "", "child mode: AGTP address to abuse")
	flag.StringVar(&child.Target.ServerName, loadgen.FlagAbuseServerName, "localhost", "child mode: the target's certificate name")
	limitChild := flag.Bool(loadgen.FlagLimitChild, false, "child mode (used by the throughput scenario): serve the limit responder until stdin ends")
	limitCert := flag.String(loadgen.FlagLimitCert, "", "child mode: the limit responder's certificate, PEM")
	limitKey := flag.String(loadgen.FlagLimitKey, "", "child mode: the limit responder's key, PEM")
	oneProcessChild := flag.Bool(e2e.FlagOneProcessChild, false, "child mode (used by the one-process scenario): run the suite as make run does, on free ports, until stdin ends")
	flag.StringVar(&o.ProfileDir, "profile", "", "directory for CPU profiles of every service during each closed-loop run (go tool pprof); empty disables")
	flag.Parse()
	if child.Kind != "" {
		return abuseChild(child, *caFile)
	}
	if *oneProcessChild {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := e2e.ServeOneProcessChild(ctx, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "agtpbench:", err)
			return 1
		}
		return 0
	}
	if *limitChild {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := loadgen.ServeLimitChild(ctx, *limitCert, *limitKey, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "agtpbench:", err)
			return 1
		}
		return 0
	}

	var err error
	if o.Mix, err = loadgen.ParseMix(*mix); err != nil {
		fmt.Fprintln(os.Stderr, "agtpbench:", err)
		return 2
	}
	if *abuse != "" {
		o.AbuseKinds = strings.Split(*abuse, ",")
		for _, k := range o.AbuseKinds {
			if _, ok := loadgen.AbuseDefaults[k]; !ok {
				fmt.Fprintf(os.Stderr, "agtpbench: abuse kind %q is not one of %s\n", k, strings.Join(loadgen.AbuseKinds, ","))
				return 2
			}
		}
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if *sweep != "" {
		for f := range strings.SplitSeq(*sweep, ",") {
			var v float64
			if _, err := fmt.Sscan(f, &v); err != nil || v <= 0 || v > 5 {
				fmt.Fprintf(os.Stderr, "agtpbench: sweep fraction %q is not in (0, 5]\n", f)
				return 2
			}
			o.SweepFractions = append(o.SweepFractions, v)
		}
	}
	o.Progress = os.Stderr
	if exe, err := os.Executable(); err == nil {
		o.AbuseCommand = []string{exe}
		o.LimitCommand = []string{exe}
		o.OneProcessCommand = []string{exe}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := e2e.Bench(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agtpbench:", err)
		if rep == nil {
			return 1
		}
	}
	var md bytes.Buffer
	wd, _ := os.Getwd()
	command := e2e.CommandLine(os.Args[1:], wd)
	rep.WriteMarkdown(&md, command, "latency-vs-load.svg")
	os.Stdout.Write(md.Bytes())
	if *out != "" {
		if werr := write(*out, md.Bytes(), rep); werr != nil {
			fmt.Fprintln(os.Stderr, "agtpbench:", werr)
			return 1
		}
		fmt.Fprintf(os.Stderr, "agtpbench: wrote %s\n", filepath.Join(*out, "results.md"))
	}
	if err != nil {
		return 1
	}
	return 0
}

// abuseChild is the abuse scenario's child process.
func abuseChild(cfg loadgen.AbuseConfig, caFile string) int {
	roots, err := keyfile.CertPool(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agtpbench:", err)
		return 2
	}
	cfg.Target.Roots = roots
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := loadgen.ServeAbuseChild(ctx, cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agtpbench:", err)
		return 1
	}
	return 0
}

func write(dir string, md []byte, rep *e2e.BenchReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), md, 0o644); err != nil {
		return err
	}
	if len(rep.Sweep) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "latency-vs-load.svg"), rep.SVG(), 0o644)
}
