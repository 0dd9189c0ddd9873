package audit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-proxy/airlock/internal/event"
)

type memRecorder struct {
	mu  sync.Mutex
	evs []Event
}

func (m *memRecorder) Record(_ context.Context, ev *Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evs = append(m.evs, *ev)
	return nil
}

func (m *memRecorder) events() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Event(nil), m.evs...)
}

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestRefusalLimitSummarisesOnlyRefusals: a sandbox's refusals past the burst are counted
// per rule and decision and written as summaries that add up to exactly what was
// suppressed; forwarded requests' decision and completion records, approvals, lifecycle
// events and an intercepted CONNECT are written one by one however many there are; other
// sandboxes keep their own budget; the interval refills it.
func TestRefusalLimitSummarisesOnlyRefusals(t *testing.T) {
	mem := &memRecorder{}
	clock := &stepClock{now: time.Unix(1_800_000_000, 0)}
	l := NewRefusalLimit(mem, RefusalLimitOptions{Burst: 5, Interval: time.Second, Summary: time.Hour, Now: clock.Now})
	ctx := context.Background()
	rec := func(ev Event) {
		if err := l.Record(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	deny := func(sb, rule string) Event {
		return Event{Kind: "request", SandboxID: sb, Decision: "deny", Rule: rule, Status: 403}
	}
	for i := range 100 {
		rec(deny("sbx-a", "test.default"))
		if i%2 == 0 {
			rec(Event{Kind: "connect", SandboxID: "sbx-a", Decision: "error", Rule: "protocol", Status: 400, ErrorClass: "bad_request"})
		}
		rec(Event{Kind: "request", SandboxID: "sbx-a", Stage: StageDecision, Decision: "allow", Rule: "ok"})
		rec(Event{Kind: "request", SandboxID: "sbx-a", Stage: StageCompletion, Decision: "allow", Rule: "ok", Status: 502, ErrorClass: "upstream"})
		rec(Event{Kind: "request", SandboxID: "sbx-a", Decision: "deny", Rule: "w", ApprovalID: "apr-1", Status: 403})
		rec(Event{Kind: "connect", SandboxID: "sbx-a", Decision: "allow", Rule: "c"})
		rec(Event{Kind: "sandbox.start", SandboxID: "sbx-a"})
	}
	for range 3 {
		rec(deny("sbx-b", "test.default"))
	}
	count := func(f func(Event) bool) (n int) {
		for _, ev := range mem.events() {
			if f(ev) {
				n++
			}
		}
		return n
	}
	for name, f := range map[string]func(Event) bool{
		"decision":   func(ev Event) bool { return ev.Stage == StageDecision },
		"completion": func(ev Event) bool { return ev.Stage == StageCompletion },
		"approval":   func(ev Event) bool { return ev.ApprovalID != "" },
		"connect":    func(ev Event) bool { return ev.Kind == "connect" && ev.Decision == "allow" },
		"lifecycle":  func(ev Event) bool { return ev.Kind == "sandbox.start" },
	} {
		if n := count(f); n != 100 {
			t.Errorf("%s records: %d, want all 100", name, n)
		}
	}
	single := count(func(ev Event) bool { return IsRefusal(&ev) && ev.SandboxID == "sbx-a" })
	if single != 5 {
		t.Errorf("sbx-a refusals written one by one: %d, want the burst of 5", single)
	}
	if n := count(func(ev Event) bool { return IsRefusal(&ev) && ev.SandboxID == "sbx-b" }); n != 3 {
		t.Errorf("sbx-b refusals: %d, want all 3 (its own budget)", n)
	}
	clock.Add(2 * time.Second) // two more
	for range 3 {
		rec(deny("sbx-a", "test.default"))
	}
	if n := count(func(ev Event) bool { return IsRefusal(&ev) && ev.SandboxID == "sbx-a" }); n != 7 {
		t.Errorf("after 2s: %d refusals written, want 7", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	rules := map[string]int64{}
	for _, ev := range mem.events() {
		if ev.Kind != event.KindRefusalsSuppressed {
			continue
		}
		total += ev.Suppressed
		rules[ev.Rule+"/"+string(ev.Decision)] += ev.Suppressed
		if ev.SandboxID != "sbx-a" || !strings.Contains(ev.Reason, "refusals suppressed for sandbox sbx-a, rule "+ev.Rule) {
			t.Errorf("summary: %+v", ev)
		}
	}
	// 100 denies + 50 connect errors + 3 later = 153 refusals; 7 written one by one.
	if total != 153-7 || rules["protocol/error"] == 0 || rules["test.default/deny"] == 0 {
		t.Errorf("suppressed: total %d by rule %v, want 146 across both rules", total, rules)
	}
}

// TestRefusalLimitInTheSignedLog: summaries go through the sink like any record (they are
// chained and verify), and the sink bounds long fields with a marker.
func TestRefusalLimitInTheSignedLog(t *testing.T) {
	path := t.TempDir() + "/audit.jsonl"
	s, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	l := NewRefusalLimit(s, RefusalLimitOptions{Burst: 1, Summary: time.Hour})
	long := strings.Repeat("é", 3000)
	for range 10 {
		if err := l.Record(context.Background(), &Event{Kind: "request", SandboxID: "sbx", Decision: "deny", Rule: "r", Path: "/" + long, Host: long, Method: long}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, path)
	var summaries int
	for _, ev := range evs {
		if ev.Kind == event.KindRefusalsSuppressed {
			summaries++
			if ev.Suppressed != 9 {
				t.Errorf("summary counts %d, want 9", ev.Suppressed)
			}
			continue
		}
		for name, v := range map[string]string{"path": ev.Path, "host": ev.Host, "method": ev.Method} {
			if len(v) > MaxPathBytes+40 || !strings.Contains(v, "…[truncated ") {
				t.Errorf("%s: %d bytes, want it cut with a marker", name, len(v))
			}
			if !utf8Valid(v) {
				t.Errorf("%s cut inside a character", name)
			}
		}
	}
	if summaries != 1 {
		t.Errorf("summaries: %d, want 1", summaries)
	}
}

func readEvents(t *testing.T, path string) []Event {
	t.Helper()
	if _, err := Verify([]string{path}, nil); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	var out []Event
	for _, l := range readLines(t, path) {
		var ev Event
		if err := jsonUnmarshal(l, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind != event.KindCheckpoint {
			out = append(out, ev)
		}
	}
	return out
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
