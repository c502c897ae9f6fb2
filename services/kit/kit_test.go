package kit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// startServer runs a kit server for the named service on loopback and
// returns it with its span recorder.
func startServer(t *testing.T, name string) (*kit.Base, *tracetest.SpanRecorder) {
	t.Helper()
	return startServerWith(t, name, nil)
}

// startServerWith is startServer with the configuration adjusted by edit.
func startServerWith(t *testing.T, name string, edit func(*kit.Common)) (*kit.Base, *tracetest.SpanRecorder) {
	t.Helper()
	b, rec := newBaseWith(t, name, edit)
	b.Server.Register("test.Service", nil, nil)
	runBase(t, b)
	return b, rec
}

// newBase is a kit base for the named service on loopback, not yet
// running, so that a test can register services on it first.
func newBase(t *testing.T, name string) *kit.Base {
	t.Helper()
	b, _ := newBaseWith(t, name, nil)
	return b
}

func newBaseWith(t *testing.T, name string, edit func(*kit.Common)) (*kit.Base, *tracetest.SpanRecorder) {
	t.Helper()
	pki := testkit.PKI(t)
	rec := tracetest.NewSpanRecorder()
	cfg := kit.DefaultCommon(name, "127.0.0.1:0", "127.0.0.1:0")
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert(name), pki.Key(name)
	cfg.Telemetry.SpanProcessors = []trace.SpanProcessor{rec}
	cfg.LogLevel = "error"
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := kit.NewBase(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, rec
}

// runBase runs b until the test ends.
func runBase(t *testing.T, b *kit.Base) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// dialCatalogsvc is a connection to b, a catalogsvc, from a policysvc
// with its own suite certificate; it is closed when the test ends.
func dialCatalogsvc(t *testing.T, b *kit.Base) *grpc.ClientConn {
	t.Helper()
	client, _ := startServer(t, "policysvc")
	conn, err := kit.DialService(b.Server.GRPCAddr(), "catalogsvc", client.MTLS, client.Telemetry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func checkHealth(ctx context.Context, conn *grpc.ClientConn, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func TestHealthServingOverMutualTLS(t *testing.T) {
	b, _ := startServer(t, "catalogsvc")
	conn := dialCatalogsvc(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	testkit.WaitFor(t, 5*time.Second, "SERVING", func() bool {
		st, err := checkHealth(ctx, conn, "test.Service")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	})
}

// foreignCertificate is a certificate from a CA that is not the suite's.
func foreignCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "catalogsvc"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"catalogsvc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestCallerWithoutSuiteCertificateIsRefused(t *testing.T) {
	b, _ := startServer(t, "catalogsvc")
	pool := b.MTLS.Pool()
	cases := []struct {
		name  string
		certs []tls.Certificate
	}{
		{"no client certificate", nil},
		{"certificate from another CA", []tls.Certificate{foreignCertificate(t)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "catalogsvc", Certificates: tc.certs})
			conn, err := grpc.NewClient(b.Server.GRPCAddr(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, err := checkHealth(ctx, conn, ""); err == nil {
				t.Fatal("health check succeeded without a suite client certificate")
			}
		})
	}
}

func TestTLS12IsRefused(t *testing.T) {
	b, _ := startServer(t, "catalogsvc")
	pki := testkit.PKI(t)
	cert, err := tls.LoadX509KeyPair(pki.Cert("policysvc"), pki.Key("policysvc"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", b.Server.GRPCAddr(), &tls.Config{
		MaxVersion: tls.VersionTLS12, RootCAs: b.MTLS.Pool(), ServerName: "catalogsvc", Certificates: []tls.Certificate{cert},
	})
	if err == nil {
		conn.Close()
		t.Fatal("TLS 1.2 handshake succeeded")
	}
}

func TestTraceContinuesAcrossServices(t *testing.T) {
	callee, calleeSpans := startServer(t, "auditsvc")
	caller, callerSpans := startServer(t, "identitysvc")
	conn, err := kit.DialService(callee.Server.GRPCAddr(), "auditsvc", caller.MTLS, caller.Telemetry)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, span := caller.Telemetry.TracerProvider.Tracer("test").Start(context.Background(), "outer")
	if _, err := checkHealth(ctx, conn, ""); err != nil {
		t.Fatal(err)
	}
	span.End()

	var clientSpanID, traceID string
	for _, s := range callerSpans.Ended() {
		if s.Name() == "grpc.health.v1.Health/Check" {
			clientSpanID, traceID = s.SpanContext().SpanID().String(), s.SpanContext().TraceID().String()
		}
	}
	if clientSpanID == "" {
		t.Fatal("caller recorded no client span")
	}
	testkit.WaitFor(t, 5*time.Second, "callee server span", func() bool {
		for _, s := range calleeSpans.Ended() {
			if s.Name() == "grpc.health.v1.Health/Check" && s.Parent().SpanID().String() == clientSpanID && s.SpanContext().TraceID().String() == traceID {
				return true
			}
		}
		return false
	})
}

func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := kit.Common{LogLevel: "loud", LogFormat: "xml", RedisRequired: true, Telemetry: kit.TelemetryConfig{Prometheus: true}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("empty configuration validated")
	}
	for _, want := range []string{"name is empty", "grpc address is empty", "mTLS is required", "redis url is empty", "log level", "log format", "shutdown timeout", "AGTP_PROMETHEUS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, missing %q", err, want)
		}
	}
}

// TestDrainEndsOpenStreams: a drain ends watch streams with Unavailable
// instead of waiting for them until the graceful-stop deadline, so a
// service with watchers stops at once and its watchers reconnect.
func TestDrainEndsOpenStreams(t *testing.T) {
	pki := testkit.PKI(t)
	cfg := kit.DefaultCommon("catalogsvc", "127.0.0.1:0", "")
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = pki.CA(), pki.Cert("catalogsvc"), pki.Key("catalogsvc")
	cfg.LogLevel = "error"
	// Far beyond the test's bounds: a drain that waited for the stream
	// would fail the test, not pass it slowly.
	cfg.ShutdownTimeout = time.Minute
	b, err := kit.NewBase(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer cancel()

	conn := dialCatalogsvc(t, b)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	stream, err := healthpb.NewHealthClient(conn).Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}

	cancel()
	for {
		_, err := stream.Recv()
		if err == nil {
			continue // NOT_SERVING, sent as the drain starts
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the stream ended with %v, want Unavailable", err)
		}
		break
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not stop after its only stream ended")
	}
}

// TestReflectionIsOffUnlessAsked: the reflection API lists every service
// and message, so it is served only when configured.
func TestReflectionIsOffUnlessAsked(t *testing.T) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"default", false}, {"grpc-reflection on", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := startServerWith(t, "catalogsvc", func(c *kit.Common) { c.Reflection = tc.on })
			// Reflection is for operators (docs/access.md).
			pki := testkit.PKI(t)
			operator, err := kit.LoadMTLS(pki.CA(), pki.Cert("admin"), pki.Key("admin"))
			if err != nil {
				t.Fatal(err)
			}
			conn, err := kit.DialService(b.Server.GRPCAddr(), "catalogsvc", operator, b.Telemetry)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
			var resp *reflectionpb.ServerReflectionResponse
			if err == nil {
				// A refused stream may fail the Send with io.EOF; the
				// status comes with Recv.
				_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
				resp, err = stream.Recv()
			}
			switch {
			case tc.on && (err != nil || len(resp.GetListServicesResponse().GetService()) == 0):
				t.Fatalf("reflection on: %v, %v", resp, err)
			case !tc.on && status.Code(err) != codes.Unimplemented:
				t.Fatalf("reflection off: got %v, %v; want Unimplemented", resp, err)
			}
		})
	}
}

