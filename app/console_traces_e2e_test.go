// The run page's spans waterfall against GET /v1/admin/traces/{trace_id}
// (issue #26 §3: the spans a gateway keeps when no OTLP endpoint is set).

package app_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// traceSpan is one span as GET /v1/admin/traces/{id} answers it.
type traceSpan struct {
	SpanID       string  `json:"span_id"`
	ParentSpanID string  `json:"parent_span_id"`
	Name         string  `json:"name"`
	Start        string  `json:"start"`
	End          string  `json:"end"`
	DurationMS   float64 `json:"duration_ms"`
}

// The run detail page draws the run's spans as a waterfall from the traces
// route: one row per span, indented by its depth in the span tree, its
// duration as the route gives it, and its bar placed by its start within
// the whole trace (the request's span first, at 0).
func TestConsoleRunDetailDrawsTheTrace(t *testing.T) {
	s := start(t, setup{})
	r := s.execute(s.token("demo"), map[string]any{"execution_id": "traced", "source": "def run(args, context):\n    return 1\n"})
	traceID, _ := r.json(t)["trace_id"].(string)
	if r.status != http.StatusOK || len(traceID) != 32 {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	auditor := s.token("demo", tenancy.RoleAuditor)
	req, _ := http.NewRequest(http.MethodGet, s.app.URL()+"/v1/admin/traces/"+traceID, nil)
	req.Header.Set("Authorization", "Bearer "+auditor)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/admin/traces/%s: %d %s (the gateway has no OTLP endpoint: it should keep the spans)", traceID, resp.StatusCode, body)
	}
	var trace struct {
		TraceID string      `json:"trace_id"`
		Spans   []traceSpan `json:"spans"`
	}
	if err := json.Unmarshal(body, &trace); err != nil || trace.TraceID != traceID || len(trace.Spans) == 0 {
		t.Fatalf("the trace %s (%v): want its spans", body, err)
	}
	names := map[string]bool{}
	for _, sp := range trace.Spans {
		names[sp.Name] = true
	}
	for _, want := range []string{"POST /v1/execute", telemetry.StagePolicy, telemetry.StageRun} {
		if !names[want] {
			t.Fatalf("the trace's spans %v lack %q", names, want)
		}
	}

	b := newBrowser(t, s.app.URL())
	b.signIn(auditor, "runs")
	b.openRun("traced")
	b.waitFor("the waterfall", `document.querySelector("#r-waterfall .span-row")`)
	var rows []struct {
		Span, Offset, Width, Duration, Depth string
	}
	b.eval(`[...document.querySelectorAll("#r-waterfall .span-row")].map(r => ({span: r.dataset.span, offset: r.dataset.offset,
		width: r.dataset.width, duration: r.dataset.duration, depth: r.dataset.depth}))`, &rows)
	if len(rows) != len(trace.Spans) {
		t.Fatalf("%d rows for %d spans", len(rows), len(trace.Spans))
	}

	// The expected placement, from the route's answer.
	byID := map[string]traceSpan{}
	var t0, t1 time.Time
	for _, sp := range trace.Spans {
		byID[sp.SpanID] = sp
		st, err1 := time.Parse(time.RFC3339Nano, sp.Start)
		en, err2 := time.Parse(time.RFC3339Nano, sp.End)
		if err1 != nil || err2 != nil {
			t.Fatalf("span times %q %q: %v %v", sp.Start, sp.End, err1, err2)
		}
		if t0.IsZero() || st.Before(t0) {
			t0 = st
		}
		if en.After(t1) {
			t1 = en
		}
	}
	total := float64(t1.Sub(t0)) / float64(time.Millisecond)
	depthOf := func(sp traceSpan) int {
		d := 0
		for p, ok := byID[sp.ParentSpanID]; ok && d < 64; p, ok = byID[p.ParentSpanID] {
			d++
		}
		return d
	}
	seen := map[string]int{}
	for i, row := range rows {
		// Spans are matched by name and order among equal names.
		var sp traceSpan
		n := 0
		for _, cand := range trace.Spans {
			if cand.Name == row.Span {
				if n == seen[row.Span] {
					sp = cand
					break
				}
				n++
			}
		}
		seen[row.Span]++
		if sp.SpanID == "" {
			t.Fatalf("row %d %q is no span of the trace", i, row.Span)
		}
		st, _ := time.Parse(time.RFC3339Nano, sp.Start)
		wantOff := 100 * float64(st.Sub(t0)) / float64(time.Millisecond) / total
		off, _ := strconv.ParseFloat(row.Offset, 64)
		dur, _ := strconv.ParseFloat(row.Duration, 64)
		depth, _ := strconv.Atoi(row.Depth)
		if math.Abs(off-wantOff) > 0.5 || dur != sp.DurationMS || depth != depthOf(sp) {
			t.Errorf("row %d %q: offset %.3f%% duration %v depth %d, want %.3f%% %v %d", i, row.Span, off, dur, depth, wantOff, sp.DurationMS, depthOf(sp))
		}
		if i == 0 && (row.Span != "POST /v1/execute" || off != 0) {
			t.Errorf("the first row is %q at %.3f%%: want the request's span at 0", row.Span, off)
		}
	}
	b.noProblems()
	b.screenshot("runs-trace")
}
