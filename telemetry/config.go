// Package telemetry sets up OpenTelemetry tracing (OTLP exporter configured
// by the standard OTEL_* variables), Prometheus metrics and slog logging.
// It is configured once in cmd and used by the other packages through ctx.
package telemetry

// Config is the telemetry section of the config file.
type Config struct {
	// Tracing enables the OTLP trace exporter. Default: on when
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
	Tracing *bool `yaml:"tracing" json:"tracing,omitempty"`
	// ServiceName is the OTel service.name. Default "execgate".
	ServiceName string `yaml:"service_name" json:"service_name"`
	// MaxTenantLabels bounds the tenant label's cardinality in metrics;
	// tenants beyond it are counted under "other". Default 100.
	MaxTenantLabels int `yaml:"max_tenant_labels" json:"max_tenant_labels"`
	// LogFormat is "json" (default) or "text"; LogLevel "info" (default), "debug", ...
	LogFormat string `yaml:"log_format" json:"log_format"`
	LogLevel  string `yaml:"log_level" json:"log_level"`
}
