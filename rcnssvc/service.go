// Package rcnssvc is the RCNS service: PROPOSE evaluation, the runtime
// contract negotiation gate, and the synthesized contracts.
package rcnssvc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/grpc"

	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	rcnsv1 "github.com/agtpsuite/agtp/proto/agtp/rcns/v1"
	"github.com/agtpsuite/agtp/rcnssvc/demo"
	"github.com/agtpsuite/agtp/rcnssvc/internal/server"
	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of rcnssvc.
const HealthName = "agtp.rcns.v1.RcnsService"

// Service is a running rcnssvc.
type Service struct {
	base  *kit.Base
	srv   *server.Server
	conns []*grpc.ClientConn
}

// New provisions rcnssvc from a configuration; nothing listens on failure.
func New(ctx context.Context, cfg Config) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rcnssvc config: %w", err)
	}
	opts := cfg.Options
	if cfg.OptionsFile != "" {
		b, err := os.ReadFile(cfg.OptionsFile)
		if err != nil {
			return nil, fmt.Errorf("rcnssvc options: %w", err)
		}
		opts = server.DefaultOptions()
		if err := json.Unmarshal(b, &opts); err != nil {
			return nil, fmt.Errorf("rcnssvc options %s: %w", cfg.OptionsFile, err)
		}
	}
	if cfg.Demo {
		if opts.Patterns, err = demo.Patterns(); err != nil {
			return nil, err
		}
		opts.RCNS.Enabled = true
		// The demo agents are org-asserted (tier 2); tier 1 alone would
		// keep the gate shut for them.
		opts.RCNS.MinTrustTier = 2
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	if cfg.Demo {
		base.Log.Warn("demo is on: RCNS is enabled with the demo synthesis patterns and callers of trust tier 2 (org-asserted) may negotiate contracts; for development only (AGTP_DEMO, -demo)")
	}
	s := &Service{base: base}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	dial := func(name string) (*grpc.ClientConn, error) {
		conn, err := base.Server.Dial(name)
		if err == nil {
			s.conns = append(s.conns, conn)
		}
		return conn, err
	}
	catalog, err := dial("catalogsvc")
	if err != nil {
		return nil, err
	}
	policy, err := dial("policysvc")
	if err != nil {
		return nil, err
	}
	audit, err := dial("auditsvc")
	if err != nil {
		return nil, err
	}
	s.srv, err = server.New(base.Redis, base.Log, catalogv1.NewCatalogServiceClient(catalog),
		policyv1.NewPolicyServiceClient(policy), auditv1.NewAuditServiceClient(audit), opts)
	if err != nil {
		return nil, fmt.Errorf("rcnssvc: %w", err)
	}
	rcnsv1.RegisterRcnsServiceServer(base.Server.GRPC(), s.srv)
	base.Server.Register(HealthName, rcnsv1.RegisterRcnsServiceHandler, Access())
	return s, nil
}

// Run serves until ctx is done, then drains and releases everything.
func (s *Service) Run(ctx context.Context) error {
	err := s.base.Run(ctx, s.srv.Run)
	for _, c := range s.conns {
		_ = c.Close()
	}
	return err
}

// GRPCAddr is the bound gRPC address.
func (s *Service) GRPCAddr() string { return s.base.Server.GRPCAddr() }

// HTTPAddr is the bound REST gateway address.
func (s *Service) HTTPAddr() string { return s.base.Server.HTTPAddr() }

// Close releases a service that will not be run.
func (s *Service) Close() error {
	for _, c := range s.conns {
		_ = c.Close()
	}
	return s.base.Close(context.Background())
}
