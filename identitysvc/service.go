// Package identitysvc is the identity service: Agent Genesis, canonical
// Agent-IDs, identity documents and the registry lifecycle.
package identitysvc

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/identitysvc/agentcert"
	"github.com/agtpsuite/agtp/identitysvc/internal/registry"
	"github.com/agtpsuite/agtp/identitysvc/internal/server"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	identityv1 "github.com/agtpsuite/agtp/proto/agtp/identity/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of identitysvc.
const HealthName = "agtp.identity.v1.IdentityService"

// Service is a running identitysvc.
type Service struct {
	base  *kit.Base
	srv   *server.Server
	audit *grpc.ClientConn
}

// New provisions identitysvc from a configuration; nothing listens on failure.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("identitysvc config: %w", err)
	}
	opts := cfg.Options
	var err error
	if opts.SigningKey, opts.KeyID, err = kit.LoadSigner(cfg.SigningKeyFile); err != nil {
		return nil, err
	}
	if opts.AgentCA, err = cfg.loadAgentCA(); err != nil {
		return nil, err
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	if opts.LifecycleAuth == registry.AuthOpen {
		base.Log.Warn("lifecycle_auth is open: lifecycle calls are not authorised; any caller that reaches identitysvc "+
			"may ACTIVATE, DEACTIVATE, REINSTATE, REVOKE or DEPRECATE any agent, and the front door forwards every caller's lifecycle methods, "+
			"so every agent that reaches the front door may change any agent's state (allowed because every listener of identitysvc is on loopback; "+
			"for a single-tenant development host only)",
			"grpc_addr", cfg.GRPCAddr, "http_addr", cfg.HTTPAddr)
	}
	if ca := opts.AgentCA; ca != nil {
		base.Log.Info("issuing Agent Certificates", "agent_ca", ca.Chain[0].Subject.String(),
			"agent_ca_fingerprint", agentcert.Fingerprint(ca.Chain[0].Raw), "agent_ca_not_after", ca.Chain[0].NotAfter.UTC(),
			"max_lifetime", opts.AgentCertMaxLifetime)
	}
	audit, err := base.Server.Dial("auditsvc")
	if err != nil {
		_ = base.Close(ctx)
		return nil, err
	}
	srv, err := server.New(base.Redis, base.Log, auditv1.NewAuditServiceClient(audit), opts)
	if err != nil {
		_ = audit.Close()
		_ = base.Close(ctx)
		return nil, fmt.Errorf("identitysvc: %w", err)
	}
	identityv1.RegisterIdentityServiceServer(base.Server.GRPC(), srv)
	base.Server.Register(HealthName, identityv1.RegisterIdentityServiceHandler, Access())
	return &Service{base: base, srv: srv, audit: audit}, nil
}

// Run serves until ctx is done, then drains and releases everything.
func (s *Service) Run(ctx context.Context) error {
	err := s.base.Run(ctx, s.srv.Run)
	_ = s.audit.Close()
	return err
}

// GRPCAddr is the bound gRPC address.
func (s *Service) GRPCAddr() string { return s.base.Server.GRPCAddr() }

// HTTPAddr is the bound REST gateway address.
func (s *Service) HTTPAddr() string { return s.base.Server.HTTPAddr() }

// Close releases a service that will not be run.
func (s *Service) Close() error {
	_ = s.audit.Close()
	return s.base.Close(context.Background())
}
