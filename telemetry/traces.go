package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Traces without a collector: a span exporter that writes each finished
// span as one JSON line (telemetry.traces_stdout, serve --traces stdout),
// and SpanRing, which keeps the recent spans of each tenant's traces in
// memory for GET /v1/admin/traces/{trace_id} when no OTLP endpoint is set.
// Both write Span, a bounded copy of a finished span.

// AttrTenantID is the span attribute naming the tenant a span works for:
// the gateway sets it on the request's spans once the token is verified
// (the spans started after carry the tenant in their context, WithTenant).
const AttrTenantID = "execgate.tenant_id"

// Bounds of a Span: everything a span carries is bounded before it is
// kept or written, whatever a caller or a tool put into it.
const (
	maxSpanNameBytes  = 128
	maxSpanAttrs      = 32
	maxAttrKeyBytes   = 64
	maxAttrValueBytes = 256
	maxStatusBytes    = 256
	spanOverheadBytes = 256 // the fixed fields, as SpanRing counts them
)

// Span is a finished span as SpanRing keeps it and the stdout exporter
// writes it: ids, name, kind, times, status and at most 32 attributes,
// strings clipped to 256 bytes.
type Span struct {
	TraceID       string         `json:"trace_id"`
	SpanID        string         `json:"span_id"`
	ParentSpanID  string         `json:"parent_span_id,omitempty"`
	Name          string         `json:"name"`
	Kind          string         `json:"kind"`
	Start         time.Time      `json:"start"`
	End           time.Time      `json:"end"`
	DurationMS    float64        `json:"duration_ms"`
	Status        string         `json:"status"` // unset, ok or error
	StatusMessage string         `json:"status_message,omitempty"`
	TenantID      string         `json:"tenant_id,omitempty"`
	Attributes    map[string]any `json:"attributes,omitempty"`
	// AttributesDropped counts the attributes past the 32 kept.
	AttributesDropped int `json:"attributes_dropped,omitempty"`

	bytes int64 // what SpanRing counts for it
}

// spanOf is s bounded, for tenant.
func spanOf(s sdktrace.ReadOnlySpan, tenant string) Span {
	sc := s.SpanContext()
	out := Span{
		TraceID:  sc.TraceID().String(),
		SpanID:   sc.SpanID().String(),
		Name:     clipString(s.Name(), maxSpanNameBytes),
		Kind:     s.SpanKind().String(),
		Start:    s.StartTime().UTC(),
		End:      s.EndTime().UTC(),
		TenantID: tenant,
	}
	if p := s.Parent(); p.IsValid() {
		out.ParentSpanID = p.SpanID().String()
	}
	out.DurationMS = float64(out.End.Sub(out.Start).Microseconds()) / 1000
	switch st := s.Status(); st.Code {
	case codes.Error:
		out.Status, out.StatusMessage = "error", clipString(st.Description, maxStatusBytes)
	case codes.Ok:
		out.Status = "ok"
	default:
		out.Status = "unset"
	}
	size := spanOverheadBytes + len(out.Name) + len(out.StatusMessage) + len(tenant)
	attrs := s.Attributes()
	if len(attrs) > 0 {
		out.Attributes = make(map[string]any, min(len(attrs), maxSpanAttrs))
	}
	for _, kv := range attrs {
		if len(out.Attributes) == maxSpanAttrs {
			out.AttributesDropped++
			continue
		}
		k := clipString(string(kv.Key), maxAttrKeyBytes)
		v := attrValue(kv.Value)
		out.Attributes[k] = v
		size += len(k) + 16
		if s, ok := v.(string); ok {
			size += len(s)
		}
	}
	out.AttributesDropped += s.DroppedAttributes()
	out.bytes = int64(size)
	return out
}

// attrValue is v as JSON: booleans and numbers as they are, strings and
// slices as a clipped string.
func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.BOOL:
		return v.AsBool()
	case attribute.INT64:
		return v.AsInt64()
	case attribute.FLOAT64:
		return v.AsFloat64()
	case attribute.STRING:
		return clipString(v.AsString(), maxAttrValueBytes)
	default:
		return clipString(v.String(), maxAttrValueBytes)
	}
}

