package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/session"
)

// adopter is an in-memory sandbox.Adopter: it takes over the ids in alive, and refuses
// the others as a backend does when the container is gone.
type adopter struct {
	mu      sync.Mutex
	alive   map[string]bool
	adopted []sandbox.Options
	closed  []string
}

func (a *adopter) Create(context.Context, sandbox.Options) (sandbox.Instance, error) {
	return nil, errors.New("not in this test")
}

func (a *adopter) Adopt(_ context.Context, o sandbox.Options) (sandbox.Instance, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.alive[o.ID] {
		return nil, fmt.Errorf("want one container of sandbox %s, found 0", o.ID)
	}
	a.adopted = append(a.adopted, o)
	return &adoptedInstance{a: a, id: o.ID}, nil
}

type adoptedInstance struct {
	a  *adopter
	id string
}

func (i *adoptedInstance) Run(_ context.Context, c sandbox.Command) (sandbox.Result, error) {
	fmt.Fprintf(c.Stdout, "still here: %s", i.id)
	return sandbox.Result{}, nil
}
func (i *adoptedInstance) Changes() ([]sandbox.Change, error) { return nil, nil }
func (i *adoptedInstance) Patch() ([]byte, error)             { return nil, nil }
func (i *adoptedInstance) Close(context.Context) error {
	i.a.mu.Lock()
	defer i.a.mu.Unlock()
	i.a.closed = append(i.a.closed, i.id)
	return nil
}

