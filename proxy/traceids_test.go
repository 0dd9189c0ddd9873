package proxy

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestTraceIDsAsOTelFormats: the ids in audit events are what OTel's own String gives.
func TestTraceIDsAsOTelFormats(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:  trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x19},
	})
	tid, sid := traceIDs(sc)
	if tid != sc.TraceID().String() || sid != sc.SpanID().String() {
		t.Fatalf("traceIDs = %s, %s; want %s, %s", tid, sid, sc.TraceID(), sc.SpanID())
	}
}