// clipString cuts s to at most n bytes at a rune boundary.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tenantKey is the context key of WithTenant.
type tenantKey struct{}

// WithTenant returns ctx naming the tenant its spans work for (the
// verified token's); SpanRing files the spans started from it under that
// tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom is the tenant WithTenant put in ctx ("" for none).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// RingOptions bound a SpanRing. Zero fields take the defaults.
type RingOptions struct {
	// MaxSpansPerTrace is the most spans kept of one trace of one tenant;
	// later ones are counted (Trace.DroppedSpans). Default 512.
	MaxSpansPerTrace int
	// TenantBytes bounds the spans one tenant's traces keep together; past
	// it the tenant's oldest traces go. Default 4 MiB.
	TenantBytes int64
	// TotalBytes bounds all tenants together; past it the oldest trace of
	// the tenant holding the most goes. Default 32 MiB.
	TotalBytes int64
	// MaxLive bounds the started spans whose tenant the ring remembers until
	// they end. Default 65536.
	MaxLive int
}

// Defaults of RingOptions.
const (
	DefaultRingSpansPerTrace = 512
	DefaultRingTenantBytes   = 4 << 20
	DefaultRingTotalBytes    = 32 << 20
	defaultRingLive          = 1 << 16
)

// SpanRing is a span processor that keeps the recent finished spans of
// each tenant's traces in memory, bounded in spans per trace and in bytes
// per tenant and in all (oldest traces go first, from the tenant holding
// the most when all are full, so one tenant's load does not push out
// another's). A span belongs to the tenant in its start context
// (WithTenant) or, failing that, its execgate.tenant_id attribute; spans
// of no tenant are not kept. Register it on the TracerProvider (Setup's
// extra processors); the gateway reads it (Trace). Safe for concurrent use.
type SpanRing struct {
	opts RingOptions

	mu      sync.Mutex // guards live, traces, tenants, total
	live    map[trace.SpanID]string
	traces  map[ringKey]*ringTrace
	tenants map[string]*ringTenant
	total   int64
}

type ringKey struct {
	tenant string
	trace  trace.TraceID
}

type ringTrace struct {
	spans   []Span
	bytes   int64
	dropped int
}

type ringTenant struct {
	order []trace.TraceID // oldest first
	bytes int64
}

var _ sdktrace.SpanProcessor = (*SpanRing)(nil)

// NewSpanRing returns an empty ring bounded by opts.
func NewSpanRing(opts RingOptions) *SpanRing {
	if opts.MaxSpansPerTrace <= 0 {
		opts.MaxSpansPerTrace = DefaultRingSpansPerTrace
	}
	if opts.TenantBytes <= 0 {
		opts.TenantBytes = DefaultRingTenantBytes
	}
	if opts.TotalBytes <= 0 {
		opts.TotalBytes = DefaultRingTotalBytes
	}
	if opts.MaxLive <= 0 {
		opts.MaxLive = defaultRingLive
	}
	return &SpanRing{opts: opts, live: map[trace.SpanID]string{}, traces: map[ringKey]*ringTrace{}, tenants: map[string]*ringTenant{}}
}

// OnStart remembers the tenant of a span started from a tenant's context.
func (r *SpanRing) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	tenant := TenantFrom(parent)
	if tenant == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.live) < r.opts.MaxLive {
		r.live[s.SpanContext().SpanID()] = tenant
	}
}

