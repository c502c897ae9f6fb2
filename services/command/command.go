// Package command is the command layer shared by the suite's main
// packages: it reads flags and environment into a service's typed Config,
// runs the service under SIGINT/SIGTERM, and turns the result into an exit
// status. Nothing below this layer reads flags or the environment.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// DefaultGCPercent is the services' GOGC when the environment sets none.
const DefaultGCPercent = 400

// Config is what a service's configuration offers the command layer.
type Config interface {
	BindFlags(fs *flag.FlagSet)
	ApplyEnv(lookup func(string) (string, bool)) error
	Validate() error
}

// Service is a constructed service.
type Service interface {
	Run(ctx context.Context) error
}

// Main parses flags and environment into cfg, builds the service with
// build, and runs it until SIGINT or SIGTERM. It returns the exit status.
//
// `<name> healthcheck [flags]` instead probes the service configured by the
// same environment and flags (see HealthcheckCommand) and exits 0 when it
// is SERVING.
func Main(name string, cfg Config, build func(ctx context.Context) (Service, error)) int {
	if len(os.Args) > 1 && os.Args[1] == HealthcheckCommand {
		return healthcheck(name, cfg, os.Args[2:], os.LookupEnv, os.Stderr)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Environment first, so explicit flags win.
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	cfg.BindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: invalid configuration:\n%v\n", name, err)
		return 2
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// The services keep little live heap and allocate per request; a
		// larger GC target trades some memory for less GC CPU on the hot
		// path (docs/performance.md). GOGC in the environment wins.
		debug.SetGCPercent(DefaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	svc, err := build(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	if err := svc.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
