package app_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/audit/audittest"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/telemetry/otlptest"
)

// Markers that must never reach a span: the tool's source and args are the
// caller's data (they may hold secrets), the token is a credential.
const (
	obsSourceMarker = "obs_source_marker_7f3a"
	obsArgsMarker   = "obs-args-marker-91c2"
)

const (
	obsIncomingTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	obsIncomingSpanID  = "00f067aa0ba902b7"
)

// obsSecretRequest is an ok run whose source and args carry the markers.
func obsSecretRequest(id string) map[string]any {
	return map[string]any{
		"execution_id": id,
		"source":       "# " + obsSourceMarker + "\n" + obsOKSource,
		"args":         map[string]any{"password": obsArgsMarker},
	}
}

// obsSyncLogs is a concurrency-safe log sink whose lines can be decoded.
type obsSyncLogs struct{ testenv.SyncBuffer }

// executions returns the JSON log lines with msg == "execution".
func (l *obsSyncLogs) executions(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if m["msg"] == "execution" {
			out = append(out, m)
		}
	}
	return out
}

func TestTelemetrySpanTreeOfOneRun(t *testing.T) {
	g := newObsGateway(t, "127.0.0.1:0")
	sr := tracetest.NewSpanRecorder()
	obsInstallTracerProvider(t, sr)
	var logs obsSyncLogs
	a := g.start(t, app.Options{Logger: telemetry.NewLogger(telemetry.Config{}, &logs)})
	tok := g.token(t, obsFastTenant)

	hdr := http.Header{}
	hdr.Set("traceparent", "00-"+obsIncomingTraceID+"-"+obsIncomingSpanID+"-01")
	resp, err := obsExecute(context.Background(), http.DefaultClient, a.URL(), tok, obsSecretRequest("span-tree-1"), hdr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.HTTPStatus != 200 || resp.Env.Status != "ok" {
		t.Fatalf("HTTP %d %s %+v, want an ok run", resp.HTTPStatus, resp.Env.Status, resp.Env.Error)
	}
	if resp.Env.TraceID != obsIncomingTraceID {
		t.Errorf("envelope trace_id %q, want the incoming traceparent's %s", resp.Env.TraceID, obsIncomingTraceID)
	}

	// The edge span ends once the handler returned; poll for it.
	var edge sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for edge == nil {
		for _, s := range sr.Ended() {
			if s.SpanKind() == trace.SpanKindServer {
				edge = s
			}
		}
		if edge == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no server span ended within 10s; ended: %v", obsSpanNames(sr.Ended()))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	spans := sr.Ended()
	if edge.Name() != "POST /v1/execute" {
		t.Errorf("edge span %q, want POST /v1/execute", edge.Name())
	}
	if got := edge.SpanContext().TraceID().String(); got != obsIncomingTraceID {
		t.Errorf("edge trace id %s, want %s (traceparent honoured)", got, obsIncomingTraceID)
	}
	if p := edge.Parent(); p.SpanID().String() != obsIncomingSpanID || !p.IsRemote() {
		t.Errorf("edge parent %s remote=%v, want the caller's span %s", p.SpanID(), p.IsRemote(), obsIncomingSpanID)
	}

	// Direct children of the edge span, in request order.
	var children []sdktrace.ReadOnlySpan
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if s.SpanContext().TraceID() != edge.SpanContext().TraceID() {
			t.Errorf("span %s is in another trace", s.Name())
		}
		if s.Parent().SpanID() == edge.SpanContext().SpanID() {
			children = append(children, s)
		}
	}
	slices.SortFunc(children, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var names []string
	for _, c := range children {
		names = append(names, c.Name())
	}
	want := []string{telemetry.StageAuth, telemetry.StagePolicy, telemetry.StageQuota, telemetry.StageRun, telemetry.StageSettle, telemetry.StageAudit}
	if !slices.Equal(names, want) {
		t.Errorf("children of the edge span, by start time: %v, want %v", names, want)
	}
	// Sandbox stages, where the sandbox traces them, sit under run.
	for _, s := range spans {
		if s.Name() != telemetry.StageDeps && s.Name() != telemetry.StageSpawn {
			continue
		}
		if !obsDescendsFrom(s, telemetry.StageRun, byID) {
			t.Errorf("span %s is not below the run span", s.Name())
		}
	}

	// Never the source, args or token in a span.
	for _, s := range spans {
		for _, kv := range obsSpanStrings(s) {
			for _, secret := range []string{obsSourceMarker, obsArgsMarker, tok} {
				if strings.Contains(kv, secret) {
					t.Errorf("span %s carries caller data or a credential: %.120s", s.Name(), kv)
				}
			}
		}
	}

	// The audit record and the log line join the trace.
	lines := audittest.ReadFile(t, g.auditFile)
	if len(lines) != 1 {
		t.Fatalf("%d audit records, want 1", len(lines))
	}
	rec := lines[0].Record
	if rec.TraceID != obsIncomingTraceID {
		t.Errorf("audit trace_id %s, want %s", rec.TraceID, obsIncomingTraceID)
	}
	sid, _ := trace.SpanIDFromHex(rec.SpanID)
	if _, ok := byID[sid]; !ok {
		t.Errorf("audit span_id %s is not a span of the run's trace", rec.SpanID)
	}
	execs := logs.executions(t)
	if len(execs) != 1 || execs[0]["execution_id"] != "span-tree-1" || execs[0]["trace_id"] != obsIncomingTraceID || execs[0]["status"] != "ok" {
		t.Errorf("execution log lines %v, want one for span-tree-1 with status ok and the trace id", execs)
	}
	if strings.Contains(logs.String(), obsSourceMarker) || strings.Contains(logs.String(), obsArgsMarker) || strings.Contains(logs.String(), tok) {
		t.Error("the logs carry the source, args or token")
	}
}

func TestTelemetryMetricsAndLogLinesShowFailuresInside200(t *testing.T) {
	g := newObsGateway(t, "127.0.0.1:0")
	obsInstallTracerProvider(t)
	var logs obsSyncLogs
	a := g.start(t, app.Options{Logger: telemetry.NewLogger(telemetry.Config{}, &logs)})
	fast, tiny := g.token(t, obsFastTenant), g.token(t, obsTinyTenant)
	kinds := map[string]obsKind{}
	for _, k := range obsKinds() {
		kinds[k.name] = k
	}
	send := []struct {
		kind, token string
	}{
		{"ok", fast}, {"ok", fast}, {"tool error", fast}, {"policy denied", fast},
		{"ok", tiny}, {"quota exceeded", tiny},
	}
	for i, s := range send {
		id := "metrics-" + string(rune('a'+i))
		if _, err := obsExecute(context.Background(), http.DefaultClient, a.URL(), s.token, kinds[s.kind].body(id), nil); err != nil {
			t.Fatal(err)
		}
	}

	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"execgate_executions_total", map[string]string{"tenant": "fast", "status": "ok", "type": "none"}, 2},
		{"execgate_executions_total", map[string]string{"tenant": "fast", "status": "error", "type": "ToolError"}, 1},
		{"execgate_executions_total", map[string]string{"tenant": "fast", "status": "error", "type": "PolicyDenied"}, 1},
		{"execgate_executions_total", map[string]string{"tenant": "tiny", "status": "ok", "type": "none"}, 1},
		{"execgate_executions_total", map[string]string{"tenant": "tiny", "status": "error", "type": "QuotaExceeded"}, 1},
		{"execgate_quota_refusals_total", map[string]string{"tenant": "tiny", "kind": "rate"}, 1},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "run"}, 4},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "total"}, 6},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "audit"}, 6},
		{"execgate_policy_eval_duration_seconds", map[string]string{}, 6},
		{"execgate_runs_in_flight", map[string]string{}, 0},
		{"execgate_queue_waiting", map[string]string{}, 0},
	}
	for _, c := range checks {
		if got, ok := obsMetric(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}

	// One log line per request, its envelope status visible even in a 200.
	byID := map[string]map[string]any{}
	for _, l := range logs.executions(t) {
		byID[l["execution_id"].(string)] = l
	}
	if len(byID) != len(send) {
		t.Errorf("%d execution log lines, want %d", len(byID), len(send))
	}
	toolErr := byID["metrics-c"]
	if toolErr == nil || toolErr["status"] != "error" || toolErr["error_type"] != "ToolError" || toolErr["http_status"] != float64(200) || toolErr["level"] != "WARN" {
		t.Errorf("the ToolError run's log line %v, want status error, error_type ToolError, http_status 200 at WARN", toolErr)
	}
	for id, l := range byID {
		if tid, _ := l["trace_id"].(string); len(tid) != 32 {
			t.Errorf("log line of %s has no trace_id: %v", id, l)
		}
	}
}

