package session_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

func TestMain(m *testing.M) {
	native.Init()
	os.Exit(m.Run())
}

var testState = filepath.Join(os.TempDir(), "airlock-session-test-state")

// recorder is an in-memory Auditor.
type recorder struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (r *recorder) Record(_ context.Context, ev audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return nil
}

func (r *recorder) execs() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, ev := range r.evs {
		if ev.Kind == "sandbox.exec" {
			out = append(out, ev)
		}
	}
	return out
}

// approver is an in-memory Approver that answers with state and remembers what it saw.
type approver struct {
	state approval.State
	mu    sync.Mutex
	seen  []approval.Request
}

func (a *approver) Hold(_ context.Context, r approval.Request) (approval.Result, error) {
	a.mu.Lock()
	a.seen = append(a.seen, r)
	a.mu.Unlock()
	return approval.Result{ID: "apr-1", State: a.state, DecidedBy: "oncall"}, nil
}

// execPolicy denies rm, holds git push, allows the rest.
const execPolicy = `package airlock
import rego.v1
decision := {"action": "deny", "rule": "exec.rm", "reason": "no rm here"} if {
	input.phase == "exec"
	input.exec.argv[0] == "rm"
} else := {"action": "approve", "rule": "exec.push", "reason": "pushes need a human"} if {
	input.phase == "exec"
	input.exec.argv[0] == "git"
} else := {"action": "allow", "rule": "exec.other"}
`

type env struct {
	m   *session.Manager
	srv *httptest.Server
	aud *recorder
	apr *approver
	dir string
	crd *session.Credentials
}

func newEnv(t *testing.T, mod func(*session.Options)) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	pdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pdir, "p.rego"), []byte(execPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(context.Background(), rego.Options{Dir: pdir})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{aud: &recorder{}, apr: &approver{state: approval.StateDenied}, dir: t.TempDir(), crd: session.NewCredentials()}
	o := session.Options{
		WorkspaceRoots: []string{os.TempDir()},
		Base:           sandbox.Options{Backend: &native.Native{StateDir: testState}},
		Decider:        eng,
		Approve:        e.apr,
		Auditor:        e.aud,
		StateDir:       filepath.Join(e.dir, "sessions"),
		Owner:          "test-owner",
	}
	if mod != nil {
		mod(&o)
	}
	e.m, err = session.New(o, e.crd)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	e.m.Routes(r)
	e.srv = httptest.NewServer(r)
	t.Cleanup(func() {
		e.srv.Close()
		if err := e.m.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func (e *env) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func (e *env) create(t *testing.T, spec session.Spec) session.Info {
	t.Helper()
	code, b := e.do(t, "POST", "/v1/sandboxes", spec)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var info session.Info
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// exec runs argv through the plain streamed form and returns stdout, stderr and the result.
func (e *env) exec(t *testing.T, id string, req session.ExecRequest) (string, string, session.ExecResult, int) {
	t.Helper()
	j, _ := json.Marshal(req)
	resp, err := http.Post(e.srv.URL+"/v1/sandboxes/"+id+"/exec", "application/json", bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return "", buf.String(), session.ExecResult{}, resp.StatusCode
	}
	var stdout, stderr strings.Builder
	var res session.ExecResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f session.Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Text(), err)
		}
		switch {
		case f.Result != nil:
			res = *f.Result
		case f.Stream == "stdout":
			stdout.Write(f.Data)
		case f.Stream == "stderr":
			stderr.Write(f.Data)
		}
	}
	return stdout.String(), stderr.String(), res, resp.StatusCode
}

func TestSessionLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ws := t.TempDir()
	info := e.create(t, session.Spec{Workspace: ws, Labels: map[string]string{"task": "t1"}, Env: map[string]string{"GREETING": "hi"}})
	if info.State != session.StateRunning || !strings.HasPrefix(info.ID, "sbx-") {
		t.Fatalf("created %+v", info)
	}
	// Commands share the sandbox: a file written by one is read by the next.
	out, _, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sh", "-c", "echo $GREETING > /workspace/a; echo $X; echo err >&2"}, Env: map[string]string{"X": "x1"}})
	if out != "x1\n" || res.ExitCode != 0 || res.ExecID == "" || res.Decision != "allow" {
		t.Fatalf("exec 1: out %q res %+v", out, res)
	}
	out, _, res, _ = e.exec(t, info.ID, session.ExecRequest{Argv: []string{"cat", "/workspace/a"}})
	if out != "hi\n" {
		t.Fatalf("exec 2: out %q res %+v", out, res)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a")); string(b) != "hi\n" {
		t.Errorf("host workspace file = %q", b)
	}
	_, _, res, _ = e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}})
	if res.ExitCode != 3 {
		t.Errorf("exit status %d, want 3", res.ExitCode)
	}
	_, _, res, _ = e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: "200ms"})
	if !res.TimedOut || res.ExitCode != sandbox.ExitTimeout {
		t.Errorf("timeout: %+v", res)
	}
	// The result is there again by exec id.
	code, b := e.do(t, "GET", "/v1/sandboxes/"+info.ID+"/execs/"+res.ExecID, nil)
	var again session.ExecResult
	_ = json.Unmarshal(b, &again)
	if code != 200 || !again.TimedOut || again.ExecID != res.ExecID {
		t.Errorf("exec result again: %d %s", code, b)
	}
	code, b = e.do(t, "GET", "/v1/sandboxes", nil)
	if code != 200 || !strings.Contains(string(b), info.ID) {
		t.Errorf("list: %d %s", code, b)
	}
	code, b = e.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil)
	var rep sandbox.Report
	_ = json.Unmarshal(b, &rep)
	if code != 200 || rep.SandboxID != info.ID || rep.Runs < 4 || rep.End.IsZero() {
		t.Fatalf("delete: %d %s", code, b)
	}
	// Every exec is an audit event with its command, status and exec id.
	evs := e.aud.execs()
	if len(evs) != 4 || evs[0].Command[0] != "sh" || evs[2].Status != 3 || evs[0].ExecID == "" || evs[0].Labels["task"] != "t1" || evs[0].DurationMS <= 0 || evs[0].BytesIn != 7 {
		t.Errorf("audit: %+v", evs)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sessions", info.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("the session's record is left: %v", err)
	}
}

