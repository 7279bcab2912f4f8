package telemetry

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys shared by every package (STYLE: stable keys).
const (
	KeyTraceID     = "trace_id"
	KeySpanID      = "span_id"
	KeyTenantID    = "tenant_id"
	KeyExecutionID = "execution_id"
)

// NewLogger returns a logger writing cfg.LogFormat (JSON by default) at
// cfg.LogLevel to w, adding trace_id and span_id from the context of every
// *Context call (InfoContext, ...) that carries a span. Invalid format or
// level fall back to JSON / info; Setup validates them first.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	cfg = cfg.WithDefaults()
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(traceHandler{h})
}

// traceHandler adds the span's ids to each record. After WithGroup they land
// inside the group, like any other attribute.
type traceHandler struct{ slog.Handler }

var _ slog.Handler = traceHandler{}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
