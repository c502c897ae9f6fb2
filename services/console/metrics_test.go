package console

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agtpsuite/agtp/services/devpki"
	"github.com/agtpsuite/agtp/services/kit"
	"github.com/agtpsuite/agtp/services/testkit"
)

// TestCountRequests pins what counts as a request and as a failure: the
// front door's AGTP requests with 5xx statuses failed, or a service's
// gRPC calls with server-fault codes failed (refusals are the callers').
func TestCountRequests(t *testing.T) {
	for _, tc := range []struct {
		name, text       string
		requests, faults float64
	}{
		{"front door by AGTP status", `
# TYPE agtp_server_requests_total counter
agtp_server_requests_total{agtp_method="QUERY",agtp_status="200"} 7
agtp_server_requests_total{agtp_method="QUERY",agtp_status="404"} 2
agtp_server_requests_total{agtp_method="EXECUTE",agtp_status="503"} 1
`, 10, 1},
		{"gRPC service by code", `
# TYPE rpc_server_call_duration_seconds histogram
rpc_server_call_duration_seconds_bucket{rpc_method="A",rpc_response_status_code="OK",le="+Inf"} 5
rpc_server_call_duration_seconds_sum{rpc_method="A",rpc_response_status_code="OK"} 0.1
rpc_server_call_duration_seconds_count{rpc_method="A",rpc_response_status_code="OK"} 5
rpc_server_call_duration_seconds_bucket{rpc_method="A",rpc_response_status_code="NOT_FOUND",le="+Inf"} 3
rpc_server_call_duration_seconds_sum{rpc_method="A",rpc_response_status_code="NOT_FOUND"} 0.1
rpc_server_call_duration_seconds_count{rpc_method="A",rpc_response_status_code="NOT_FOUND"} 3
rpc_server_call_duration_seconds_bucket{rpc_method="B",rpc_response_status_code="UNAVAILABLE",le="+Inf"} 2
rpc_server_call_duration_seconds_sum{rpc_method="B",rpc_response_status_code="UNAVAILABLE"} 0.1
rpc_server_call_duration_seconds_count{rpc_method="B",rpc_response_status_code="UNAVAILABLE"} 2
`, 10, 2},
		{"no traffic yet", "# TYPE go_goroutines gauge\ngo_goroutines 9\n", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if c := countRequests(fams); c.requests != tc.requests || c.faults != tc.faults {
				t.Fatalf("counted %v requests, %v failed; want %v, %v", c.requests, c.faults, tc.requests, tc.faults)
			}
		})
	}
}

// TestRatesBetweenScrapes pins the arithmetic and the cases without a
// rate: one scrape only, a counter that went down (a restart), a scrape
// that failed, a service without a metrics address.
func TestRatesBetweenScrapes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &sampler{addrs: map[string]string{"a": "x", "b": "x", "c": "x", "d": "x"},
		prev:    map[string]counts{"a": {at: t0, requests: 100, faults: 1}, "b": {at: t0, requests: 100}},
		last:    map[string]counts{"a": {at: t0.Add(10 * time.Second), requests: 150, faults: 6}, "b": {at: t0.Add(10 * time.Second), requests: 3}, "c": {at: t0}},
		problem: map[string]string{"d": "metrics answered 404"}}
	if r := s.rates("a"); r.Problem != "" || r.Requests != 5 || r.Faults != 0.5 || r.Window != 10*time.Second || r.ErrorRatio() != "10.0 %" {
		t.Fatalf("rates = %+v (%s)", r, r.ErrorRatio())
	}
	for name, want := range map[string]string{"b": "restarted", "c": "second scrape", "d": "404", "e": "no metrics address"} {
		if r := s.rates(name); !strings.Contains(r.Problem, want) {
			t.Errorf("%s: problem %q, want it to say %q", name, r.Problem, want)
		}
	}
}

// TestSamplerScrapesOverMutualTLS scrapes a real HTTPS /metrics that
// presents a service's certificate and wants the console's, as a
// service's admin listener does, and keeps the last two scrapes.
func TestSamplerScrapesOverMutualTLS(t *testing.T) {
	pki := testkit.PKI(t)
	m, err := kit.LoadMTLS(pki.CA(), pki.Cert(devpki.Console), pki.Key(devpki.Console))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := kit.LoadMTLS(pki.CA(), pki.Cert("catalogsvc"), pki.Key("catalogsvc"))
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != kit.MetricsPath || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		n := served.Add(1)
		_, _ = w.Write([]byte("# TYPE agtp_server_requests_total counter\nagtp_server_requests_total{agtp_status=\"200\"} " + strings.Repeat("1", int(n)) + "\n"))
	}), TLSConfig: svc.ServerConfig()}
	// As a service's admin listener (the gateway) offers them.
	srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	go func() { _ = srv.Serve(tls.NewListener(lis, srv.TLSConfig)) }()
	t.Cleanup(func() { _ = srv.Close() })

	s := newSampler(map[string]string{"catalogsvc": lis.Addr().String(), "auditsvc": "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))}, time.Second, m)
	s.scrapeAll(context.Background())
	s.scrapeAll(context.Background())
	if s.prev["catalogsvc"].requests != 1 || s.last["catalogsvc"].requests != 11 {
		t.Fatalf("scrapes kept %v then %v, want 1 then 11", s.prev["catalogsvc"], s.last["catalogsvc"])
	}
	if r := s.rates("catalogsvc"); r.Problem != "" || r.Requests <= 0 {
		t.Fatalf("rates = %+v", r)
	}
	if r := s.rates("auditsvc"); !strings.Contains(r.Problem, "unreachable") {
		t.Fatalf("a service not listening: %+v", r)
	}
}
