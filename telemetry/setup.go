package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Span and stage names: the gateway's child spans of the edge span and the
// stage label of execgate_stage_duration_seconds use the same words.
const (
	StageAuth   = "auth"
	StageDecode = "decode"
	StagePolicy = "policy"
	StageQuota  = "quota"
	StageDeps   = "deps"
	StageSpawn  = "spawn"
	StageRun    = "run"
	StageSettle = "settle"
	StageAudit  = "audit"
	StageTotal  = "total"
)

// Stages lists every stage name, in request order.
var Stages = []string{StageAuth, StageDecode, StagePolicy, StageQuota, StageDeps, StageSpawn, StageRun, StageSettle, StageAudit, StageTotal}

// Setup installs, process-wide: the slog default logger (NewLogger on
// stderr), the W3C tracecontext+baggage propagator (so an incoming
// traceparent is honoured), and an SDK TracerProvider whose spans go to the
// OTLP/HTTP exporter when tracing is on (see Config.Tracing). The exporter is
// configured only by the standard OTEL_EXPORTER_OTLP_* variables; the
// resource has service.name plus OTEL_RESOURCE_ATTRIBUTES/OTEL_SERVICE_NAME.
// With cfg.TracesStdout each finished span is also written to stdout as a
// JSON line (NewStdoutExporter). extra processors (a SpanRing) see every
// span too. shutdown flushes and stops the exporters; call it once at exit.
func Setup(ctx context.Context, cfg Config, extra ...sdktrace.SpanProcessor) (shutdown func(context.Context) error, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	slog.SetDefault(NewLogger(cfg, os.Stderr))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		slog.Warn("opentelemetry", "err", err)
	}))
	otel.SetTextMapPropagator(Propagator())

	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("building telemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if TracingEnabled(cfg, os.LookupEnv) {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if cfg.TracesStdout {
		// A second's delay at most: a person is watching.
		opts = append(opts, sdktrace.WithBatcher(NewStdoutExporter(os.Stdout), sdktrace.WithBatchTimeout(time.Second)))
	}
	for _, p := range extra {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Propagator is W3C tracecontext plus baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// TracingEnabled reports whether Setup exports spans: cfg.Tracing when set,
// else whether an OTLP endpoint variable is set and tracing is not disabled
// by OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func TracingEnabled(cfg Config, lookupEnv func(string) (string, bool)) bool {
	if cfg.Tracing != nil {
		return *cfg.Tracing
	}
	env := func(k string) string { v, _ := lookupEnv(k); return strings.TrimSpace(v) }
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(env("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}
