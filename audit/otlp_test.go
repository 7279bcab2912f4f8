package audit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/telemetry/otlptest"
)

func TestOTLPSinkExportsEachRecordBeforeReturning(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "execgate-audit-test")
	l, err := audit.New(audit.Config{Sinks: []string{audit.SinkOTLP}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	if err := l.Record(ctx, records()["policy denied"]); err != nil {
		t.Fatalf("Record: %v", err)
	}
	logs := recv.Logs() // no waiting: the export is synchronous
	if len(logs) != 1 {
		t.Fatalf("receiver has %d log records right after Record, want 1", len(logs))
	}
	got := logs[0]
	if got.Record.GetEventName() != audit.EventName {
		t.Errorf("event name %q, want %q", got.Record.GetEventName(), audit.EventName)
	}
	if v, _ := otlptest.Attr(got.Resource.GetAttributes(), "service.name"); v.GetStringValue() != "execgate-audit-test" {
		t.Errorf("service.name %v, want from OTEL_SERVICE_NAME", v)
	}
	if trace.TraceID(got.Record.GetTraceId()) != tid {
		t.Errorf("log trace id %x, want %s", got.Record.GetTraceId(), tid)
	}
	body := got.Record.GetBody().GetKvlistValue().GetValues()
	for key, want := range map[string]string{"execution_id": "deny-1", "tenant_id": "demo", "trace_id": tid.String()} {
		if v, ok := otlptest.Attr(body, key); !ok || v.GetStringValue() != want {
			t.Errorf("body %s = %v, want %q", key, v, want)
		}
	}
	outcome, _ := otlptest.Attr(body, "outcome")
	if v, _ := otlptest.Attr(outcome.GetKvlistValue().GetValues(), "http_status"); v.GetIntValue() != 403 {
		t.Errorf("body outcome.http_status = %v, want int 403", v)
	}
}

func TestOTLPSinkFailureIsReturned(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	recv.SetStatus(http.StatusBadRequest) // not retried by the exporter
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	l, err := audit.New(audit.Config{Sinks: []string{audit.SinkOTLP}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	err = l.Record(context.Background(), records()["ok run"])
	if err == nil || !strings.Contains(err.Error(), "audit sink otlp") {
		t.Fatalf("Record = %v, want the export error from the otlp sink", err)
	}
}
