package telemetry

import (
	"context"
	"testing"
)

func TestUnexportedSpansKeepIDsButAreNotRecorded(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	tel, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, span := tel.Tracer().Start(context.Background(), "x")
	defer span.End()
	if !span.SpanContext().IsValid() {
		t.Error("span has no ids; audit events need them")
	}
	if span.IsRecording() {
		t.Error("span is recorded although nothing exports it")
	}
}
