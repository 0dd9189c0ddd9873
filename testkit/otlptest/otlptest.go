// Package otlptest points the OTel exporters of the process under test at a local OTLP/HTTP
// receiver that keeps every byte exported, for tests that look for what must never be
// exported (canary secrets).
package otlptest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Capture is a running receiver.
type Capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Start starts a receiver, closed at cleanup, and sets the OTEL_* variables so that traces
// and metrics are exported to it over OTLP/HTTP (protobuf).
func Start(t testing.TB) *Capture {
	t.Helper()
	c := &Capture{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.buf.Write(b)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	return c
}

// Bytes is a copy of everything exported so far (request bodies, concatenated).
func (c *Capture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}
