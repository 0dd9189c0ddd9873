package audit

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

func checkEventJSON(t *testing.T, ev Event) {
	t.Helper()
	want, werr := json.Marshal(ev)
	got, gerr := appendEventJSON([]byte("prefix"), &ev, nil)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("encoding/json error %v, ours %v", werr, gerr)
	}
	if werr != nil {
		return
	}
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("encoded differently from encoding/json:\n got %s\nwant prefix%s", got, want)
	}
}

func TestEventJSONMatchesEncodingJSON(t *testing.T) {
	tricky := []string{"", "plain", `quote " backslash \ slash /`, "<script>&amp;</script>", "\x00\x01\x1f\x7f",
		"\b\f\n\r\t", "héllo wörld ✓ 😀", "\u2028\u2029", "bad \xff utf8 \xc3", "\xed\xa0\x80", strings.Repeat("x", 3000)}
	for _, s := range tricky {
		checkEventJSON(t, Event{Time: time.Now(), ID: s, RequestID: s, Stage: Stage(s), Kind: event.Kind(s), SandboxID: s,
			Labels: map[string]string{s: s, "b": "2", "a": s}, Method: s, Scheme: s, Host: s, Port: 443, Path: s, Query: s,
			Phase: s, Decision: event.Decision(s), Rule: s, Reason: s, PolicyRev: s, Creds: []string{s, "x"}, ApprovalID: s, Approver: s,
			Status: 200, BytesIn: -5, BytesOut: 1 << 40, DurationMS: 0.123, TraceID: s, SpanID: s, ErrorClass: s})
	}
	for _, ev := range []Event{
		{},
		{Time: time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC), Labels: map[string]string{}, Creds: []string{}},
		{Time: time.Date(2026, 12, 1, 17, 0, 0, 123400000, time.FixedZone("x", 3600+30*60))},
		{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 25*3600))},
		{DurationMS: 1e-7}, {DurationMS: 1e22}, {DurationMS: -3.5}, {DurationMS: math.NaN()}, {DurationMS: 1234567.000001},
		{Status: -1, Port: 65535},
	} {
		checkEventJSON(t, ev)
	}
}

// FuzzEventJSON holds the hand-written encoder to encoding/json, byte for byte.
func FuzzEventJSON(f *testing.F) {
	f.Add("sbx-1", "/path?<x>", "reason \u2028 \xff", "k", "v", int64(1764608400123456789), 0, 12.5, int64(7))
	f.Add("", "", "", "", "", int64(0), 1, 0.0, int64(0))
	f.Fuzz(func(t *testing.T, a, b, c, k, v string, nanos int64, zone int, dur float64, n int64) {
		ev := Event{Time: time.Unix(0, nanos).In(time.FixedZone("z", zone)), ID: a, RequestID: b, Stage: Stage(c),
			Kind: event.Kind(a), SandboxID: b, Labels: map[string]string{k: v, a: b}, Method: c, Host: a, Port: int(n), Path: b,
			Query: c, Decision: event.Decision(a), Rule: b, Reason: c, Creds: []string{k, v}, Status: int(n), BytesIn: n, BytesOut: -n,
			DurationMS: dur, TraceID: k, ErrorClass: v}
		if k == "" {
			ev.Labels, ev.Creds = nil, nil
		}
		checkEventJSON(t, ev)
	})
}
