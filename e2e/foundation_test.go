package e2e

import (
	"context"
	"crypto/tls"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/services/devpki"
)

func TestEveryServiceServesHealthOverMutualTLS(t *testing.T) {
	c := Start(t, Options{})
	for _, name := range devpki.ServiceNames {
		conn := c.Dial(t, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s health = %v, %v; want SERVING", name, resp.GetStatus(), err)
		}
	}

	t.Run("caller without a suite certificate is refused", func(t *testing.T) {
		for _, name := range devpki.ServiceNames {
			creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool(), ServerName: name})
			conn, err := grpc.NewClient(c.Procs[name].GRPCAddr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			conn.Close()
			if err == nil {
				t.Errorf("%s answered a caller without a client certificate", name)
			}
		}
	})

	t.Run("SIGTERM drains and exits 0", func(t *testing.T) {
		for _, name := range devpki.ServiceNames {
			if code := c.Stop(name, syscall.SIGTERM); code != 0 {
				t.Errorf("%s exit status after SIGTERM = %d, want 0\n%s", name, code, c.Procs[name].Logs())
			}
		}
	})
}
