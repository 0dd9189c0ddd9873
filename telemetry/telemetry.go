// Package telemetry builds airlock's OpenTelemetry tracer and meter providers from the
// standard OTEL_* environment variables, serves Prometheus metrics, and provides the spans,
// metrics and log handler the proxy uses. It never sees a secret value: callers pass
// RequestFacts, which hold credential names only.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of airlock's tracer and meter.
const ScopeName = "github.com/airlock-proxy/airlock"

// Options configures Setup.
type Options struct {
	// ServiceName is the resource's service.name; default "airlock". OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override it, as the specification says.
	ServiceName string
	// Version is the resource's service.version.
	Version string
	// Logger receives setup messages; nil discards.
	Logger *slog.Logger
}

// Telemetry holds the providers. Close it with Shutdown.
type Telemetry struct {
	tp       *sdktrace.TracerProvider
	mp       *sdkmetric.MeterProvider
	reg      *prometheus.Registry
	tracer   trace.Tracer
	metrics  *Metrics
	exported []string
}

// Setup builds the providers. Spans are always created (so trace ids reach audit events
// and logs) but exported only when OTEL_TRACES_EXPORTER=otlp, or when it is unset and an
// OTLP endpoint variable is set; likewise metrics with OTEL_METRICS_EXPORTER. The protocol
// comes from OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL: "http/protobuf" (default) or
// "grpc"; endpoint, headers, timeout, TLS, sampler (OTEL_TRACES_SAMPLER), batching
// (OTEL_BSP_*) and export interval (OTEL_METRIC_EXPORT_INTERVAL) are read by the SDK.
// OTEL_SDK_DISABLED=true exports nothing. Prometheus metrics are always served by
// MetricsHandler. No global provider or propagator is set.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	if opts.ServiceName == "" {
		opts.ServiceName = "airlock"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{reg: prometheus.NewRegistry()}

	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	spanExp, proto, err := spanExporter(ctx)
	if err != nil {
		return nil, err
	}
	if spanExp != nil {
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spanExp))
		t.exported = append(t.exported, "traces:"+proto)
	} else {
		// Nothing reads the spans: keep their ids (audit events and logs carry them) but do
		// not record them, which cost 3-5% of the proxy's CPU in the load harness.
		traceOpts = append(traceOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	t.tp = sdktrace.NewTracerProvider(traceOpts...)
	t.tracer = t.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(opts.Version))

	promExp, err := otelprom.New(otelprom.WithRegisterer(t.reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	if err := t.reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("telemetry: go collector: %w", err)
	}
	if err := t.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: process collector: %w", err)
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	metricReader, mproto, err := metricReader(ctx)
	if err != nil {
		return nil, errors.Join(err, t.tp.Shutdown(ctx))
	}
	if metricReader != nil {
		meterOpts = append(meterOpts, sdkmetric.WithReader(metricReader))
		t.exported = append(t.exported, "metrics:"+mproto)
	}
	t.mp = sdkmetric.NewMeterProvider(meterOpts...)
	t.metrics, err = NewMetrics(t.mp.Meter(ScopeName, metric.WithInstrumentationVersion(opts.Version)))
	if err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	log.Info("telemetry ready", "component", "telemetry", "export", t.exported)
	return t, nil
}

func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", opts.ServiceName)}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME: last, so they win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// Tracer is airlock's tracer.
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// TracerProvider is the SDK tracer provider (for otelhttp and the like).
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider is the SDK meter provider.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// Metrics is the typed metrics API the proxy calls.
func (t *Telemetry) Metrics() *Metrics { return t.metrics }

// Propagator is W3C trace context, used to inject traceparent upstream and to read the
// sandbox's.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Exported lists what is exported over OTLP, e.g. ["traces:grpc"]; empty when nothing is.
func (t *Telemetry) Exported() []string { return append([]string(nil), t.exported...) }

// MetricsHandler serves the Prometheus text format, for /metrics on the admin listener.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops both providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry shutdown: %w", err)
	}
	return nil
}