func TestExecPolicy(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	_, stderr, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"rm", "-rf", "/tmp/x"}})
	if res.ExitCode != session.ExitRefused || res.Rule != "exec.rm" || !strings.Contains(stderr, "exec.rm") || !strings.Contains(stderr, "no rm here") {
		t.Errorf("denied: %q %+v", stderr, res)
	}
	// Held: the approver sees the command; denied, it does not run.
	_, stderr, res, _ = e.exec(t, info.ID, session.ExecRequest{Argv: []string{"git", "push", "origin", "main"}, Cwd: "/tmp"})
	if res.ExitCode != session.ExitRefused || res.ApprovalID != "apr-1" || !strings.Contains(stderr, "denied") {
		t.Errorf("held and denied: %q %+v", stderr, res)
	}
	if len(e.apr.seen) != 1 || e.apr.seen[0].Method != "EXEC" || !strings.Contains(e.apr.seen[0].URL, "git push origin main") ||
		!strings.Contains(string(e.apr.seen[0].Body), `"argv":["git","push","origin","main"]`) {
		t.Errorf("approver saw %+v", e.apr.seen)
	}
	e.apr.state = approval.StateApproved
	_, _, res, _ = e.exec(t, info.ID, session.ExecRequest{Argv: []string{"git", "--version"}})
	if res.ExitCode != 0 || res.Decision != "approved" {
		t.Errorf("approved: %+v", res)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, func(o *session.Options) { o.MaxFileBytes = 1024 })
	info := e.create(t, session.Spec{Workspace: t.TempDir() + ":cow"})
	id := info.ID
	// A host directory outside sessions.workspace_roots, named or reached through a link
	// (found by an attack: an issuer token mounted /etc read-write).
	etcLink := filepath.Join(t.TempDir(), "etc")
	if err := os.Symlink("/etc", etcLink); err != nil {
		t.Fatal(err)
	}
	// A file that never ends (found by an attack: airlock read /dev/zero until the client
	// gave up).
	if _, _, res, _ := e.exec(t, id, session.ExecRequest{Argv: []string{"ln", "-s", "/dev/zero", "/tmp/zero"}}); res.ExitCode != 0 {
		t.Fatalf("ln: %+v", res)
	}
	for _, c := range []struct {
		name, method, path string
		body               any
		want               int
		says               string
	}{
		{"unknown id", "GET", "/v1/sandboxes/sbx-nope", nil, 404, "no sandbox"},
		{"invalid id", "GET", "/v1/sandboxes/SBX", nil, 400, "invalid sandbox id"},
		{"exec unknown id", "POST", "/v1/sandboxes/sbx-nope/exec", session.ExecRequest{Argv: []string{"true"}}, 404, "no sandbox"},
		{"empty argv", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{}, 400, "argv is empty"},
		{"tty", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{Argv: []string{"sh"}, TTY: true}, 400, "terminals"},
		{"relative cwd", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{Argv: []string{"true"}, Cwd: "src"}, 400, "cwd"},
		{"bad timeout", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{Argv: []string{"true"}, Timeout: "-1s"}, 400, "timeout"},
		{"unknown field", "POST", "/v1/sandboxes/" + id + "/exec", []byte(`{"argv":["true"],"cmd":"x"}`), 400, "unknown field"},
		{"stdin without websocket", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{Argv: []string{"cat"}, Stdin: true}, 400, "WebSocket"},
		{"escaping path", "GET", "/v1/sandboxes/" + id + "/files?path=/workspace/../etc/passwd", nil, 400, "not clean"},
		{"path outside", "GET", "/v1/sandboxes/" + id + "/files?path=/etc/passwd", nil, 400, "outside the workspace"},
		{"relative path", "PUT", "/v1/sandboxes/" + id + "/files?path=a.txt", []byte("x"), 400, "not absolute"},
		{"oversized put", "PUT", "/v1/sandboxes/" + id + "/files?path=/tmp/big", bytes.Repeat([]byte("x"), 2048), 413, "at most 1024"},
		{"missing file", "GET", "/v1/sandboxes/" + id + "/files?path=/tmp/none", nil, 404, "No such file"},
		{"bad ttl", "POST", "/v1/sandboxes", session.Spec{TTL: "soon"}, 400, "ttl"},
		{"bad backend", "POST", "/v1/sandboxes", session.Spec{Backend: "vm"}, 400, "backend"},
		{"bad workspace", "POST", "/v1/sandboxes", session.Spec{Workspace: "/tmp:rx"}, 400, "workspace"},
		{"workspace outside the roots", "POST", "/v1/sandboxes", session.Spec{Workspace: "/etc"}, 400, "workspace_roots"},
		{"workspace linked outside the roots", "POST", "/v1/sandboxes", session.Spec{Workspace: etcLink + ":ro"}, 400, "workspace_roots"},
		{"endless file", "GET", "/v1/sandboxes/" + id + "/files?path=/tmp/zero", nil, 413, "max_file_bytes"},
		{"bad env", "POST", "/v1/sandboxes", session.Spec{Env: map[string]string{"A=B": "c"}}, 400, "env"},
		{"duplicate id", "POST", "/v1/sandboxes", session.Spec{ID: id}, 409, "already exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := e.do(t, c.method, c.path, c.body)
			if code != c.want || !strings.Contains(string(b), c.says) {
				t.Errorf("got %d %s, want %d saying %q", code, b, c.want, c.says)
			}
		})
	}
	// An oversized file in the sandbox is refused on the way out, whole.
	_, _, res, _ := e.exec(t, id, session.ExecRequest{Argv: []string{"sh", "-c", "head -c 4096 /dev/zero > /tmp/big"}})
	if res.ExitCode != 0 {
		t.Fatal(res)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/tmp/big", nil); code != 413 {
		t.Errorf("oversized get: %d %s", code, b)
	}
	// Put then get, and the cow changes and patch.
	if code, b := e.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/workspace/new.txt", []byte("hello\n")); code != 204 {
		t.Fatalf("put: %d %s", code, b)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/workspace/new.txt", nil); code != 200 || string(b) != "hello\n" {
		t.Errorf("get: %d %q", code, b)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/"+id+"/patch", nil); code != 200 || !strings.Contains(string(b), "+hello") {
		t.Errorf("patch: %d %s", code, b)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/"+id+"/changes", nil); code != 200 || !strings.Contains(string(b), "new.txt") {
		t.Errorf("changes: %d %s", code, b)
	}
	// Exec after delete: 410, saying when and why it ended.
	if code, _ := e.do(t, "DELETE", "/v1/sandboxes/"+id, nil); code != 200 {
		t.Fatal(code)
	}
	if _, body, _, code := e.exec(t, id, session.ExecRequest{Argv: []string{"true"}}); code != 410 || !strings.Contains(body, "deleted") {
		t.Errorf("exec after delete: %d %s", code, body)
	}
	if code, b := e.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/tmp/x", []byte("x")); code != 410 {
		t.Errorf("put after delete: %d %s", code, b)
	}
	// A second delete returns the same report.
	if code, b := e.do(t, "DELETE", "/v1/sandboxes/"+id, nil); code != 200 || !strings.Contains(string(b), id) {
		t.Errorf("second delete: %d %s", code, b)
	}
}

