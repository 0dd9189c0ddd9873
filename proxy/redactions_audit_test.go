package proxy

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/secrets"
)

// An upstream echoes the attached credential: the proxy redacts it and counts the
// redaction on the completion record, and that count reaches the audit file itself, not
// only an in-memory recorder (red team: the file's encoder left "redactions" out, so the
// log said nothing was ever scrubbed).
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
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	found := false
	for sc.Scan() {
		var ev audit.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != audit.StageCompletion {
			continue
		}
		found = true
		if ev.Redactions != 1 {
			t.Errorf("completion line records %d redactions, want 1:\n%s", ev.Redactions, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("no completion line in the audit file")
	}
}
