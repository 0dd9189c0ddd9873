package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
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
			Status: 200, BytesIn: -5, BytesOut: 1 << 40, Redactions: 3, DurationMS: 0.123, TraceID: s, SpanID: s, ErrorClass: s,
			ExecID: s, Command: []string{s, "-c"}, Suppressed: 9})
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

// Every field of Event, set alone, is encoded as encoding/json encodes it (red team: the
// hand-written encoder had left out "redactions", so the audit file said no credential
// was ever scrubbed from a response while spans and the in-memory recorder said one was).
func TestEveryEventFieldEncoded(t *testing.T) {
	typ := reflect.TypeOf(Event{})
	for i := range typ.NumField() {
		ev := Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: "x"}
		v := reflect.ValueOf(&ev).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("v<\u2028\xff")
		case reflect.Int, reflect.Int64:
			v.SetInt(7)
		case reflect.Float64:
			v.SetFloat(1.5)
		case reflect.Slice:
			v.Set(reflect.ValueOf([]string{"a", "b"}))
		case reflect.Map:
			v.Set(reflect.ValueOf(map[string]string{"k": "v"}))
		case reflect.Struct:
			if v.Type() != reflect.TypeOf(time.Time{}) {
				t.Fatalf("field %s: struct type %s not handled", typ.Field(i).Name, v.Type())
			}
			continue // Time is set on every event above
		default:
			t.Fatalf("field %s: kind %s not handled: give the test a value for it", typ.Field(i).Name, v.Kind())
		}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendEventJSON(nil, &ev, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("field %s (err %v):\n got %s\nwant %s", typ.Field(i).Name, err, got, want)
		}
	}
}

// FuzzEventJSON holds the hand-written encoder to encoding/json, byte for byte.
func FuzzEventJSON(f *testing.F) {
	f.Add("sbx-1", "/path?<x>", "reason \u2028 \xff", "k", "v", int64(1764608400123456789), 0, 12.5, int64(7))
	f.Add("", "", "", "", "", int64(0), 1, 0.0, int64(0))
	f.Fuzz(func(t *testing.T, a, b, c, k, v string, nanos int64, zone int, dur float64, n int64) {
		ev := Event{Time: fuzzTime(nanos, zone), ID: a, RequestID: b, Stage: Stage(c),
			Kind: event.Kind(a), SandboxID: b, Labels: map[string]string{k: v, a: b}, Method: c, Host: a, Port: int(n), Path: b,
			Query: c, Decision: event.Decision(a), Rule: b, Reason: c, Creds: []string{k, v}, Status: int(n), BytesIn: n, BytesOut: -n,
			Redactions: n, DurationMS: dur, TraceID: k, SpanID: v, ErrorClass: v, ExecID: c, Command: []string{v, k},
			PolicyRev: a, ApprovalID: b, Approver: c, Scheme: k, Phase: v, Suppressed: -n}
		if k == "" {
			ev.Labels, ev.Creds, ev.Command = nil, nil, nil
		}
		checkEventJSON(t, ev)
	})
}

// A new record's id (appendEventJSON's id argument, on the fast path and the slow one) is
// encoded as encoding/json encodes it in ID, and the event itself keeps its ID.
func FuzzEventJSONWithID(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), "old-id", "p\"<>&\u2028\xff\x00", int64(1764608400123456789), 0, 1.5)
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), "", "", int64(-1<<62), 25*3600, 1e22)
	f.Fuzz(func(t *testing.T, idb []byte, oldID, s string, nanos int64, zone int, dur float64) {
		if len(idb) < 16 {
			return
		}
		var id [16]byte
		copy(id[:], idb)
		ev := Event{Time: fuzzTime(nanos, zone), ID: oldID, Kind: event.Kind(s), SandboxID: s,
			Path: s, Query: s, Reason: s, Labels: map[string]string{s: s}, Creds: []string{s}, DurationMS: dur}
		cp := ev
		cp.ID = hex.EncodeToString(id[:])
		want, werr := json.Marshal(cp)
		got, gerr := appendEventJSON([]byte("pre"), &ev, &id)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("encoding/json error %v, ours %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, append([]byte("pre"), want...)) {
			t.Fatalf("encoded differently from encoding/json:\n got %s\nwant pre%s", got, want)
		}
		if ev.ID != oldID {
			t.Fatalf("the event's ID changed to %q", ev.ID)
		}
	})
}

// fuzzTime is a fuzzer's time: in UTC (the sink's own stamp, encoded by appendUTC) when
// zone is 0, else in a fixed zone of that offset.
func fuzzTime(nanos int64, zone int) time.Time {
	if zone == 0 {
		return time.Unix(0, nanos).UTC()
	}
	return time.Unix(0, nanos).In(time.FixedZone("z", zone))
}

// appendUTC writes a UTC time as time's RFC3339Nano layout does, for times across the
// whole range (trailing zeros of the fraction dropped, no fraction when it is zero), and
// refuses the years encoding/json refuses.
func TestAppendUTCMatchesRFC3339Nano(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{time.Unix(0, 0).UTC(), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 20, 0, 0, 100, time.UTC),
		time.Date(2026, 2, 28, 1, 2, 3, 120000000, time.UTC), time.Date(2024, 2, 29, 0, 0, 0, 1, time.UTC)}
	for range 100000 {
		sec := rng.Int64N(253402300800+62167219200) - 62167219200 // years 0 to 9999
		ns := rng.Int64N(1e9)
		switch rng.IntN(3) {
		case 0:
			ns -= ns % 1000000
		case 1:
			ns = 0
		}
		times = append(times, time.Unix(sec, ns).UTC())
	}
	for _, tm := range times {
		got, ok := appendUTC([]byte("x"), tm)
		if want := tm.AppendFormat([]byte("x"), time.RFC3339Nano); !ok || !bytes.Equal(got, want) {
			t.Fatalf("appendUTC(%v) = %q, %v; want %q", tm, got, ok, want)
		}
	}
	for _, tm := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC)} {
		if got, ok := appendUTC([]byte("x"), tm); ok || string(got) != "x" {
			t.Errorf("appendUTC(%v) = %q, %v; want refused with nothing appended", tm, got, ok)
		}
		ev := Event{Time: tm, Kind: "request"}
		if _, err := appendEventJSON(nil, &ev, nil); err == nil {
			t.Errorf("an event at %v encoded; encoding/json refuses it", tm)
		}
	}
}
