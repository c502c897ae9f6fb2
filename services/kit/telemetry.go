package kit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TelemetryConfig says where traces and metrics go.
type TelemetryConfig struct {
	// OTLPExport turns on the OTLP/gRPC exporters. The command layer sets
	// it when OTEL_EXPORTER_OTLP_ENDPOINT is set; the exporters then read
	// the standard OTEL_EXPORTER_OTLP_* settings themselves.
	OTLPExport bool
	// SpanProcessors are added to the tracer provider (tests use an
	// in-memory recorder).
	SpanProcessors []sdktrace.SpanProcessor
	// Prometheus keeps the metrics for a Prometheus scrape as well: the
	// service's admin listener then answers GET /metrics (prometheus.go).
	Prometheus bool
	// InstanceID is the resource's service.instance.id; empty means a
	// random UUID per process (several replicas of one service are then
	// told apart, but not across restarts; set it to the pod's name to
	// keep the replica's name).
	InstanceID string
}

// Telemetry is one service's tracer and meter providers.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Recording is false when nothing receives spans or metrics; then the
	// gRPC and Redis instrumentation is left out of the hot path.
	Recording bool
	// tracing is true when spans are recorded (Redis commands are then
	// traced).
	tracing bool
	// metrics is true when metrics are exported (Redis client metrics are
	// then registered).
	metrics bool
	// PrometheusHandler serves the metrics in the Prometheus text format;
	// nil unless TelemetryConfig.Prometheus.
	PrometheusHandler http.Handler
	shutdown          []func(context.Context) error
}

// Propagator is the W3C trace-context and baggage propagator the suite
// uses on gRPC and on AGTP (the traceparent header).
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func init() {
	otel.SetTextMapPropagator(Propagator)
}

// NewTelemetry builds providers for the named service. Each service has its
// own providers, so that several services in one process (make run) still
// report under their own service.name.
func NewTelemetry(ctx context.Context, service string, cfg TelemetryConfig) (*Telemetry, error) {
	instance := cfg.InstanceID
	if instance == "" {
		instance = uuid.NewString()
	}
	// The standard OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by
	// the SDK, override the defaults (the service's own name, the build's
	// version, this process's instance).
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", service),
			attribute.String("service.version", Version()),
			attribute.String("service.instance.id", instance),
		),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	t := &Telemetry{
		// Nothing would receive the spans unless something is configured
		// to, so none are recorded: a no-op provider still carries an
		// incoming W3C trace context through to outgoing calls, at no
		// cost per request.
		TracerProvider: tracenoop.NewTracerProvider(),
		MeterProvider:  metricnoop.NewMeterProvider(),
	}
	if cfg.OTLPExport || len(cfg.SpanProcessors) > 0 {
		topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		if cfg.OTLPExport {
			exp, err := otlptracegrpc.New(ctx)
			if err != nil {
				return nil, fmt.Errorf("otlp trace exporter: %w", err)
			}
			topts = append(topts, sdktrace.WithBatcher(exp))
		}
		for _, sp := range cfg.SpanProcessors {
			topts = append(topts, sdktrace.WithSpanProcessor(sp))
		}
		tp := sdktrace.NewTracerProvider(topts...)
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
		t.Recording, t.tracing = true, true
	}

	var readers []sdkmetric.Reader
	if cfg.OTLPExport {
		mexp, err := otlpmetricgrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.NewPeriodicReader(mexp))
	}
	if cfg.Prometheus {
		reader, handler, err := newPrometheus()
		if err != nil {
			return nil, err
		}
		readers = append(readers, reader)
		t.PrometheusHandler = handler
	}
	if len(readers) > 0 {
		mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithView(metricViews...)}
		for _, r := range readers {
			mopts = append(mopts, sdkmetric.WithReader(r))
		}
		mp := sdkmetric.NewMeterProvider(mopts...)
		t.MeterProvider = mp
		t.shutdown = append(t.shutdown, mp.Shutdown)
		t.Recording, t.metrics = true, true
	}
	return t, nil
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
