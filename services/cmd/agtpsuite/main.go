// Command agtpsuite runs the whole AGTP suite in one process (make run).
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
	cfg := suite.Config{StateDir: ".state", Out: os.Stdout}
	cfg.RedisURL = os.Getenv("REDIS_URL")
	cfg.LogLevel = os.Getenv("LOG_LEVEL")
	_, cfg.Telemetry.OTLPExport = os.LookupEnv("OTEL_EXPORTER_OTLP_ENDPOINT")
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