// OnEnd keeps the finished span under its tenant's trace.
func (r *SpanRing) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().SpanID()
	r.mu.Lock()
	tenant, ok := r.live[id]
	delete(r.live, id)
	r.mu.Unlock()
	if !ok {
		for _, kv := range s.Attributes() {
			if kv.Key == AttrTenantID {
				tenant = kv.Value.AsString()
			}
		}
	}
	if tenant == "" {
		return
	}
	sp := spanOf(s, clipString(tenant, maxAttrValueBytes))
	r.mu.Lock()
	defer r.mu.Unlock()
	key := ringKey{tenant: sp.TenantID, trace: s.SpanContext().TraceID()}
	tn := r.tenants[key.tenant]
	if tn == nil {
		tn = &ringTenant{}
		r.tenants[key.tenant] = tn
	}
	tr := r.traces[key]
	if tr == nil {
		tr = &ringTrace{}
		r.traces[key] = tr
		tn.order = append(tn.order, key.trace)
	}
	if len(tr.spans) >= r.opts.MaxSpansPerTrace || tr.bytes+sp.bytes > r.opts.TenantBytes {
		tr.dropped++
		return
	}
	tr.spans = append(tr.spans, sp)
	tr.bytes += sp.bytes
	tn.bytes += sp.bytes
	r.total += sp.bytes
	for tn.bytes > r.opts.TenantBytes && len(tn.order) > 1 {
		r.evictOldest(key.tenant)
	}
	for r.total > r.opts.TotalBytes {
		r.evictOldest(r.heaviest())
	}
}

// heaviest is the tenant whose traces hold the most bytes.
func (r *SpanRing) heaviest() string {
	var who string
	var most int64 = -1
	for t, tn := range r.tenants {
		if tn.bytes > most {
			who, most = t, tn.bytes
		}
	}
	return who
}

// evictOldest drops tenant's oldest trace.
func (r *SpanRing) evictOldest(tenant string) {
	tn := r.tenants[tenant]
	if tn == nil || len(tn.order) == 0 {
		return
	}
	key := ringKey{tenant: tenant, trace: tn.order[0]}
	tn.order = tn.order[1:]
	if tr := r.traces[key]; tr != nil {
		tn.bytes -= tr.bytes
		r.total -= tr.bytes
		delete(r.traces, key)
	}
	if len(tn.order) == 0 {
		delete(r.tenants, tenant)
	}
}

// Trace is what SpanRing keeps of one trace.
type Trace struct {
	// Spans are the kept spans, by start time.
	Spans []Span `json:"spans"`
	// DroppedSpans counts the spans of the trace that were not kept (past
	// the per-trace bounds).
	DroppedSpans int `json:"dropped_spans"`
}

// Trace returns the kept spans of trace id that belong to tenants (nil:
// every tenant); ok is false when there are none.
func (r *SpanRing) Trace(id trace.TraceID, tenants []string) (t Trace, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tenants == nil {
		for tenant := range r.tenants {
			tenants = append(tenants, tenant)
		}
	}
	for _, tenant := range tenants {
		tr := r.traces[ringKey{tenant: tenant, trace: id}]
		if tr == nil {
			continue
		}
		ok = true
		t.Spans = append(t.Spans, tr.spans...)
		t.DroppedSpans += tr.dropped
	}
	slices.SortStableFunc(t.Spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	return t, ok
}

// Shutdown does nothing: the ring holds no resources.
func (r *SpanRing) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing: spans are kept as they end.
func (r *SpanRing) ForceFlush(context.Context) error { return nil }

// stdoutExporter writes each span as one JSON line (Span) to w.
type stdoutExporter struct {
	mu sync.Mutex // guards w and enc
	w  io.Writer
}

// NewStdoutExporter returns a span exporter writing one JSON line per
// finished span to w (serve --traces stdout): ids, name, times and
// duration, status and the bounded attributes.
func NewStdoutExporter(w io.Writer) sdktrace.SpanExporter { return &stdoutExporter{w: w} }

func (e *stdoutExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		if err := ctx.Err(); err != nil {
			return err
		}
		tenant := ""
		for _, kv := range s.Attributes() {
			if kv.Key == AttrTenantID {
				tenant = kv.Value.AsString()
			}
		}
		b, err := json.Marshal(spanOf(s, clipString(tenant, maxAttrValueBytes)))
		if err != nil {
			return fmt.Errorf("encoding span: %w", err)
		}
		if _, err := e.w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("writing span: %w", err)
		}
	}
	return nil
}

func (e *stdoutExporter) Shutdown(context.Context) error { return nil }
