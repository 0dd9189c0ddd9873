package session_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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

func (r *recorder) Record(_ context.Context, ev *audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, *ev)
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
		{"tty on the plain form", "POST", "/v1/sandboxes/" + id + "/exec", session.ExecRequest{Argv: []string{"sh"}, TTY: true}, 400, "WebSocket"},
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
