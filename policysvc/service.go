// Package policysvc is the policysvc service: its configuration, constructor and
// run loop. The domain logic lives in internal packages.
package policysvc

import (
	"context"
	"fmt"

	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of policysvc.
const HealthName = "agtp.policy.v1.PolicyService"

// Service is a running policysvc.
type Service struct {
	base *kit.Base
}

// New provisions policysvc from a configuration; nothing listens on failure.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policysvc config: %w", err)
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	base.Server.Register(HealthName, nil)
	return &Service{base: base}, nil
}

// Run serves until ctx is done, then drains and releases everything.
func (s *Service) Run(ctx context.Context) error { return s.base.Run(ctx) }

// GRPCAddr is the bound gRPC address.
func (s *Service) GRPCAddr() string { return s.base.Server.GRPCAddr() }

// HTTPAddr is the bound REST gateway address.
func (s *Service) HTTPAddr() string { return s.base.Server.HTTPAddr() }

// Close releases a service that will not be run.
func (s *Service) Close() error { return s.base.Close(context.Background()) }
