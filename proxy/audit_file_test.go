package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/secrets"
)

// teeAuditor records each event with two auditors (a recorder in memory and the file).
type teeAuditor struct{ a, b Auditor }

func (t teeAuditor) Record(ctx context.Context, ev *audit.Event) error {
	_ = t.a.Record(ctx, ev)
	return t.b.Record(ctx, ev)
}

// Every event the proxy records reaches the audit file with every field as the proxy set it,
// over plain HTTP and intercepted HTTPS/1.1 and h2, for allowed, denied, scrubbed and quiet
// exchanges (red team: the file's encoder had dropped "redactions" unnoticed, because the
// proxy's tests only read the in-memory recorder).
func TestAuditFileHoldsWhatTheProxyRecorded(t *testing.T) {
	re := newReflectEnv(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	re.proxy.opts.Auditor = teeAuditor{re.audit, sink}
	for _, base := range []string{"http", "https/1.1", "https/2"} {
		for _, p := range []string{"/echo/body", "/echo/header", "/nope", "/open/x", "/quiet/x"} {
			re.exchange(t, re.bases[base], p, "X-A: <\u2028>\r\n", "")
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	mem, file := re.audit.Events(), auditFileEvents(t, path)
	if len(mem) == 0 || len(file) != len(mem) {
		t.Fatalf("file has %d events, memory %d", len(file), len(mem))
	}
	for i := range mem {
		m, f := mem[i], file[i]
		if m.ID == "" {
			m.ID = f.ID
		}
		mb, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var m2 audit.Event
		if err := json.Unmarshal(mb, &m2); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m2, f) {
			t.Errorf("event %d differs:\nmem  %s\nfile %+v", i, mb, f)
		}
	}
	t.Logf("%d events compared", len(mem))
}

// An upstream echoes the attached credential: the proxy redacts it and counts the
// redaction on the completion record, and that count reaches the audit file itself (red
// team: the file's encoder left "redactions" out, so the log said nothing was scrubbed).
func TestRedactionsReachTheAuditFile(t *testing.T) {
	re := newReflectEnv(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: path, Fsync: audit.FsyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	re.proxy.opts.Auditor = sink
	o := parse(re.exchange(t, re.bases["http"], "/echo/body", "", ""))
	if o.status != 200 || !strings.Contains(o.body, secrets.Redaction) {
		t.Fatalf("echo: got %d %q, want 200 and a redaction", o.status, o.body)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range auditFileEvents(t, path) {
		if ev.Stage != audit.StageCompletion {
			continue
		}
		found = true
		if ev.Redactions != 1 {
			t.Errorf("completion record has %d redactions, want 1: %+v", ev.Redactions, ev)
		}
	}
	if !found {
		t.Fatal("no completion record in the audit file")
	}
}

// auditFileEvents is the events of an audit file, its checkpoints left out.
func auditFileEvents(t *testing.T, path string) []audit.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var evs []audit.Event
	for sc.Scan() {
		var ev audit.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line does not parse: %v: %.200s", err, sc.Text())
		}
		if ev.Kind != event.KindCheckpoint {
			evs = append(evs, ev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}
