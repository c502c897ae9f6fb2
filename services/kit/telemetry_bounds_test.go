package kit_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// A REST gateway caller picks the Host header of its requests. The
// gateway's http.server.* metrics must not take a label value from it:
// each distinct Host would be a new series held for the process's life.
// Here a service identity that may call nothing (every call 403/404) sends
// requests with distinct Host headers.
func TestGatewayMetricsSeriesNotMintedByHostHeader(t *testing.T) {
	b, _ := startServerWith(t, "catalogsvc", func(c *kit.Common) {
		c.Telemetry.Prometheus = true
	})
	pki := testkit.PKI(t)
	client := func(cert string) *http.Client {
		pair, err := tls.LoadX509KeyPair(pki.Cert(cert), pki.Key(cert))
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: b.MTLS.Pool(), ServerName: "catalogsvc", Certificates: []tls.Certificate{pair},
		}}}
	}
	peer := client("policysvc")
	defer peer.CloseIdleConnections()
	const n = 50
	for i := 0; i < n; i++ {
		req, err := http.NewRequest("GET", "https://"+b.Server.HTTPAddr()+"/v1/nothing", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = fmt.Sprintf("minted-%d.example", i)
		var resp *http.Response
		testkit.WaitFor(t, 10*time.Second, "the gateway", func() bool {
			resp, err = peer.Do(req)
			return err == nil
		})
		resp.Body.Close()
	}
	admin := client(devpki.Admin)
	defer admin.CloseIdleConnections()
	resp, err := admin.Get("https://" + b.Server.HTTPAddr() + kit.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^http_server_request_duration_seconds_count\{[^}]*server_address="(minted-[0-9]+\.example)"`).FindAllStringSubmatch(string(body), -1) {
		seen[m[1]] = true
	}
	if len(seen) > 1 {
		t.Fatalf("%d requests with distinct Host headers made %d series of http_server_request_duration_seconds (label server_address from the Host header)", n, len(seen))
	}
}
