package pipeline

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics are the pipeline's request metrics: requests by method and
// status, latency, and rejections by reason.
type metrics struct {
	requests   metric.Int64Counter
	latency    metric.Float64Histogram
	rejections metric.Int64Counter
}

func newMetrics(m metric.Meter) (*metrics, error) {
	requests, err := m.Int64Counter("agtp.server.requests", metric.WithDescription("AGTP requests served, by method and status"))
	if err != nil {
		return nil, err
	}
	latency, err := m.Float64Histogram("agtp.server.duration", metric.WithUnit("s"), metric.WithDescription("AGTP request latency"))
	if err != nil {
		return nil, err
	}
	rejections, err := m.Int64Counter("agtp.server.rejections", metric.WithDescription("AGTP error responses, by reason"))
	if err != nil {
		return nil, err
	}
	return &metrics{requests: requests, latency: latency, rejections: rejections}, nil
}

func (m *metrics) record(x *exchange, status int) {
	ctx := context.WithoutCancel(x.ctx)
	attrs := metric.WithAttributes(attribute.String("agtp.method", x.req.Method), attribute.String("agtp.status", strconv.Itoa(status)))
	m.requests.Add(ctx, 1, attrs)
	m.latency.Record(ctx, time.Since(x.start).Seconds(), attrs)
	if x.rejection != "" {
		m.rejections.Add(ctx, 1, metric.WithAttributes(attribute.String("agtp.reason", x.rejection)))
	}
}
