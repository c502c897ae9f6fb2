package command

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// probeTarget runs a kit server named catalogsvc, presenting the
// certificate of certName, that turns SERVING when ready is closed.
func probeTarget(t *testing.T, listen, certName string) (addr string, ready chan struct{}) {
	t.Helper()
	pki := testkit.PKI(t)
	m, err := kit.LoadMTLS(pki.CA(), pki.Cert(certName), pki.Key(certName))
	if err != nil {
		t.Fatal(err)
	}
	tel, err := kit.NewTelemetry(context.Background(), "catalogsvc", kit.TelemetryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := kit.DefaultCommon("catalogsvc", listen, "")
	srv, err := kit.NewServer(cfg, kit.Deps{Logger: slog.New(slog.DiscardHandler), MTLS: m, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	ready = make(chan struct{})
	srv.ReadyWhen(ready)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.GRPCAddr(), ready
}

// env is the environment an exec probe inherits from the container.
func env(pki devpki.Layout, name, grpcAddr string) func(string) (string, bool) {
	m := map[string]string{
		"GRPC_ADDR":      grpcAddr,
		"AGTP_CA_FILE":   pki.CA(),
		"AGTP_CERT_FILE": pki.Cert(name),
		"AGTP_KEY_FILE":  pki.Key(name),
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func probe(t *testing.T, lookup func(string) (string, bool), args ...string) (int, string) {
	t.Helper()
	cfg := kit.DefaultCommon("catalogsvc", "127.0.0.1:7101", "")
	var stderr bytes.Buffer
	code := healthcheck("catalogsvc", &cfg, args, lookup, &stderr)
	return code, stderr.String()
}

func TestHealthcheckReportsTheServingStatusOverMutualTLS(t *testing.T) {
	pki := testkit.PKI(t)
	addr, ready := probeTarget(t, "127.0.0.1:0", "catalogsvc")
	lookup := env(pki, "catalogsvc", addr)

	// Up but not ready (e.g. waiting for its first snapshot): readiness
	// fails, liveness passes, so Kubernetes withholds traffic without
	// restarting the pod.
	testkit.WaitFor(t, 5*time.Second, "the server to answer", func() bool {
		code, _ := probe(t, lookup, "-liveness")
		return code == healthOK
	})
	if code, out := probe(t, lookup); code != healthFailed {
		t.Fatalf("readiness before SERVING = %d (%s), want %d", code, out, healthFailed)
	}
	close(ready)
	testkit.WaitFor(t, 5*time.Second, "readiness to pass once SERVING", func() bool {
		code, _ := probe(t, lookup)
		return code == healthOK
	})
	if code, out := probe(t, lookup, "-check-service", "no.such.Service"); code != healthFailed {
		t.Fatalf("an unknown health service = %d (%s), want %d", code, out, healthFailed)
	}
}

func TestHealthcheckDialsLoopbackForAnUnspecifiedListenAddress(t *testing.T) {
	pki := testkit.PKI(t)
	port := testkit.FreePort(t)
	_, ready := probeTarget(t, "0.0.0.0:"+strconv.Itoa(port), "catalogsvc")
	close(ready)
	for _, listen := range []string{"0.0.0.0:" + strconv.Itoa(port), ":" + strconv.Itoa(port)} {
		testkit.WaitFor(t, 5*time.Second, "a SERVING answer via "+listen, func() bool {
			code, _ := probe(t, env(pki, "catalogsvc", listen))
			return code == healthOK
		})
	}
}

func TestHealthcheckFlagsOverrideTheEnvironment(t *testing.T) {
	pki := testkit.PKI(t)
	addr, ready := probeTarget(t, "127.0.0.1:0", "catalogsvc")
	close(ready)
	dead := env(pki, "catalogsvc", "127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)))
	testkit.WaitFor(t, 5*time.Second, "the -grpc-addr flag to win over GRPC_ADDR", func() bool {
		code, _ := probe(t, dead, "-grpc-addr", addr)
		return code == healthOK
	})
}

func TestHealthcheckFails(t *testing.T) {
	pki := testkit.PKI(t)
	addr, ready := probeTarget(t, "127.0.0.1:0", "catalogsvc")
	close(ready)
	foreign, err := devpki.Ensure(t.TempDir(), "catalogsvc")
	if err != nil {
		t.Fatal(err)
	}
	impostor, impostorReady := probeTarget(t, "127.0.0.1:0", "intruder")
	close(impostorReady)
	nothing := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	cases := []struct {
		name   string
		lookup func(string) (string, bool)
		args   []string
		want   int
	}{
		{"nothing listens (readiness)", env(pki, "catalogsvc", nothing), nil, healthFailed},
		{"nothing listens (liveness)", env(pki, "catalogsvc", nothing), []string{"-liveness"}, healthFailed},
		{"a certificate from another CA is refused", env(foreign, "catalogsvc", addr), []string{"-liveness"}, healthFailed},
		{"any suite certificate may probe", env(pki, "intruder", addr), nil, healthOK},
		{"the server's certificate must name the service", env(pki, "catalogsvc", impostor), []string{"-liveness"}, healthFailed},
		{"missing certificate files", env(devpki.Layout{Dir: t.TempDir()}, "catalogsvc", addr), nil, healthFailed},
		{"a listen address without a port", env(pki, "catalogsvc", "localhost"), nil, healthBadUsage},
		{"an unknown flag", env(pki, "catalogsvc", addr), []string{"-no-such-flag"}, healthBadUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if code, out := probe(t, tc.lookup, append(tc.args, "-check-timeout", "2s")...); code != tc.want {
				t.Fatalf("exit %d (%s), want %d", code, out, tc.want)
			}
		})
	}
}