// TestConcurrentDeleteAndExec: deletes racing with running commands all end cleanly; the
// command is killed with a clear error, and nothing of the sandbox is left.
func TestConcurrentDeleteAndExec(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	var wg sync.WaitGroup
	results := make(chan session.ExecResult, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, res, code := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sleep", "30"}})
			if code == 200 {
				results <- res
			}
		}()
	}
	// Wait until the commands run.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if i, err := e.m.Info(info.ID); err == nil && i.Running == 4 {
			break
		}
	}
	codes := make(chan int, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := e.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil)
			codes <- code
		}()
	}
	wg.Wait()
	close(results)
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("delete: %d", c)
		}
	}
	for r := range results {
		if !strings.Contains(r.Error, "deleted") || r.ExitCode == 0 {
			t.Errorf("exec during delete: %+v", r)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(testState, "sandboxes")); len(ents) != 0 {
		t.Errorf("left in the state directory: %v", ents)
	}
	if n := e.crd.Len(); n != 0 {
		t.Errorf("exec credentials of %d sandboxes left", n)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sessions", info.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("the session's record is left: %v", err)
	}
}

// TestClientVanishes: a client that goes away mid-stream kills its command; the result
// says so and is there by exec id.
func TestClientVanishes(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	ctx, cancel := context.WithCancel(context.Background())
	j, _ := json.Marshal(session.ExecRequest{Argv: []string{"sh", "-c", "echo started; exec sleep 60"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/sandboxes/"+info.ID+"/exec", bytes.NewReader(j))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var execID string
	for sc.Scan() {
		var f session.Frame
		_ = json.Unmarshal(sc.Bytes(), &f)
		if f.ExecID != "" {
			execID = f.ExecID
		}
		if f.Stream == "stdout" {
			break
		}
	}
	cancel()
	resp.Body.Close()
	var res session.ExecResult
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err = e.m.ExecResult(info.ID, execID)
		if err == nil && res.State == "done" {
			break
		}
	}
	if res.State != "done" || res.Error == "" || res.ExitCode == 0 {
		t.Fatalf("result after the client went away: %+v, %v", res, err)
	}
	if i, _ := e.m.Info(info.ID); i.Running != 0 {
		t.Errorf("still running: %+v", i)
	}
	// The sandbox stays usable.
	if out, _, _, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"echo", "ok"}}); out != "ok\n" {
		t.Errorf("after: %q", out)
	}
}

