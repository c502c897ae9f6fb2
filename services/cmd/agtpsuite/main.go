// Command agtpsuite runs the whole AGTP suite in one process (make run).
// Every service reads its settings from the environment, as its own binary
// does; the suite overrides the few it must set itself (services/suite).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agtpsuite/agtp/services/suite"
)

func main() {
	cfg := suite.Config{StateDir: ".state", Out: os.Stdout, LookupEnv: os.LookupEnv}
	flag.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for the development PKI and keys (env AGTP_STATE_DIR)")
	if v := os.Getenv("AGTP_STATE_DIR"); v != "" {
		cfg.StateDir = v
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := suite.New(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agtpsuite: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "agtpsuite: %v\n", err)
		os.Exit(1)
	}
}
