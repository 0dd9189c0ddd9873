package telemetry

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger returns a JSON slog logger writing to w at level that adds trace_id and
// span_id from the context of every record logged with one (logger.InfoContext(ctx, ...)).
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(NewTraceHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// NewTraceHandler wraps h so that records carry trace_id and span_id from their context.
func NewTraceHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (t traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return t.Handler.Handle(ctx, r)
}

func (t traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{t.Handler.WithAttrs(attrs)}
}

func (t traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{t.Handler.WithGroup(name)}
}
