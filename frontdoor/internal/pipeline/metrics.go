package pipeline

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agtpsuite/agtp/services/agtp"
)

// metrics are the pipeline's request metrics, named like the HTTP server
// semantic conventions (http.server.request.duration): requests and
// latency by method, path template and status, and error responses by
// reason. The path template, not the path, keeps the series bounded: a
// request that matched no endpoint has an empty one.
type metrics struct {
	requests   metric.Int64Counter
	latency    metric.Float64Histogram
	rejections metric.Int64Counter
	// sets holds the attribute set of each series, built on its first
	// request: a set sorts and copies its attributes, which would
	// otherwise be paid on every response. The series are bounded
	// (methods and templates of the catalog, statuses, reason tokens),
	// and so is the cache, in case a handler mints reasons.
	sets  sync.Map // seriesKey -> metric.MeasurementOption
	nsets atomic.Int64
}

// maxSeriesSets bounds the cached attribute sets; series beyond it are
// built per response.
const maxSeriesSets = 4096

// seriesKey names one series: a request series (reason empty) or a
// rejection series (method and template empty).
type seriesKey struct {
	method, tmpl, reason string
	status               int
}

// latencyBuckets span a cached answer (about a millisecond) to the
// default request timeout (15 s).
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15}

func newMetrics(m metric.Meter) (*metrics, error) {
	requests, err := m.Int64Counter("agtp.server.requests", metric.WithUnit("{request}"),
		metric.WithDescription("AGTP requests answered, by method, path template and status"))
	if err != nil {
		return nil, err
	}
	latency, err := m.Float64Histogram("agtp.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("AGTP request latency, from the request read to the response stamped, by method, path template and status"),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err != nil {
		return nil, err
	}
	rejections, err := m.Int64Counter("agtp.server.rejections", metric.WithUnit("{response}"),
		metric.WithDescription("AGTP error responses, by reason and status"))
	if err != nil {
		return nil, err
	}
	return &metrics{requests: requests, latency: latency, rejections: rejections}, nil
}

// otherMethod stands for every method token that names no endpoint and no
// floor method.
const otherMethod = "_OTHER"

func (m *metrics) record(x *exchange, status int) {
	ctx := context.WithoutCancel(x.ctx)
	// The method is the caller's token: one that is neither a floor
	// method nor an endpoint's counts as _OTHER, as the HTTP conventions
	// count unknown methods, so that a caller cannot mint series.
	method, tmpl := otherMethod, ""
	if x.matched && x.decision.Endpoint != nil {
		method, tmpl = x.req.Method, x.decision.Endpoint.Proto.GetPath()
	} else if agtp.IsFloorMethod(x.req.Method) {
		method = x.req.Method
	}
	attrs := m.series(seriesKey{method: method, tmpl: tmpl, status: status})
	m.requests.Add(ctx, 1, attrs)
	m.latency.Record(ctx, time.Since(x.start).Seconds(), attrs)
	if x.rejection != "" {
		m.rejections.Add(ctx, 1, m.series(seriesKey{reason: x.rejection, status: status}))
	}
}

// series returns the attribute set of k, building it once.
func (m *metrics) series(k seriesKey) metric.MeasurementOption {
	if o, ok := m.sets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	code := attribute.String("agtp.status", strconv.Itoa(k.status))
	var set attribute.Set
	if k.reason != "" {
		set = attribute.NewSet(attribute.String("agtp.reason", k.reason), code)
	} else {
		set = attribute.NewSet(attribute.String("agtp.method", k.method), attribute.String("agtp.path_template", k.tmpl), code)
	}
	o := metric.WithAttributeSet(set)
	if m.nsets.Load() >= maxSeriesSets {
		return o
	}
	if _, loaded := m.sets.LoadOrStore(k, o); !loaded {
		m.nsets.Add(1)
	}
	return o
}
