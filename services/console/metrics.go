package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agtpsuite/agtp/services/kit"
)

// maxScrape bounds one service's /metrics answer: a few hundred series
// are tens of KiB; a peer that sends more is not read further.
const maxScrape = 4 << 20

// The series the health page reads (docs/operations.md, "Metrics"):
// the front door counts AGTP requests by status, and every service's
// gRPC server counts calls (otelgrpc's duration histogram) by code.
const (
	agtpRequests = "agtp_server_requests_total"
	rpcPrefix    = "rpc_server_"
)

// serverFaults are the gRPC codes that count as the service failing, as
// 5xx statuses do for the front door; refusals of bad requests
// (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, ...) are the callers'.
var serverFaults = map[string]bool{
	"UNKNOWN": true, "DEADLINE_EXCEEDED": true, "UNIMPLEMENTED": true, "INTERNAL": true, "UNAVAILABLE": true, "DATA_LOSS": true,
	"2": true, "4": true, "12": true, "13": true, "14": true, "15": true,
}

// counts are one scrape's running totals.
type counts struct {
	at               time.Time
	requests, faults float64
}

// rates is what the health page shows for one service.
type rates struct {
	// Window is the time between the two scrapes the rates come from;
	// zero until there are two.
	Window           time.Duration
	Requests, Faults float64
	// Problem says why there are no rates.
	Problem string
}

// ErrorRatio is Faults over Requests, as a percentage.
func (r rates) ErrorRatio() string {
	if r.Requests == 0 {
		return "—"
	}
	return strconv.FormatFloat(100*r.Faults/r.Requests, 'f', 1, 64) + " %"
}

// sampler scrapes each service's Prometheus endpoint (GET /metrics on its
// admin listener, AGTP_PROMETHEUS=on) every interval and keeps the last
// two scrapes, so a rate is the change between them: the same figure in
// make run and deployed, with no Prometheus server in between. It reads
// with the console's own certificate, which the endpoints admit as an
// operator's.
type sampler struct {
	addrs    map[string]string
	interval time.Duration
	hc       map[string]*http.Client
	mu       sync.Mutex
	prev     map[string]counts
	last     map[string]counts
	problem  map[string]string
}

func newSampler(addrs map[string]string, interval time.Duration, m *kit.MTLS) *sampler {
	s := &sampler{addrs: addrs, interval: interval, hc: map[string]*http.Client{},
		prev: map[string]counts{}, last: map[string]counts{}, problem: map[string]string{}}
	for name := range addrs {
		// The admin listener presents the service's own certificate and
		// speaks HTTP/2 or HTTP/1.1 (the suite's client config offers h2
		// only, for gRPC).
		tc := m.ClientConfig(name)
		tc.NextProtos = nil
		s.hc[name] = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	return s
}

// run scrapes until ctx is done.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.scrapeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) scrapeAll(ctx context.Context) {
	for name, addr := range s.addrs {
		c, err := s.scrape(ctx, name, addr)
		s.mu.Lock()
		if err != nil {
			s.problem[name] = err.Error()
		} else {
			delete(s.problem, name)
			if old, ok := s.last[name]; ok {
				s.prev[name] = old
			}
			s.last[name] = c
		}
		s.mu.Unlock()
	}
}

func (s *sampler) scrape(ctx context.Context, name, addr string) (counts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+kit.MetricsPath, nil)
	if err != nil {
		return counts{}, err
	}
	resp, err := s.hc[name].Do(req)
	if err != nil {
		return counts{}, fmt.Errorf("metrics unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counts{}, fmt.Errorf("metrics answered %d (is AGTP_PROMETHEUS on?)", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrape))
	if err != nil {
		return counts{}, fmt.Errorf("metrics do not parse: %w", err)
	}
	c := countRequests(fams)
	c.at = time.Now()
	return c, nil
}

// countRequests totals the requests a service answered and those it
// failed: the front door's AGTP requests (5xx statuses failed) when it
// has them, else its gRPC server's calls (server-fault codes failed).
func countRequests(fams map[string]*dto.MetricFamily) counts {
	var c counts
	if f := fams[agtpRequests]; f != nil {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue()
			c.requests += v
			if st, _ := strconv.Atoi(label(m, "agtp_status")); st >= 500 {
				c.faults += v
			}
		}
		return c
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, rpcPrefix) || f.GetType() != dto.MetricType_HISTOGRAM || !strings.Contains(name, "duration") {
			continue
		}
		for _, m := range f.GetMetric() {
			v := float64(m.GetHistogram().GetSampleCount())
			c.requests += v
			code := label(m, "rpc_response_status_code")
			if code == "" {
				code = label(m, "rpc_grpc_status_code")
			}
			if serverFaults[code] {
				c.faults += v
			}
		}
		// One duration histogram counts every call once.
		break
	}
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// rates returns a service's request and fault rates between its last two
// scrapes.
func (s *sampler) rates(name string) rates {
	if s == nil || s.addrs[name] == "" {
		return rates{Problem: "no metrics address configured (AGTP_CONSOLE_METRICS)"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.problem[name]; p != "" {
		return rates{Problem: p}
	}
	prev, ok1 := s.prev[name]
	last, ok2 := s.last[name]
	if !ok1 || !ok2 {
		return rates{Problem: "waiting for a second scrape"}
	}
	dt := last.at.Sub(prev.at)
	if dt <= 0 || last.requests < prev.requests {
		// A counter that went down: the service restarted in between.
		return rates{Problem: "the service restarted; waiting for the next scrape"}
	}
	return rates{Window: dt.Round(time.Second), Requests: (last.requests - prev.requests) / dt.Seconds(), Faults: (last.faults - prev.faults) / dt.Seconds()}
}
