package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
)

// EventName is the OTLP log event name of an audit record.
const EventName = "execgate.audit.record"

// otlpSink sends each record as one OTLP log record (body: the record as a
// map) over OTLP/HTTP, configured by the standard OTEL_EXPORTER_OTLP_* and
// OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES variables. Export is
// synchronous: write returns the exporter's error, so an audit record is
// never silently dropped by a batch queue.
type otlpSink struct {
	provider *sdklog.LoggerProvider
	logger   otellog.Logger
}

// exportErrKey carries a *error into syncProcessor.OnEmit so the export
// error reaches Record (Logger.Emit returns none).
type exportErrKey struct{}

// syncProcessor exports every record as it is emitted and reports the
// result through the context's error slot.
type syncProcessor struct {
	mu  sync.Mutex // serialises Export, which must not be called concurrently
	exp sdklog.Exporter
}

var _ sdklog.Processor = (*syncProcessor)(nil)

func (p *syncProcessor) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }

func (p *syncProcessor) OnEmit(ctx context.Context, r *sdklog.Record) error {
	p.mu.Lock()
	err := p.exp.Export(ctx, []sdklog.Record{*r})
	p.mu.Unlock()
	if slot, ok := ctx.Value(exportErrKey{}).(*error); ok {
		*slot = err
		return nil // Record returns it; reporting it to otel.Handle too would log it twice
	}
	return err
}

func (p *syncProcessor) Shutdown(ctx context.Context) error   { return p.exp.Shutdown(ctx) }
func (p *syncProcessor) ForceFlush(ctx context.Context) error { return p.exp.ForceFlush(ctx) }

func newOTLPSink(ctx context.Context) (*otlpSink, error) {
	exp, err := otlploghttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating OTLP log exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "execgate")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("building OTLP resource: %w", err)
	}
	provider := sdklog.NewLoggerProvider(
		sdklog.WithResource(res),
		sdklog.WithProcessor(&syncProcessor{exp: exp}),
		sdklog.WithAttributeValueLengthLimit(-1), // never cut a record
	)
	return &otlpSink{provider: provider, logger: provider.Logger("github.com/execgate/execgate/audit")}, nil
}

func (s *otlpSink) name() string { return SinkOTLP }

func (s *otlpSink) write(ctx context.Context, line []byte, r *Record) error {
	body, err := jsonToValue(line)
	if err != nil {
		return err
	}
	var rec otellog.Record
	rec.SetEventName(EventName)
	rec.SetTimestamp(r.Time)
	rec.SetSeverity(otellog.SeverityInfo)
	rec.SetSeverityText("INFO")
	rec.SetBody(body)
	rec.AddAttributes(
		attribute.String("execution_id", r.ExecutionID),
		attribute.String("tenant_id", r.TenantID),
		attribute.String("outcome.status", r.Outcome.Status),
		attribute.String("outcome.error_type", r.Outcome.ErrorType),
	)
	if r.Outcome.Syscall != "" {
		rec.AddAttributes(attribute.String("outcome.syscall", r.Outcome.Syscall))
	}
	var exportErr error
	s.logger.Emit(context.WithValue(ctx, exportErrKey{}, &exportErr), rec)
	if exportErr != nil {
		return fmt.Errorf("exporting: %w", exportErr)
	}
	return nil
}

func (s *otlpSink) close(ctx context.Context) error { return s.provider.Shutdown(ctx) }

// jsonToValue converts the encoded record into an OTLP map value, keeping
// integers as integers.
func jsonToValue(line []byte) (attribute.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return attribute.Value{}, fmt.Errorf("decoding record for OTLP: %w", err)
	}
	return toValue(v), nil
}

func toValue(v any) attribute.Value {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		kvs := make([]attribute.KeyValue, 0, len(v))
		for _, k := range keys {
			kvs = append(kvs, attribute.KeyValue{Key: attribute.Key(k), Value: toValue(v[k])})
		}
		return attribute.MapValue(kvs...)
	case []any:
		vals := make([]attribute.Value, len(v))
		for i, e := range v {
			vals[i] = toValue(e)
		}
		return attribute.SliceValue(vals...)
	case string:
		return attribute.StringValue(v)
	case bool:
		return attribute.BoolValue(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return attribute.Int64Value(i)
		}
		f, _ := v.Float64()
		return attribute.Float64Value(f)
	default: // null
		return attribute.Value{}
	}
}