func TestTelemetryRunSpansReachAnOTLPReceiver(t *testing.T) {
	g := newObsGateway(t, "127.0.0.1:0")
	recv := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms; the default 5 s batch delay would only slow the test
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "execgate-e2e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	a := g.start(t, app.Options{Logger: obsDiscardLogger()})
	resp, err := obsExecute(context.Background(), http.DefaultClient, a.URL(), g.token(t, obsFastTenant), obsSecretRequest("otlp-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.HTTPStatus != 200 || resp.Env.TraceID == "" {
		t.Fatalf("HTTP %d trace_id %q", resp.HTTPStatus, resp.Env.TraceID)
	}
	want := map[string]bool{"POST /v1/execute": false, telemetry.StageAuth: false, telemetry.StagePolicy: false,
		telemetry.StageQuota: false, telemetry.StageRun: false, telemetry.StageSettle: false, telemetry.StageAudit: false}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, s := range recv.Spans() {
			if _, ok := want[s.Span.GetName()]; ok && strings.EqualFold(obsHex(s.Span.GetTraceId()), resp.Env.TraceID) {
				want[s.Span.GetName()] = true
				if v, _ := otlptest.Attr(s.Resource.GetAttributes(), "service.name"); v.GetStringValue() != "execgate-e2e" {
					t.Fatalf("span %s service.name %v", s.Span.GetName(), v)
				}
			}
		}
		missing := 0
		for _, got := range want {
			if !got {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the receiver lacks spans of the run: %v", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range recv.Spans() {
		raw := s.Span.String()
		if strings.Contains(raw, obsSourceMarker) || strings.Contains(raw, obsArgsMarker) {
			t.Errorf("exported span %s carries the source or args", s.Span.GetName())
		}
	}
}

// obsMetric returns the value (histograms: the sample count) of the series
// of name with exactly labels.
func obsMetric(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	fam, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, lp := range m.GetLabel() {
			if labels[lp.GetName()] != lp.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func obsSpanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// obsDescendsFrom reports whether s has an ancestor named name.
func obsDescendsFrom(s sdktrace.ReadOnlySpan, name string, byID map[trace.SpanID]sdktrace.ReadOnlySpan) bool {
	for p, ok := byID[s.Parent().SpanID()]; ok; p, ok = byID[p.Parent().SpanID()] {
		if p.Name() == name {
			return true
		}
	}
	return false
}

// obsSpanStrings is every string a span carries: name, status, attributes,
// events and their attributes.
func obsSpanStrings(s sdktrace.ReadOnlySpan) []string {
	out := []string{s.Name(), s.Status().Description}
	for _, kv := range s.Attributes() {
		out = append(out, string(kv.Key)+"="+kv.Value.String())
	}
	for _, e := range s.Events() {
		out = append(out, e.Name)
		for _, kv := range e.Attributes {
			out = append(out, string(kv.Key)+"="+kv.Value.String())
		}
	}
	return out
}

func obsHex(b []byte) string { return hex.EncodeToString(b) }
