package kit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/agtpsuite/agtp/services/access"
)

// The optional Prometheus scrape endpoint (Common.Telemetry.Prometheus,
// AGTP_PROMETHEUS=on): the same OpenTelemetry metrics the OTLP exporter
// sends, kept for a scrape and served as GET /metrics on the service's
// admin listener (its REST gateway), behind the same mTLS. Only operator
// and internal-system identities may read it: the metrics name paths,
// methods and rejection reasons, which are the operator's business
// (docs/operations.md#metrics).

// MetricsPath is where the admin listener serves the Prometheus metrics.
const MetricsPath = "/metrics"

// newPrometheus is a metric reader for a Prometheus scrape and the handler
// that serves it. Each service has its own registry, so that the six
// services of one process (make run) each serve only their own metrics,
// plus the Go runtime and process collectors of their process.
func newPrometheus() (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, fmt.Errorf("prometheus go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, fmt.Errorf("prometheus process collector: %w", err)
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A scrape that finds one collector failing still gets the rest.
		ErrorHandling: promhttp.ContinueOnError,
		// A stuck collection answers 503 rather than piling up scrapes.
		Timeout:             10 * time.Second,
		MaxRequestsInFlight: 4,
	})
	return exp, h, nil
}

// metricViews adjust the buckets of histograms the suite does not create
// itself. redisotel measures how long a command holds a connection in
// milliseconds with the SDK's default buckets (5 ms and up), which would
// put every healthy Redis command in the first bucket.
var metricViews = []sdkmetric.View{
	sdkmetric.NewView(sdkmetric.Instrument{Name: "db.client.connections.use_time"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
			Boundaries: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500},
		}}),
}

// metricsReaders may read the metrics.
var metricsReaders = access.Rule{Operators: true, Systems: true}

// serveMetrics routes MetricsPath to the Prometheus handler, for operator
// and internal-system identities; every other path goes to next.
func serveMetrics(next, metrics http.Handler, rec *access.Recognizer) http.Handler {
	if metrics == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != MetricsPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		id := rec.IdentifyRequest(r)
		if !metricsReaders.Allows(id) {
			http.Error(w, fmt.Sprintf("%s may not read the metrics: operator and system identities may (docs/operations.md#metrics)", id), http.StatusForbidden)
			return
		}
		metrics.ServeHTTP(w, r)
	})
}
