package cli

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// testCommon points a service's common settings at the test PKI and
// redis-server, with its gRPC API and gateway on free loopback ports.
func testCommon(c *kit.Common, pki devpki.Layout, rds *testkit.Redis) {
	c.CAFile, c.CertFile, c.KeyFile = pki.CA(), pki.Cert(c.Name), pki.Key(c.Name)
	c.SigningKeyFile = pki.SigningKey()
	c.RedisURL = rds.URL()
	c.LogLevel = "error"
	c.GRPCAddr, c.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
}

// runService runs a provisioned service until the test ends; cancel is
// the context its New got, which stops it.
func runService(t *testing.T, name string, run func(context.Context) error, ctx context.Context, cancel context.CancelFunc) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// waitServing waits until the service behind conn answers SERVING.
func waitServing(t *testing.T, name string, conn *grpc.ClientConn) {
	t.Helper()
	health := grpc_health_v1.NewHealthClient(conn)
	testkit.WaitFor(t, 20*time.Second, name+" SERVING", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING
	})
}