// TestAdoptDocker: a restarted airlock takes over the docker sessions of its dead
// predecessor whose sandboxes its backend finds (same labels, limits, env and expiry; the
// record is this process's now; commands run), ends, with a report saying why, those it
// cannot take over, and leaves those of another airlock with a name of its own alone.
func TestAdoptDocker(t *testing.T) {
	dir := t.TempDir()
	expires := time.Now().Add(90 * time.Minute).UTC().Truncate(time.Second)
	for _, id := range []string{"sbx-alive", "sbx-gone"} {
		spec := session.Spec{ID: id, Backend: "docker", Image: "img:1", Labels: map[string]string{"task": "t"},
			Env: map[string]string{"A": "b"}, Memory: "64M", TTL: "2h"}
		b, _ := json.Marshal(map[string]any{"id": id, "owner": "gone:1", "pid": 999999999, "start": 5, "backend": "docker",
			"created": "2026-01-01T00:00:00Z", "spec": spec, "expires": expires})
		if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A session of another airlock with a name of its own is left for that airlock.
	other := `{"id":"sbx-other","owner":"replica-b","named":true,"pid":999999999,"start":5,"backend":"docker","created":"2026-01-01T00:00:00Z","spec":{"backend":"docker","image":"img:1"}}`
	if err := os.WriteFile(filepath.Join(dir, "sbx-other.json"), []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &adopter{alive: map[string]bool{"sbx-alive": true, "sbx-other": true}}
	var images []string
	m, err := session.New(session.Options{StateDir: dir, Owner: "me",
		Base: sandbox.Options{Memory: 128 << 20},
		Backend: func(_ context.Context, name, image string) (sandbox.Backend, error) {
			images = append(images, name+" "+image)
			return a, nil
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	adopted, ended, err := m.Adopt(context.Background())
	if err != nil || strings.Join(adopted, ",") != "sbx-alive" || strings.Join(ended, ",") != "sbx-gone" {
		t.Fatalf("Adopt: adopted %v, ended %v, %v", adopted, ended, err)
	}
	if strings.Join(images, ",") != "docker img:1,docker img:1" {
		t.Errorf("backends asked for: %v", images)
	}
	o := a.adopted[0]
	if o.ID != "sbx-alive" || o.Labels["task"] != "t" || o.Memory != 64<<20 || !strings.Contains(strings.Join(o.Env, " "), "A=b") {
		t.Errorf("adopted with options %+v", o)
	}
	info, err := m.Info("sbx-alive")
	if err != nil || info.State != session.StateRunning || !info.Expires.Equal(expires) || info.Owner != "me" {
		t.Errorf("adopted session: %+v %v, want running, expiring at %s, owned by me", info, err, expires)
	}
	var out strings.Builder
	res, err := m.Exec(context.Background(), "sbx-alive", session.ExecRequest{Argv: []string{"true"}}, session.ExecIO{
		Output: func(_ string, p []byte) error { out.Write(p); return nil }})
	if err != nil || res.ExitCode != 0 || out.String() != "still here: sbx-alive" {
		t.Errorf("exec in the adopted session: %+v %v %q", res, err, out.String())
	}
	var rec struct{ Owner string }
	if b, err := os.ReadFile(filepath.Join(dir, "sbx-alive.json")); err != nil || json.Unmarshal(b, &rec) != nil || rec.Owner != "me" {
		t.Errorf("the record is not this airlock's: %s %v", b, err)
	}
	info, err = m.Info("sbx-gone")
	if err != nil || info.State != session.StateEnded || !strings.Contains(info.EndReason, "could not take the sandbox over") || !strings.Contains(info.EndReason, "found 0") {
		t.Errorf("unadoptable session: %+v %v", info, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sbx-gone.report.json")); err != nil || !strings.Contains(string(b), "found 0") {
		t.Errorf("its report: %s %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sbx-other.json")); err != nil || !strings.Contains(string(b), "replica-b") {
		t.Errorf("another named airlock's record: %s %v, want it left as it was", b, err)
	}
	if _, err := m.Delete(context.Background(), "sbx-alive"); err != nil || strings.Join(a.closed, ",") != "sbx-alive" {
		t.Errorf("delete: %v, closed %v", err, a.closed)
	}
	if _, err := os.Stat(filepath.Join(dir, "sbx-alive.json")); !os.IsNotExist(err) {
		t.Errorf("record left after delete: %v", err)
	}
}

// TestAdoptKeepsExecResults: the results of execs that finished before a crash (status,
// signal, duration, timed-out flag, output byte counts; never output) are answered by
// exec id by the airlock that takes the session over, and by the one that ends it.
func TestAdoptKeepsExecResults(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"sbx-kept", "sbx-lost"} {
		spec := session.Spec{ID: id, Backend: "docker", Image: "img:1"}
		b, _ := json.Marshal(map[string]any{"id": id, "owner": "gone:1", "pid": 999999999, "start": 5, "backend": "docker",
			"created": "2026-01-01T00:00:00Z", "spec": spec})
		if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := func(alive ...string) *session.Manager {
		a := &adopter{alive: map[string]bool{}}
		for _, id := range alive {
			a.alive[id] = true
		}
		m, err := session.New(session.Options{StateDir: dir, Owner: "me",
			Backend: func(context.Context, string, string) (sandbox.Backend, error) { return a, nil }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := m.Adopt(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := start("sbx-kept", "sbx-lost")
	run := func(m *session.Manager, id string) session.ExecResult {
		res, err := m.Exec(context.Background(), id, session.ExecRequest{Argv: []string{"true"}}, session.ExecIO{
			Output: func(string, []byte) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	kept, lost := run(first, "sbx-kept"), run(first, "sbx-lost")
	// first dies: its records name a process that is gone (one Manager per process is
	// what a restart gives; here both live in the test's process).
	for _, id := range []string{"sbx-kept", "sbx-lost"} {
		p := filepath.Join(dir, id+".json")
		b, _ := os.ReadFile(p)
		var rec map[string]any
		json.Unmarshal(b, &rec)
		rec["pid"], rec["start"] = 999999999, 5
		b, _ = json.Marshal(rec)
		os.WriteFile(p, b, 0o600)
		if b, err := os.ReadFile(filepath.Join(dir, id+".execs.jsonl")); err != nil || strings.Contains(string(b), "still here") {
			t.Fatalf("%s's kept results: %q %v: want a file without output", id, b, err)
		}
	}
	// A line torn by the crash is skipped.
	f, _ := os.OpenFile(filepath.Join(dir, "sbx-kept.execs.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"exec_id":"torn","sta`)
	f.Close()

	second := start("sbx-kept")
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	for _, want := range []session.ExecResult{kept, lost} {
		id := "sbx-kept"
		if want.ExecID == lost.ExecID {
			id = "sbx-lost"
		}
		got, err := second.ExecResult(id, want.ExecID)
		if err != nil || got.State != "done" || got.StdoutBytes != want.StdoutBytes || want.StdoutBytes == 0 ||
			got.DurationMS != want.DurationMS || got.ExitCode != want.ExitCode || got.Decision != want.Decision {
			t.Errorf("%s: exec %s after the restart: %+v %v, want %+v", id, want.ExecID, got, err, want)
		}
	}
	if _, err := second.ExecResult("sbx-kept", "torn"); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("the torn line: %v, want not found", err)
	}
	if info, _ := second.Info("sbx-kept"); info.Execs != 1 {
		t.Errorf("execs of the adopted session: %d, want 1", info.Execs)
	}
	if _, err := os.Stat(filepath.Join(dir, "sbx-lost.execs.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the ended session's results file: %v, want it removed", err)
	}
	run(second, "sbx-kept")
	if _, err := second.Delete(context.Background(), "sbx-kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sbx-kept.execs.jsonl")); !os.IsNotExist(err) {
		t.Errorf("results file left after delete: %v", err)
	}
	if _, err := second.ExecResult("sbx-kept", kept.ExecID); err != nil {
		t.Errorf("a deleted session's earlier exec: %v, want its result", err)
	}
}
