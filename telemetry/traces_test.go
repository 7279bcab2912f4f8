package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/telemetry"
)

// ringTracer is a tracer whose spans go to ring.
func ringTracer(t *testing.T, ring *telemetry.SpanRing) trace.Tracer {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ring))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("test")
}

func TestTheSpanRingKeepsEachTenantsSpansOnly(t *testing.T) {
	ring := telemetry.NewSpanRing(telemetry.RingOptions{})
	tr := ringTracer(t, ring)

	// A request: the edge span learns its tenant by attribute (after the
	// token is verified), its children by their context.
	ctx, root := tr.Start(context.Background(), "GET /v1/execute", trace.WithSpanKind(trace.SpanKindServer))
	ctx = telemetry.WithTenant(ctx, "demo")
	_, child := tr.Start(ctx, "policy")
	child.SetAttributes(attribute.String("k", strings.Repeat("v", 1000)))
	child.SetStatus(codes.Error, "denied")
	child.End()
	root.SetAttributes(attribute.String(telemetry.AttrTenantID, "demo"))
	root.End()
	id := root.SpanContext().TraceID()

	// Another tenant joins the same trace id (a traceparent it sent).
	foreign := trace.ContextWithSpanContext(telemetry.WithTenant(context.Background(), "acme"), root.SpanContext())
	_, intruder := tr.Start(foreign, "acme's span")
	intruder.End()
	// A span of no tenant (before authentication) is not kept.
	_, anon := tr.Start(trace.ContextWithSpanContext(context.Background(), root.SpanContext()), "anonymous")
	anon.End()

	got, ok := ring.Trace(id, []string{"demo"})
	if !ok || len(got.Spans) != 2 {
		t.Fatalf("demo's spans: %+v, %v", got, ok)
	}
	names := map[string]telemetry.Span{}
	for _, s := range got.Spans {
		names[s.Name] = s
		if s.TenantID != "demo" || s.TraceID != id.String() {
			t.Errorf("span %+v", s)
		}
	}
	p := names["policy"]
	if p.ParentSpanID != root.SpanContext().SpanID().String() || p.Status != "error" || p.StatusMessage != "denied" || p.DurationMS < 0 {
		t.Errorf("the child span: %+v", p)
	}
	if v, _ := p.Attributes["k"].(string); len(v) != 256 {
		t.Errorf("an attribute of 1000 bytes was kept as %d bytes, want 256", len(v))
	}
	if names["GET /v1/execute"].Kind != "server" {
		t.Errorf("the edge span: %+v", names["GET /v1/execute"])
	}
	if acme, ok := ring.Trace(id, []string{"acme"}); !ok || len(acme.Spans) != 1 || acme.Spans[0].Name != "acme's span" {
		t.Errorf("acme's own span of the trace: %+v", acme)
	}
	if all, _ := ring.Trace(id, nil); len(all.Spans) != 3 {
		t.Errorf("every tenant's spans (admin): %d, want 3", len(all.Spans))
	}
	if _, ok := ring.Trace(id, []string{"nobody"}); ok {
		t.Error("a tenant without spans in the trace gets some")
	}
}

func TestTheSpanRingIsBounded(t *testing.T) {
	ring := telemetry.NewSpanRing(telemetry.RingOptions{MaxSpansPerTrace: 5, TenantBytes: 8 << 10, TotalBytes: 20 << 10})
	tr := ringTracer(t, ring)
	trace1 := func(tenant string, spans int) trace.TraceID {
		ctx, root := tr.Start(telemetry.WithTenant(context.Background(), tenant), "root")
		for range spans - 1 {
			_, s := tr.Start(ctx, "child")
			s.End()
		}
		root.End()
		return root.SpanContext().TraceID()
	}

	t.Run("spans past the per-trace cap are counted, not kept", func(t *testing.T) {
		got, _ := ring.Trace(trace1("a", 8), nil)
		if len(got.Spans) != 5 || got.DroppedSpans != 3 {
			t.Fatalf("%d spans kept, %d dropped; want 5 and 3", len(got.Spans), got.DroppedSpans)
		}
	})

	t.Run("a busy tenant pushes out its own oldest traces, not another tenant's", func(t *testing.T) {
		quiet := trace1("quiet", 2)
		var busy []trace.TraceID
		for range 200 {
			busy = append(busy, trace1("busy", 3))
		}
		if _, ok := ring.Trace(quiet, nil); !ok {
			t.Fatal("the quiet tenant's trace was pushed out by the busy one")
		}
		if _, ok := ring.Trace(busy[0], nil); ok {
			t.Fatal("the busy tenant's oldest trace is still kept past its byte cap")
		}
		if _, ok := ring.Trace(busy[len(busy)-1], nil); !ok {
			t.Fatal("the busy tenant's newest trace is not kept")
		}
		var kept int
		for _, id := range busy {
			if _, ok := ring.Trace(id, nil); ok {
				kept++
			}
		}
		if kept == 0 || kept*3*256 > 8<<10 {
			t.Fatalf("%d busy traces kept: over the tenant's 8 KiB", kept)
		}
	})

	t.Run("past the total, the tenant holding the most gives way", func(t *testing.T) {
		small := trace1("small", 1)
		for i := range 10 {
			for range 20 {
				trace1(fmt.Sprint("t", i), 3)
			}
		}
		if _, ok := ring.Trace(small, nil); !ok {
			t.Fatal("the smallest tenant's only trace was pushed out while others held more")
		}
	})
}

func TestTheStdoutExporterWritesOneLinePerSpan(t *testing.T) {
	var out bytes.Buffer
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(telemetry.NewStdoutExporter(&out)))
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), "POST /v1/execute")
	_, child := tr.Start(ctx, "run")
	child.SetAttributes(attribute.String(telemetry.AttrTenantID, "demo"), attribute.Int("n", 3))
	child.End()
	root.End()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got:\n%s", out.String())
	}
	var s telemetry.Span
	if err := json.Unmarshal([]byte(lines[0]), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "run" || s.TenantID != "demo" || s.Attributes["n"] != float64(3) || s.ParentSpanID == "" || s.End.Before(s.Start) || len(s.TraceID) != 32 {
		t.Fatalf("line %s", lines[0])
	}
}
