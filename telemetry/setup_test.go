package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/telemetry/otlptest"
)

// setup runs telemetry.Setup and restores the process-wide state after.
func setup(t *testing.T, cfg telemetry.Config) func(context.Context) error {
	t.Helper()
	prevTP, prevProp, prevLog := otel.GetTracerProvider(), otel.GetTextMapPropagator(), slog.Default()
	shutdown, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		slog.SetDefault(prevLog)
	})
	return shutdown
}

func TestSetupExportsSpansToAnOTLPHTTPReceiver(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	shutdown := setup(t, telemetry.Config{ServiceName: "execgate-test"})

	tracer := otel.Tracer("github.com/execgate/execgate/telemetry_test")
	ctx, parent := tracer.Start(context.Background(), "POST /v1/execute")
	_, child := tracer.Start(ctx, telemetry.StagePolicy)
	child.End()
	parent.End()
	if err := shutdown(context.Background()); err != nil { // flushes the batcher
		t.Fatalf("shutdown: %v", err)
	}

	spans := recv.WaitSpans(t, 2, 10*time.Second)
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Span.GetName()] = s
	}
	p, c := byName["POST /v1/execute"], byName[telemetry.StagePolicy]
	if p.Span == nil || c.Span == nil {
		t.Fatalf("received spans %v, want the edge span and its policy child", spans)
	}
	if !bytes.Equal(c.Span.GetParentSpanId(), p.Span.GetSpanId()) || !bytes.Equal(c.Span.GetTraceId(), p.Span.GetTraceId()) {
		t.Errorf("policy span is not a child of the edge span")
	}
	if v, _ := otlptest.Attr(p.Resource.GetAttributes(), "service.name"); v.GetStringValue() != "execgate-test" {
		t.Errorf("service.name = %v, want execgate-test", v)
	}
}

func TestNoExporterWithoutEndpointButSpansStillGetIDs(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown := setup(t, telemetry.Config{})
	_, span := otel.Tracer("t").Start(context.Background(), "x")
	span.End()
	if !span.SpanContext().IsValid() {
		t.Fatal("spans must get real ids even without an exporter (trace_id goes into envelopes and audit)")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("receiver got %d spans with no endpoint configured", n)
	}
}

func TestTracingEnabled(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name string
		cfg  telemetry.Config
		env  map[string]string
		want bool
	}{
		{"nothing set", telemetry.Config{}, nil, false},
		{"endpoint", telemetry.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"traces endpoint", telemetry.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"config on without endpoint", telemetry.Config{Tracing: &on}, nil, true},
		{"config off beats endpoint", telemetry.Config{Tracing: &off}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
		{"sdk disabled", telemetry.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, false},
		{"traces exporter none", telemetry.Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			if got := telemetry.TracingEnabled(tt.cfg, lookup); got != tt.want {
				t.Errorf("TracingEnabled = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIncomingTraceparentIsHonoured(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	setup(t, telemetry.Config{})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	type seen struct{ TraceID, ParentID, SpanID, Tenant string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		parent := trace.SpanContextFromContext(ctx)
		ctx, span := otel.Tracer("t").Start(ctx, "edge")
		defer span.End()
		_ = json.NewEncoder(w).Encode(seen{
			TraceID: span.SpanContext().TraceID().String(), ParentID: parent.SpanID().String(),
			SpanID: span.SpanContext().SpanID().String(), Tenant: baggage.FromContext(ctx).Member("tenant").Value(),
		})
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	req.Header.Set("baggage", "tenant=demo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got seen
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.TraceID != traceID || got.ParentID != spanID || got.SpanID == spanID || got.Tenant != "demo" {
		t.Errorf("server saw %+v, want trace %s continued under parent %s with baggage tenant=demo", got, traceID, spanID)
	}
}

func TestLoggerAddsTraceIDsFromContext(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	withSpan := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	tests := []struct {
		name      string
		cfg       telemetry.Config
		ctx       context.Context
		log       func(l *slog.Logger, ctx context.Context)
		wantLines int
		wantTrace bool
	}{
		{"json with span", telemetry.Config{}, withSpan, func(l *slog.Logger, ctx context.Context) {
			l.With("component", "gateway").InfoContext(ctx, "run", "execution_id", "e1", "status", "error:Timeout")
		}, 1, true},
		{"json without span", telemetry.Config{}, context.Background(), func(l *slog.Logger, ctx context.Context) {
			l.InfoContext(ctx, "run")
		}, 1, false},
		{"debug dropped at info", telemetry.Config{LogLevel: "info"}, withSpan, func(l *slog.Logger, ctx context.Context) {
			l.DebugContext(ctx, "noise")
		}, 0, false},
		{"debug kept at debug", telemetry.Config{LogLevel: "debug"}, withSpan, func(l *slog.Logger, ctx context.Context) {
			l.DebugContext(ctx, "detail")
		}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tt.log(telemetry.NewLogger(tt.cfg, &buf), tt.ctx)
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if buf.Len() == 0 {
				lines = nil
			}
			if len(lines) != tt.wantLines {
				t.Fatalf("%d lines, want %d: %q", len(lines), tt.wantLines, buf.String())
			}
			if tt.wantLines == 0 {
				return
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
				t.Fatalf("not JSON: %q", lines[0])
			}
			if tt.wantTrace && (m["trace_id"] != tid.String() || m["span_id"] != sid.String()) {
				t.Errorf("line %v lacks trace_id %s span_id %s", m, tid, sid)
			}
			if _, has := m["trace_id"]; !tt.wantTrace && has {
				t.Errorf("line %v has a trace_id without a span", m)
			}
		})
	}
}

func TestTextLoggerCarriesTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	telemetry.NewLogger(telemetry.Config{LogFormat: "text"}, &buf).WarnContext(ctx, "x")
	if !strings.Contains(buf.String(), "trace_id="+tid.String()) || !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("text line %q", buf.String())
	}
}

func TestSetupRejectsBadConfigNamingTheKey(t *testing.T) {
	tests := []struct {
		name string
		cfg  telemetry.Config
		want string
	}{
		{"log format", telemetry.Config{LogFormat: "xml"}, "telemetry.log_format"},
		{"log level", telemetry.Config{LogLevel: "loud"}, "telemetry.log_level"},
		{"tenant labels", telemetry.Config{MaxTenantLabels: -1}, "telemetry.max_tenant_labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := telemetry.Setup(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Setup = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
