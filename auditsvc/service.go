// Package auditsvc is the audit service: signed Attribution-Records,
// per-agent hash chains, lifecycle streams and the reads behind INSPECT.
package auditsvc

import (
	"context"
	"fmt"

	"github.com/agtpsuite/agtp/auditsvc/attribution"
	"github.com/agtpsuite/agtp/auditsvc/internal/chain"
	"github.com/agtpsuite/agtp/auditsvc/internal/server"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of auditsvc.
const HealthName = "agtp.audit.v1.AuditService"

// Service is a running auditsvc.
type Service struct {
	base *kit.Base
	srv  *server.Server
}

// New provisions auditsvc from a configuration; nothing listens on failure.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("auditsvc config: %w", err)
	}
	keys, err := attribution.LoadKeySet(cfg.SigningKeyFile, cfg.VerifyKeyFiles...)
	if err != nil {
		return nil, fmt.Errorf("auditsvc keys: %w", err)
	}
	opts := cfg.Options
	opts.ServerID = cfg.ServerID
	opts.Keys = keys
	opts.Archive.Dir = cfg.ArchiveDir
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	meter := base.Telemetry.MeterProvider.Meter("github.com/agtpsuite/agtp/auditsvc")
	if base.Telemetry.Recording {
		// Timing every append is left out when nothing reads the metrics.
		if err := observeAppends(meter, &opts.Chain); err != nil {
			_ = base.Close(ctx)
			return nil, fmt.Errorf("auditsvc metrics: %w", err)
		}
	}
	srv, err := server.New(base.Redis, base.Log, opts)
	if err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("auditsvc: %w", err)
	}
	if n := opts.Chain.ReplicaAcks; n > 0 {
		base.Log.Info("audit appends are acknowledged only once Redis replicas have the record; otherwise they fail as unavailable",
			"replica_acks", n, "replica_timeout", opts.Chain.ReplicaTimeout)
	} else {
		base.Log.Info("audit appends do not wait for Redis replicas (AGTP_AUDIT_REPLICA_ACKS=0): an acknowledged record survives a Redis restart (with appendonly) but not necessarily a failover")
	}
	if w := opts.Chain.RequestWindow; w < chain.DefaultRequestWindow {
		base.Log.Warn("audit request IDs are remembered for less than the default: a retry of an append later than the window appends a second record",
			"request_window", w, "default", chain.DefaultRequestWindow)
	}
	if err := observe(meter, srv, base.Redis); err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("auditsvc metrics: %w", err)
	}
	auditv1.RegisterAuditServiceServer(base.Server.GRPC(), srv)
	base.Server.Register(HealthName, auditv1.RegisterAuditServiceHandler, Access())
	return &Service{base: base, srv: srv}, nil
}

// Run serves until ctx is done, then drains and releases everything.
func (s *Service) Run(ctx context.Context) error { return s.base.Run(ctx, s.srv.Run) }

// GRPCAddr is the bound gRPC address.
func (s *Service) GRPCAddr() string { return s.base.Server.GRPCAddr() }

// HTTPAddr is the bound REST gateway address.
func (s *Service) HTTPAddr() string { return s.base.Server.HTTPAddr() }

// Close releases a service that will not be run.
func (s *Service) Close() error { return s.base.Close(context.Background()) }
