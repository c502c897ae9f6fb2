package kit_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// The Prometheus endpoint is on the gateway's mTLS listener and answers
// operator and system identities only; it carries the resource.
func TestPrometheusEndpointIsForOperatorsAndSystems(t *testing.T) {
	b, _ := startServerWith(t, "catalogsvc", func(c *kit.Common) {
		c.Telemetry.Prometheus = true
		c.Telemetry.InstanceID = "catalogsvc-0"
	})
	pki := testkit.PKI(t)
	get := func(cert, method string) (int, string) {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(pki.Cert(cert), pki.Key(cert))
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: b.MTLS.Pool(), ServerName: "catalogsvc", Certificates: []tls.Certificate{pair},
		}}}
		defer hc.CloseIdleConnections()
		req, err := http.NewRequest(method, "https://"+b.Server.HTTPAddr()+kit.MetricsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		// The gateway starts serving with Run, a moment after start-up.
		testkit.WaitFor(t, 10*time.Second, "the gateway", func() bool {
			resp, err = hc.Do(req)
			return err == nil
		})
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		name, cert, method string
		status             int
		body               string
	}{
		{"operator", devpki.Admin, "GET", http.StatusOK, `service_instance_id="catalogsvc-0"`},
		{"internal system", devpki.InternalSystem, "GET", http.StatusOK, "service_version="},
		{"a service", "policysvc", "GET", http.StatusForbidden, "service/policysvc may not read the metrics"},
		{"not a read", devpki.Admin, "POST", http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := get(tc.cert, tc.method)
			if status != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("%s /metrics as %s = %d %.300q, want %d with %q", tc.method, tc.cert, status, body, tc.status, tc.body)
			}
		})
	}
}
