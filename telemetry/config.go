// Package telemetry sets up OpenTelemetry tracing (OTLP exporter configured
// by the standard OTEL_* variables), Prometheus metrics and slog logging.
// It is configured once in cmd and used by the other packages through ctx:
// domain packages start child spans with otel.Tracer(...) from the request's
// context and log with slog's *Context functions, which carry trace_id and
// span_id onto every line.
package telemetry

import (
	"errors"
	"fmt"
	"log/slog"
)

// Config is the telemetry section of the config file.
type Config struct {
	// Tracing enables the OTLP trace exporter. Default (nil): on when
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
	// (and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none).
	// false turns the exporter off even then. Spans are always created, so
	// trace ids reach envelopes, logs and audit records either way.
	Tracing *bool `yaml:"tracing" json:"tracing,omitempty"`
	// TracesStdout writes every finished span as one JSON line to stdout
	// (ids, name, start, end, duration, status, attributes), to see traces
	// without a collector (serve --traces stdout). Default false. Either
	// way, without OTLP export serve keeps each tenant's recent spans in
	// memory for GET /v1/admin/traces/{trace_id}.
	TracesStdout bool `yaml:"traces_stdout" json:"traces_stdout"`
	// ServiceName is the OTel service.name. Default "execgate";
	// OTEL_SERVICE_NAME overrides it.
	ServiceName string `yaml:"service_name" json:"service_name"`
	// MaxTenantLabels bounds the tenant label's cardinality in metrics;
	// tenants beyond it are counted under "other". Default (0) 100.
	MaxTenantLabels int `yaml:"max_tenant_labels" json:"max_tenant_labels"`
	// LogFormat is "json" (default) or "text".
	LogFormat string `yaml:"log_format" json:"log_format"`
	// LogLevel is "info" (default), "debug", "warn" or "error".
	LogLevel string `yaml:"log_level" json:"log_level"`
}

// Defaults for zero Config fields.
const (
	DefaultServiceName     = "execgate"
	DefaultMaxTenantLabels = 100
)

// Validate reports bad values, each naming its key.
func (c Config) Validate() error {
	var errs []error
	switch c.LogFormat {
	case "", "json", "text":
	default:
		errs = append(errs, fmt.Errorf("telemetry.log_format: %q is not json or text", c.LogFormat))
	}
	if c.LogLevel != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
			errs = append(errs, fmt.Errorf("telemetry.log_level: %q is not debug, info, warn or error", c.LogLevel))
		}
	}
	if c.MaxTenantLabels < 0 {
		errs = append(errs, fmt.Errorf("telemetry.max_tenant_labels: %d must be >= 0", c.MaxTenantLabels))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.MaxTenantLabels == 0 {
		c.MaxTenantLabels = DefaultMaxTenantLabels
	}
	if c.LogFormat == "" {
		c.LogFormat = "json"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	return c
}
