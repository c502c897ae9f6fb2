package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agtpsuite/agtp/services/kit"
)

// HealthcheckCommand is the first argument that turns a service binary into
// its own health probe: `<service> healthcheck` dials the service's gRPC
// address with the service's own certificate and calls grpc.health.v1
// Check. Kubernetes' native gRPC probe cannot present a client certificate,
// and every service refuses callers without one, so the probe is the binary
// itself (an exec probe; distroless images have no shell or other tools).
const HealthcheckCommand = "healthcheck"

// Healthcheck exit statuses.
const (
	healthOK       = 0
	healthFailed   = 1
	healthBadUsage = 2
)

// healthcheck runs the probe. It reads the same environment and flags as
// the service (so an exec probe inherits the container's configuration),
// plus -liveness, -check-timeout and -check-service. It does not validate
// the whole configuration: a probe needs only the gRPC address and the mTLS
// files.
func healthcheck(name string, cfg Config, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	fs := flag.NewFlagSet(name+" "+HealthcheckCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := cfg.ApplyEnv(lookup); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", name, HealthcheckCommand, err)
		return healthBadUsage
	}
	cfg.BindFlags(fs)
	liveness := fs.Bool("liveness", false, "succeed when the server answers at all, SERVING or not (for liveness probes)")
	timeout := fs.Duration("check-timeout", 3*time.Second, "deadline for the whole check")
	service := fs.String("check-service", "", "health service name to check (default: the whole server)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return healthOK
		}
		return healthBadUsage
	}
	value := func(flagName string) string {
		if f := fs.Lookup(flagName); f != nil {
			return f.Value.String()
		}
		return ""
	}
	addr, err := loopbackAddr(value("grpc-addr"))
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", name, HealthcheckCommand, err)
		return healthBadUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := checkHealth(ctx, name, addr, value("ca"), value("cert"), value("key"), *service)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %s: %v\n", name, HealthcheckCommand, addr, err)
		return healthFailed
	}
	if st != healthpb.HealthCheckResponse_SERVING && !*liveness {
		fmt.Fprintf(stderr, "%s %s: %s: %s\n", name, HealthcheckCommand, addr, st)
		return healthFailed
	}
	return healthOK
}

// checkHealth calls grpc.health.v1 Check over mTLS; serverName is the
// service's own name, which its certificate carries as a DNS SAN.
func checkHealth(ctx context.Context, serverName, addr, caFile, certFile, keyFile, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	m, err := kit.LoadMTLS(caFile, certFile, keyFile)
	if err != nil {
		return 0, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(m.ClientConfig(serverName))))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

// loopbackAddr turns a listen address into one to dial from the same host
// (or pod): an empty or unspecified host becomes the loopback address of
// the same family.
func loopbackAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("grpc address %q: %w", listen, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip != nil && ip.Equal(net.IPv4zero):
		host = "127.0.0.1"
	case ip != nil && ip.Equal(net.IPv6unspecified):
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
