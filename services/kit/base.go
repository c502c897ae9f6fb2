package kit

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agtpsuite/agtp/services/rawsock"
)

// Base is what every service is built on: logger, mTLS material,
// telemetry, the Redis client (when configured) and the gRPC server.
type Base struct {
	Log       *slog.Logger
	MTLS      *MTLS
	Telemetry *Telemetry
	Redis     redis.UniversalClient
	Server    *Server
	// pprof is the opt-in profiling listener (Common.PprofAddr).
	pprof *http.Server
}

// NewBase provisions the shared parts of a service from a validated
// configuration. On error nothing is left open.
func NewBase(ctx context.Context, cfg Common) (_ *Base, err error) {
	b := &Base{Log: cfg.Logger(os.Stderr)}
	defer func() {
		if err != nil {
			b.Close(context.Background())
		}
	}()
	if cfg.RuntimeSocketIO {
		rawsock.Disable()
		b.Log.Info("TCP reads and writes go through the Go runtime's system-call path (AGTP_RUNTIME_SOCKET_IO)")
	}
	if b.MTLS, err = LoadMTLS(cfg.CAFile, cfg.CertFile, cfg.KeyFile); err != nil {
		return nil, err
	}
	if b.Telemetry, err = NewTelemetry(ctx, cfg.Name, cfg.Telemetry); err != nil {
		return nil, err
	}
	// The suite certificate this service presents on every internal
	// listener and call.
	if err = ObserveCertificates(b.Telemetry.MeterProvider.Meter("github.com/agtpsuite/agtp/services/kit"),
		map[string]func() (*x509.Certificate, error){"service": b.MTLS.Leaf}); err != nil {
		return nil, fmt.Errorf("certificate metrics: %w", err)
	}
	if cfg.RedisURL != "" {
		if b.Redis, err = NewRedis(ctx, cfg.RedisURL, b.Telemetry.redisTracer(), b.Telemetry.redisMeter()); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
	}
	if b.Server, err = NewServer(cfg, Deps{Logger: b.Log, MTLS: b.MTLS, Telemetry: b.Telemetry}); err != nil {
		return nil, err
	}
	if cfg.PprofAddr != "" {
		if b.pprof, _, err = startPprof(cfg.PprofAddr, b.Log); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Close releases what NewBase opened. It is safe after a partial NewBase.
func (b *Base) Close(ctx context.Context) error {
	var errs []error
	stopPprof(b.pprof)
	if b.Redis != nil {
		errs = append(errs, b.Redis.Close())
	}
	if b.Telemetry != nil {
		errs = append(errs, b.Telemetry.Shutdown(ctx))
	}
	if b.Server != nil {
		b.Server.closeListeners()
	}
	return errors.Join(errs...)
}

// Run serves until ctx is done, with the service's extra tasks, then
// releases everything.
func (b *Base) Run(ctx context.Context, extra ...Task) error {
	err := b.Server.Run(ctx, extra...)
	if cerr := b.Close(context.Background()); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// redisTracer is the tracer provider for Redis commands, or nil (no
// instrumentation) when nothing records spans.
func (t *Telemetry) redisTracer() trace.TracerProvider {
	if !t.tracing {
		return nil
	}
	return t.TracerProvider
}

// redisMeter is the meter provider for the Redis client's pool and
// command metrics, or nil when no metrics are exported.
func (t *Telemetry) redisMeter() metric.MeterProvider {
	if !t.metrics {
		return nil
	}
	return t.MeterProvider
}