// TestCABundleIsReloaded: a CA added to the suite bundle is trusted from
// the next handshake on, without a restart, so the suite CA can be
// rotated.
func TestCABundleIsReloaded(t *testing.T) {
	suite := testkit.PKI(t)
	other, err := devpki.Ensure(t.TempDir(), "policysvc")
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, read(suite.CA()), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := startServerWith(t, "catalogsvc", func(c *kit.Common) { c.CAFile = bundle })

	both := filepath.Join(t.TempDir(), "both.pem")
	if err := os.WriteFile(both, append(read(suite.CA()), read(other.CA())...), 0o644); err != nil {
		t.Fatal(err)
	}
	client, err := kit.LoadMTLS(both, other.Cert("policysvc"), other.Key("policysvc"))
	if err != nil {
		t.Fatal(err)
	}
	call := func() error {
		conn, err := kit.DialService(b.Server.GRPCAddr(), "catalogsvc", client, b.Telemetry)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = checkHealth(ctx, conn, "")
		return err
	}
	if err := call(); err == nil {
		t.Fatal("a certificate from a CA outside the bundle was accepted")
	}
	if err := os.WriteFile(bundle, append(read(suite.CA()), read(other.CA())...), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(bundle, later, later); err != nil {
		t.Fatal(err)
	}
	if err := call(); err != nil {
		t.Fatalf("after the CA was added to the bundle: %v", err)
	}
}
