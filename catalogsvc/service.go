// Package catalogsvc is the catalog service: the method catalog, path
// grammar, endpoint registry, server manifest and method policy of the
// AGTP-API contract layer. The domain logic lives in internal packages
// and in the public route and endpoint packages the front door shares.
package catalogsvc

import (
	"context"
	"fmt"

	"github.com/agtpsuite/agtp/catalogsvc/internal/server"
	catalogv1 "github.com/agtpsuite/agtp/proto/agtp/catalog/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of catalogsvc.
const HealthName = "agtp.catalog.v1.CatalogService"

// Service is a running catalogsvc.
type Service struct {
	base *kit.Base
	srv  *server.Server
}

// New provisions catalogsvc from a configuration; nothing listens on
// failure, and a bad endpoint configuration fails here.
func New(ctx context.Context, cfg Config) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("catalogsvc config: %w", err)
	}
	opts := cfg.Options
	if cfg.SigningKeyFile != "" {
		if opts.SigningKey, opts.SigningKeyID, err = kit.LoadSigner(cfg.SigningKeyFile); err != nil {
			return nil, err
		}
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	if opts.DemoEndpoints && opts.EndpointsDir == "" {
		base.Log.Warn("demo endpoints are on: the embedded demo endpoints are served, anonymous ones included; for development only (AGTP_DEMO, -demo)")
	}
	srv, err := server.New(ctx, base.Redis, base.Log, opts)
	if err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("catalogsvc: %w", err)
	}
	catalogv1.RegisterCatalogServiceServer(base.Server.GRPC(), srv)
	base.Server.Register(HealthName, catalogv1.RegisterCatalogServiceHandler, Access())
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
