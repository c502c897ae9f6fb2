// Package policysvc is the policy service: authority scopes, rate limits,
// idempotency and external credentials, decided in one Authorize call.
package policysvc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/grpc"

	"github.com/agtpsuite/agtp/policysvc/internal/agp"
	"github.com/agtpsuite/agtp/policysvc/internal/changelog"
	"github.com/agtpsuite/agtp/policysvc/internal/server"
	"github.com/agtpsuite/agtp/policysvc/internal/tasks"
	agpv1 "github.com/agtpsuite/agtp/proto/agtp/agp/v1"
	auditv1 "github.com/agtpsuite/agtp/proto/agtp/audit/v1"
	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	taskv1 "github.com/agtpsuite/agtp/proto/agtp/task/v1"
	"github.com/agtpsuite/agtp/services/kit"
)

// HealthName is the gRPC health service name of policysvc.
const HealthName = "agtp.policy.v1.PolicyService"

// TaskHealthName is the gRPC health service name of the task service
// policysvc also serves.
const TaskHealthName = "agtp.task.v1.TaskService"

// AGPHealthName is the gRPC health service name of the AGP state service
// policysvc also serves.
const AGPHealthName = "agtp.agp.v1.AgpService"

// Service is a running policysvc.
type Service struct {
	base *kit.Base
	srv  *server.Server
	task *tasks.Server
	agp  *agp.Server
	// audit is the connection to auditsvc the changes are signed over.
	audit *grpc.ClientConn
}

// New provisions policysvc from a configuration; nothing listens on failure.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policysvc config: %w", err)
	}
	opts := cfg.Options
	if cfg.OptionsFile != "" {
		b, err := os.ReadFile(cfg.OptionsFile)
		if err != nil {
			return nil, fmt.Errorf("policysvc options: %w", err)
		}
		opts = server.Options{}
		if err := json.Unmarshal(b, &opts); err != nil {
			return nil, fmt.Errorf("policysvc options %s: %w", cfg.OptionsFile, err)
		}
	}
	base, err := kit.NewBase(ctx, cfg.Common)
	if err != nil {
		return nil, err
	}
	// Every setting looser than the safe one says so once at start-up.
	for _, w := range looser(cfg, opts) {
		base.Log.Warn(w)
	}
	srv, err := server.New(base.Redis, base.Log, opts)
	if err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("policysvc: %w", err)
	}
	tasksrv, err := tasks.New(base.Redis, base.Log, cfg.Tasks)
	if err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("policysvc tasks: %w", err)
	}
	policyv1.RegisterPolicyServiceServer(base.Server.GRPC(), srv)
	base.Server.Register(HealthName, policyv1.RegisterPolicyServiceHandler, PolicyAccess())
	taskv1.RegisterTaskServiceServer(base.Server.GRPC(), tasksrv)
	base.Server.Register(TaskHealthName, taskv1.RegisterTaskServiceHandler, TaskAccess())
	agpsrv, err := agp.New(base.Redis, base.Log, cfg.AGP)
	if err != nil {
		_ = base.Close(ctx)
		return nil, fmt.Errorf("policysvc agp: %w", err)
	}
	// Resolutions and key revocations are signed into the agents'
	// lifecycle streams by auditsvc (changelog).
	audit, err := base.Server.Dial("auditsvc")
	if err != nil {
		_ = base.Close(ctx)
		return nil, err
	}
	changes := changelog.New(auditv1.NewAuditServiceClient(audit), 0)
	tasksrv.RecordChanges(changes)
	agpsrv.RecordChanges(changes)
	agpv1.RegisterAgpServiceServer(base.Server.GRPC(), agpsrv)
	base.Server.Register(AGPHealthName, agpv1.RegisterAgpServiceHandler, AGPAccess())
	return &Service{base: base, srv: srv, task: tasksrv, agp: agpsrv, audit: audit}, nil
}

// Run serves until ctx is done, then drains and releases everything.
func (s *Service) Run(ctx context.Context) error {
	err := s.base.Run(ctx, s.srv.Run, s.task.Run, s.task.FollowMonitors, s.agp.Run)
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
