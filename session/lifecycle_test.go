package session_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/session"
)

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
	adopted, ended, err := e.m.Adopt(context.Background())
	if err != nil || len(ended) != 1 || ended[0] != "sbx-old" || len(adopted) != 0 {
		t.Fatalf("Adopt: adopted %v, ended %v, %v", adopted, ended, err)
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

// TestCreateWithLiveIDIsConflict: a create with the id of a live sandbox of another
// airlock on this host (sharing the backend's state directory, not the session registry)
// is answered 409 "already exists", not 500, and the live sandbox keeps its state
// directory and still runs commands.
func TestCreateWithLiveIDIsConflict(t *testing.T) {
	first, second := newEnv(t, nil), newEnv(t, nil)
	info := first.create(t, session.Spec{ID: "sbx-collide"})
	code, body := second.do(t, "POST", "/v1/sandboxes", session.Spec{ID: info.ID})
	if code != http.StatusConflict || !strings.Contains(string(body), "already exists") {
		t.Errorf("create with a live id: %d %s, want 409 already exists", code, body)
	}
	if _, err := os.Stat(filepath.Join(testState, "sandboxes", info.ID)); err != nil {
		t.Errorf("the live sandbox's state directory: %v", err)
	}
	out, _, res, code := first.exec(t, info.ID, session.ExecRequest{Argv: []string{"echo", "alive"}})
	if code != http.StatusOK || out != "alive\n" || res.ExitCode != 0 {
		t.Errorf("the live sandbox after the collision: %d %q %+v", code, out, res)
	}
}
