package kit

import (
	"context"
	"errors"
	"fmt"

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
}

// Telemetry is one service's tracer and meter providers.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Recording is false when nothing receives spans or metrics; then the
	// gRPC and Redis instrumentation is left out of the hot path.
	Recording bool
	shutdown  []func(context.Context) error
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
	// The standard OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by
	// the SDK, override the defaults (the service's own name).
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	t := &Telemetry{}
	if !cfg.OTLPExport && len(cfg.SpanProcessors) == 0 {
		// Nothing would receive the spans, so none are recorded: a no-op
		// provider still carries an incoming W3C trace context through to
		// outgoing calls, at no cost per request.
		t.TracerProvider = tracenoop.NewTracerProvider()
		t.MeterProvider = metricnoop.NewMeterProvider()
		return t, nil
	}
	t.Recording = true
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

	if cfg.OTLPExport {
		mexp, err := otlpmetricgrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
		t.MeterProvider = mp
		t.shutdown = append(t.shutdown, mp.Shutdown)
	} else {
		t.MeterProvider = metricnoop.NewMeterProvider()
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