func TestTTLAndIdle(t *testing.T) {
	e := newEnv(t, func(o *session.Options) { o.SweepInterval = 20 * time.Millisecond })
	a := e.create(t, session.Spec{TTL: "300ms"})
	b := e.create(t, session.Spec{IdleTimeout: "300ms"})
	for _, id := range []string{a.ID, b.ID} {
		var info session.Info
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			info, _ = e.m.Info(id)
			if info.State == session.StateEnded {
				break
			}
		}
		if info.State != session.StateEnded {
			t.Errorf("%s: %+v", id, info)
		}
	}
	ia, _ := e.m.Info(a.ID)
	ib, _ := e.m.Info(b.ID)
	if ia.EndReason != "ttl" || ib.EndReason != "idle_timeout" {
		t.Errorf("end reasons %q, %q", ia.EndReason, ib.EndReason)
	}
}

// TestOtherOwner: a sandbox recorded by another live airlock is answered with its owner.
func TestOtherOwner(t *testing.T) {
	e := newEnv(t, nil)
	// PID 1 is alive and is not this process: it stands for another replica.
	start := procStart(t, 1)
	rec := fmt.Sprintf(`{"id":"sbx-other","owner":"replica-b:9090","pid":1,"start":%d,"backend":"native"}`, start)
	if err := os.WriteFile(filepath.Join(e.dir, "sessions", "sbx-other.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	code, b := e.do(t, "POST", "/v1/sandboxes/sbx-other/exec", session.ExecRequest{Argv: []string{"true"}})
	if code != 409 || !strings.Contains(string(b), "replica-b:9090") {
		t.Errorf("got %d %s", code, b)
	}
	code, b = e.do(t, "POST", "/v1/sandboxes", session.Spec{ID: "sbx-other"})
	if code != 409 || !strings.Contains(string(b), "replica-b:9090") {
		t.Errorf("create: %d %s", code, b)
	}
}

// TestAdopt: sessions of a dead airlock are ended with a report written.
func TestAdopt(t *testing.T) {
	e := newEnv(t, nil)
	rec := `{"id":"sbx-old","owner":"gone:1","pid":999999999,"start":5,"backend":"native","created":"2026-01-01T00:00:00Z"}`
	dir := filepath.Join(e.dir, "sessions")
	if err := os.WriteFile(filepath.Join(dir, "sbx-old.json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	ended, err := e.m.Adopt(context.Background())
	if err != nil || len(ended) != 1 || ended[0] != "sbx-old" {
		t.Fatalf("Adopt: %v %v", ended, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sbx-old.report.json")); err != nil || !strings.Contains(string(b), "airlock restarted") {
		t.Errorf("report: %s %v", b, err)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/sbx-old", nil); code != 200 || !strings.Contains(string(b), `"ended"`) {
		t.Errorf("get: %d %s", code, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "sbx-old.json")); !os.IsNotExist(err) {
		t.Errorf("record left: %v", err)
	}
}

func procStart(t *testing.T, pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skip(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var n uint64
	fmt.Sscan(f[19], &n)
	return n
}

// TestExecApprovalRealService holds a command in the real approval service (SQLite): the
// pending record shows the command; approved, it runs.
func TestExecApprovalRealService(t *testing.T) {
	cfg := approval.Config{Store: "sqlite:" + filepath.Join(t.TempDir(), "approvals.db")}
	svc, err := approval.New(context.Background(), approval.Options{Config: cfg, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	e := newEnv(t, func(o *session.Options) { o.Approve = svc })
	info := e.create(t, session.Spec{Labels: map[string]string{"task": "release"}})
	done := make(chan session.ExecResult, 1)
	go func() {
		_, _, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"git", "--version"}})
		done <- res
	}()
	var rec approval.Record
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recs, err := svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 {
			rec = recs[0]
			break
		}
	}
	if rec.ID == "" || rec.Method != "EXEC" || rec.Sandbox != info.ID || !strings.Contains(rec.URL, "git --version") || rec.Rule != "exec.push" {
		t.Fatalf("pending record: %+v", rec)
	}
	if _, err := svc.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", "ok"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.ExitCode != 0 || res.Decision != "approved" || res.ApprovalID != rec.ID {
		t.Errorf("approved exec: %+v", res)
	}
	// The same command again is another act: asked again, never let through by the first
	// grant within the retry window (found by an attack: a second run, with other
	// environment values or none changed, went through on the first approval).
	go func() {
		_, _, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"git", "--version"}})
		done <- res
	}()
	var again approval.Record
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && again.ID == ""; time.Sleep(20 * time.Millisecond) {
		recs, err := svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.ID != rec.ID {
				again = r
			}
		}
	}
	if again.ID == "" {
		t.Fatal("the second run of an approved command was not held again")
	}
	if _, err := svc.Decide(context.Background(), again.ID, approval.StateDenied, "oncall", "no"); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.ExitCode == 0 || res.Decision == "approved" {
		t.Errorf("denied second run: %+v", res)
	}
}

// TestWebSocketExec: the two-way form carries stdin to the command and its output back;
// resize messages are accepted.
func TestWebSocketExec(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	c := &session.Client{BaseURL: e.srv.URL}
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(context.Background(), info.ID, session.ExecRequest{Argv: []string{"sh", "-c", "tr a-z A-Z; echo done >&2; exit 5"}},
		strings.NewReader("hello sandbox\n"), &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "HELLO SANDBOX\n" || stderr.String() != "done\n" || res.ExitCode != 5 || res.ExecID == "" {
		t.Errorf("got %q %q %+v", stdout.String(), stderr.String(), res)
	}
	// Unknown sandbox over the WebSocket form: a clear status before the upgrade.
	_, err = c.Exec(context.Background(), "sbx-nope", session.ExecRequest{Argv: []string{"true"}}, strings.NewReader(""), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown sandbox: %v", err)
	}
}
