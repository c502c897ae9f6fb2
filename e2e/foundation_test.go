package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
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

func TestRESTGatewayServesEveryAPIWithClientCertificates(t *testing.T) {
	c := Start(t, Options{})
	admin, err := tls.LoadX509KeyPair(c.PKI.Cert(devpki.Admin), c.PKI.Key(devpki.Admin))
	if err != nil {
		t.Fatal(err)
	}
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool(), Certificates: []tls.Certificate{admin},
	}}}
	withoutCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: c.Admin.Pool(),
	}}}
	cases := []struct {
		service, path, want string
	}{
		// The catalog's methods page (AIP-158): the floor's QUERY is on
		// the page of 1000 (the maximum), and the first page of 2 names the
		// next one.
		{"catalogsvc", "/v1/catalog/methods?page_size=1000", `"QUERY"`},
		{"catalogsvc", "/v1/catalog/methods?page_size=2", `"nextPageToken":"ey`},
		{"catalogsvc", "/v1/catalog/manifest", `"manifestJson"`},
		{"auditsvc", "/v1/audit/jwks", `"jwksJson"`},
		{"identitysvc", "/v1/identity/agents", `{`},
		// Read-only RPCs are GET with their request in the query
		// (AIP-131, AIP-132, AIP-136), nested fields by dotted name.
		{"catalogsvc", "/v1/catalog/routes:resolve?method=FROBNICATE&path=/orders", `"outcome":"ROUTE_OUTCOME_METHOD_VIOLATION"`},
		{"rcnssvc", "/v1/rcns/patterns?page_size=1", `"nextPageToken":"ey`},
		{"rcnssvc", "/v1/rcns/recipes/order-digest", `"recipeVersion"`},
		{"rcnssvc", "/v1/rcns/contracts?page_size=5&caller.agent_id=" + strings.Repeat("a1", 32), `{`},
		{"rcnssvc", "/v1/rcns/contracts/no-such-contract", `"status":404`},
		{"rcnssvc", "/v1/rcns/contracts:lookup?method=SUMMARIZE&path=/order-digest", `{`},
	}
	for _, tc := range cases {
		t.Run(tc.service+tc.path, func(t *testing.T) {
			url := "https://" + c.Procs[tc.service].HTTPAddr + tc.path
			resp, err := withCert.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
				t.Fatalf("GET %s = %d %s; want 200 containing %s", tc.path, resp.StatusCode, body, tc.want)
			}
			if resp, err := withoutCert.Get(url); err == nil {
				resp.Body.Close()
				t.Fatalf("GET %s without a client certificate = %d; want the TLS handshake refused", tc.path, resp.StatusCode)
			}
		})
	}
}
