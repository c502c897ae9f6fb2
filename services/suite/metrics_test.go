package suite

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agtpsuite/agtp/services/agtp/client"
	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/keyfile"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

var updateMetrics = flag.Bool("update-metrics", false, "rewrite deploy/observability/metrics.txt from the scrape")

// metricsList is the committed list of exported series names that the
// shipped dashboard and alerts may use (make deploy-check checks them
// against it).
var metricsList = filepath.Join("..", "..", "deploy", "observability", "metrics.txt")

// With AGTP_PROMETHEUS=on every service answers GET /metrics on its admin
// listener, to operator and system identities only. After real AGTP and
// AGP requests, the front door's scrape has the request counter and the
// latency histogram by method, path template and status, the error
// responses by reason and the cache lookups by cache and result; auditsvc's
// has the Redis client's metrics and the append latency and batch sizes;
// every scrape has the resource (service.version, service.instance.id).
// Together the scrapes hold every name of metrics.txt.
func TestPrometheusEndpointServesTheSuiteMetrics(t *testing.T) {
	s := startTestSuite(t, Config{LookupEnv: mapEnv(map[string]string{
		"AGTP_PROMETHEUS":         "on",
		"AGTP_AUDIT_ARCHIVE_DIR":  t.TempDir(),
		"AGTP_AGP_EXECUTE_POLICY": "confirm",
	})})
	ctx := context.Background()
	l := s.Layout()

	// Real requests: AGP calls with the demo agent's key (the key cache:
	// a miss, then hits) and AGTP requests that match no endpoint.
	key, err := os.ReadFile(filepath.Join(s.StateDir(), "demo-agent", "agp-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := keyfile.CertPool(l.CA())
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	agp := func() string {
		body := `{"businessId":"orders","request":{"method":"CREATE","path":"/orders","parameters":{"lines":[{"sku":"widget","quantity":1}]}}}`
		req, err := http.NewRequestWithContext(ctx, "POST", "https://"+s.HTTPSAddr()+"/agp/execute", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", strings.TrimSpace(string(key)))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testkit.WaitFor(t, 30*time.Second, "the demo business to be served", func() bool {
		return !strings.Contains(agp(), "BUSINESS_NOT_FOUND")
	})
	// The key cache keeps keys only while its watch of policysvc is up,
	// which a loaded machine may take a while to establish: call until a
	// lookup is a hit.
	admin := scraper(t, l, devpki.Admin)
	scrape := func(name string) map[string]*dto.MetricFamily {
		status, body := admin(name, s.Gateways[name])
		if status != http.StatusOK {
			t.Fatalf("%s /metrics = %d %s", name, status, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s /metrics does not parse: %v", name, err)
		}
		return fams
	}
	testkit.WaitFor(t, 30*time.Second, "an AGP key served from the cache", func() bool {
		agp()
		return value(scrape("frontdoor"), "agtp_frontdoor_cache_lookups_total", map[string]string{"agtp_cache": "agp_keys", "agtp_result": "hit"}) >= 1
	})
	ac, err := client.New(client.Options{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	for range 2 {
		resp, err := ac.Send(ctx, "QUERY", "agtp://"+s.AGTPAddr()+"/no/such/endpoint", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status < 400 {
			t.Fatalf("QUERY of a missing endpoint answered %d", resp.Status)
		}
	}

	families := map[string]map[string]*dto.MetricFamily{}
	for _, name := range []string{"frontdoor", "catalogsvc", "policysvc", "rcnssvc", "identitysvc", "auditsvc"} {
		if s.Gateways[name] == "" {
			t.Fatalf("%s has no admin listener", name)
		}
		fams := scrape(name)
		families[name] = fams
		info := fams["target_info"]
		if info == nil || len(info.GetMetric()) != 1 {
			t.Fatalf("%s has no target_info", name)
		}
		labels := labelsOf(info.GetMetric()[0])
		if labels["service_name"] != name || labels["service_version"] == "" || len(labels["service_instance_id"]) != 36 {
			t.Errorf("%s resource = %v, want its service.name, a service.version and a UUID service.instance.id", name, labels)
		}
	}

	fd := families["frontdoor"]
	requests := series(fd, "agtp_server_requests_total")
	if !slices.ContainsFunc(requests, func(m map[string]string) bool {
		return m["agtp_method"] != "" && m["agtp_path_template"] != "" && m["agtp_status"] != ""
	}) {
		t.Errorf("no request series with method, path template and status: %v", requests)
	}
	if !slices.ContainsFunc(requests, func(m map[string]string) bool {
		return m["agtp_method"] == "QUERY" && m["agtp_path_template"] == "" && m["agtp_status"] >= "400"
	}) {
		t.Errorf("no request series for the unmatched QUERY: %v", requests)
	}
	if h := fd["agtp_server_request_duration_seconds"]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM || len(h.GetMetric()[0].GetHistogram().GetBucket()) < 10 {
		t.Errorf("the latency histogram is missing or has few buckets: %v", h)
	}
	if got := series(fd, "agtp_server_rejections_total"); len(got) == 0 || got[0]["agtp_reason"] == "" {
		t.Errorf("error responses by reason: %v", got)
	}
	hits := value(fd, "agtp_frontdoor_cache_lookups_total", map[string]string{"agtp_cache": "agp_keys", "agtp_result": "hit"})
	misses := value(fd, "agtp_frontdoor_cache_lookups_total", map[string]string{"agtp_cache": "agp_keys", "agtp_result": "miss"})
	if hits < 1 || misses < 1 {
		t.Errorf("AGP key cache lookups: %v hits, %v misses; want both", hits, misses)
	}
	if len(series(fd, "agtp_frontdoor_cache_lookups_total")) < 4 {
		t.Errorf("cache lookups by cache and result: %v", series(fd, "agtp_frontdoor_cache_lookups_total"))
	}
	if got := series(fd, "agtp_certificate_not_after_seconds"); len(got) != 2 {
		t.Errorf("front door certificates: %v, want service and agtp_server", got)
	}

	audit := families["auditsvc"]
	for _, name := range []string{"db_client_connections_use_time_milliseconds", "agtp_audit_append_duration_seconds", "agtp_audit_append_batch_size"} {
		if h := audit[name]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM || h.GetMetric()[0].GetHistogram().GetSampleCount() == 0 {
			t.Errorf("auditsvc %s: missing or empty", name)
		}
	}

	// Every name the dashboard and alerts may use is exported.
	seen := map[string]bool{}
	for _, fams := range families {
		for name, f := range fams {
			for _, n := range seriesNames(name, f.GetType()) {
				seen[n] = true
			}
		}
	}
	want, err := os.ReadFile(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	if *updateMetrics {
		writeMetricsList(t, string(want), seen)
		return
	}
	for _, line := range strings.Split(string(want), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") && !seen[line] {
			t.Errorf("metrics.txt lists %s, which no service exports", line)
		}
	}

	// A suite service's certificate may not read the metrics.
	if status, _ := scraper(t, l, "policysvc")("frontdoor", s.Gateways["frontdoor"]); status != http.StatusForbidden {
		t.Errorf("a service certificate scraping /metrics got %d, want 403", status)
	}
}

// scraper returns a GET of /metrics on a service's admin listener with the
// named certificate of the state directory.
func scraper(t *testing.T, l devpki.Layout, cert string) func(service, addr string) (int, string) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(l.Cert(cert), l.Key(cert))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := keyfile.CertPool(l.CA())
	if err != nil {
		t.Fatal(err)
	}
	return func(service, addr string) (int, string) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: service, Certificates: []tls.Certificate{pair},
		}}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + addr + kit.MetricsPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func series(fams map[string]*dto.MetricFamily, name string) []map[string]string {
	var out []map[string]string
	for _, m := range fams[name].GetMetric() {
		out = append(out, labelsOf(m))
	}
	return out
}

// value sums the counter series of name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		l := labelsOf(m)
		ok := true
		for k, v := range want {
			ok = ok && l[k] == v
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// seriesNames are the names a family's samples carry in the text format.
func seriesNames(name string, typ dto.MetricType) []string {
	switch typ {
	case dto.MetricType_HISTOGRAM:
		return []string{name + "_bucket", name + "_count", name + "_sum"}
	case dto.MetricType_SUMMARY:
		return []string{name, name + "_count", name + "_sum"}
	}
	return []string{name}
}

// writeMetricsList keeps the list's comment header and writes the names
// of the suite's own metrics and the Redis client's (not the Go runtime's,
// the process's or the gRPC instrumentation's, which are not the suite's
// to promise).
func writeMetricsList(t *testing.T, old string, seen map[string]bool) {
	var header []string
	for _, line := range strings.Split(old, "\n") {
		if strings.HasPrefix(line, "#") {
			header = append(header, line)
		}
	}
	var names []string
	for n := range seen {
		if strings.HasPrefix(n, "agtp_") || strings.HasPrefix(n, "db_client_") || n == "target_info" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := strings.Join(header, "\n") + "\n" + strings.Join(names, "\n") + "\n"
	if err := os.WriteFile(metricsList, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Println("wrote", metricsList)
}
