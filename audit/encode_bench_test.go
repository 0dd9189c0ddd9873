package audit

import (
	"testing"
	"time"
)

// BenchmarkEncodeRecord is the encoding of one record as the proxy makes it for a read:
// its id drawn, its fields bounded and written as JSON, without the chain or the file.
func BenchmarkEncodeRecord(b *testing.B) {
	ev := &Event{Time: time.Now().UTC(), RequestID: "760587a233837b0513760ebca1489a62", Stage: StageCompletion,
		Kind: "request", SandboxID: "default", Method: "GET", Scheme: "https", Host: "pypi.org", Port: 443,
		Path: "/simple/requests/", Phase: "request", Decision: "allow", Rule: "registries.read",
		Reason:    "reading from the PyPI package registry pypi.org is allowed",
		PolicyRev: "sha256:8e16bff54818cb4a6f158d5a3700189aefd1a271dba060e81bf57f9006375618",
		Creds:     []string{"pypi-token"}, Status: 200, BytesOut: 20, DurationMS: 0.248,
		TraceID: "be3771abbdf1ae34c6823b60e138608b", SpanID: "49d5ea9eb50ad41e"}
	b.ReportAllocs()
	for b.Loop() {
		body, err := encodeRecord(ev)
		if err != nil {
			b.Fatal(err)
		}
		releaseBody(body)
	}
}
