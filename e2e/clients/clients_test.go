//go:build e2e

package clients_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
)

// goClient is a program using Go's default transport (HTTPS_PROXY, SSL_CERT_FILE).
const goClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	resp, err := http.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status=%d rule=%s\n%s", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), b)
}
`

func buildGoClient(t *testing.T, dir, name, program string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "main.go")
	os.WriteFile(src, []byte(program), 0o644)
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// TestClients: each tool reaches an allowed upstream through airlock, and is refused with
// a readable reason (or, where the tool ignores the proxy, gets nowhere at all).
func TestClients(t *testing.T) {
	e := newEnv(t)
	buildGoClient(t, e.workspace, "goclient", goClient)
	u := func(host, path string) string { return e.url(host, path) }
	tests := []clientCase{
		{name: "wget allowed (trusts the system bundle path, where the sandbox puts airlock's CA)", ok: true,
			script: `wget -qO- ` + u("upstream.test", "/allowed/wget"),
			want:   []string{"hello GET /allowed/wget"}, reached: "upstream.test GET /allowed/wget"},
		{name: "wget denied shows the reason",
			script: `wget -O- --content-on-error ` + u("upstream.test", "/denied/wget"),
			want:   []string{"403", "rule: clients.default", "reason: not on the clients allowlist"}, never: "/denied/wget"},
		{name: "wget plain HTTP denied",
			script: `wget -O- --content-on-error http://upstream.test:` + e.plainPort + `/denied/plain`,
			want:   []string{"403", "rule: clients.default"}, never: "/denied/plain"},
		{name: "python requests allowed", ok: true,
			script: `python3 -c "import requests; print(requests.get('` + u("upstream.test", "/allowed/requests") + `').text)"`,
			want:   []string{"hello GET /allowed/requests"}, reached: "/allowed/requests"},
		{name: "python requests denied shows the reason", ok: true,
			script: `python3 -c "
import requests
r = requests.get('` + u("upstream.test", "/denied/requests") + `')
print(r.status_code, r.headers['X-Airlock-Rule'], r.headers['X-Airlock-Reason'])"`,
			want: []string{"403 clients.default not on the clients allowlist"}, never: "/denied/requests"},
		{name: "pip installs from a local simple index", ok: true,
			script: `python3 -m pip install --no-cache-dir --disable-pip-version-check --index-url ` + u("pypi.test", "/simple/") +
				` --target /tmp/pylib airlock-hello && python3 -c "import sys; sys.path.insert(0, '/tmp/pylib'); import airlock_hello; print(airlock_hello.hello())"`,
			want: []string{"Successfully installed airlock-hello-0.1", "hello from the local index"}, reached: "pypi.test GET /files/airlock_hello-0.1-py3-none-any.whl"},
		{name: "pip from a denied index",
			script: `python3 -m pip install -vv --no-cache-dir --disable-pip-version-check --index-url ` + u("pypi.test", "/denied/simple/") + ` --target /tmp/pylib2 airlock-hello`,
			want:   []string{"403", "No matching distribution found"}, never: "/denied/simple"},
		{name: "node fetch ignores the proxy in node 20 and goes through transparent egress", ok: true,
			script: `node -e "fetch('` + u("upstream.test", "/allowed/node") + `').then(r => r.text()).then(console.log, e => { console.log('fetch failed:', (e.cause && e.cause.code) || e.message); process.exit(3) })"`,
			want:   []string{"hello GET /allowed/node"}, reached: "upstream.test GET /allowed/node"},
		{name: "npm installs from a local registry", ok: true,
			script: `mkdir -p /tmp/npm && cd /tmp/npm && npm install --no-audit --no-fund --registry ` + u("registry.test", "/") +
				` airlock-hello && node -e "console.log(require('airlock-hello')())"`,
			want: []string{"added 1 package", "hello from the local registry"}, reached: "registry.test GET /airlock-hello/-/airlock-hello-1.0.0.tgz"},
		{name: "npm from a denied registry path",
			script: `npm view --registry ` + u("registry.test", "/denied/") + ` airlock-hello`,
			want:   []string{"403"}, never: "/denied/airlock-hello"},
		{name: "Go default transport allowed", ok: true,
			script: `./goclient ` + u("upstream.test", "/allowed/go"),
			want:   []string{"status=200", "hello GET /allowed/go"}, reached: "/allowed/go"},
		{name: "Go default transport denied shows the reason", ok: true,
			script: `./goclient ` + u("upstream.test", "/denied/go"),
			want:   []string{"status=403 rule=clients.default", "reason: not on the clients allowlist"}, never: "/denied/go"},
	}
	e.runCases(t, tests)
	for _, ev := range e.audit.Events() {
		if ev.SandboxID != "sbx-clients" {
			t.Errorf("audit event attributed to %q, want sbx-clients: %+v", ev.SandboxID, ev)
		}
	}
}

// TestGit: clone and fetch through airlock from a git smart-HTTP server, a refused clone,
// and a push that the policy holds until it is approved, after which the ref has moved.
func TestGit(t *testing.T) {
	e := newEnv(t)
	repo := e.url("git.test", "/app.git")
	out, code := e.run(t, "git clone -q "+repo+" clone && cat clone/README")
	if code != 0 || !strings.Contains(out, "hello from the host") {
		t.Fatalf("git clone: exit %d\n%s", code, out)
	}
	head := e.git.commitOnHost(t, "news from the host")
	out, code = e.run(t, "cd clone && git fetch -q origin && git rev-parse origin/main")
	if code != 0 || !strings.Contains(out, head) {
		t.Fatalf("git fetch: exit %d, want %s\n%s", code, head, out)
	}
	out, code = e.run(t, "git clone -q "+e.url("git.test", "/private.git")+" private")
	if code == 0 || !strings.Contains(out, "403") {
		t.Errorf("clone of a denied repository: exit %d, want a 403 refusal\n%s", code, out)
	}
	if e.reached("private.git") {
		t.Error("the denied repository was reached")
	}

	out, code = e.run(t, "cd clone && git merge -q --ff-only origin/main && echo change > CHANGE && git add CHANGE && "+
		"git -c user.name=agent -c user.email=agent@sandbox commit -qm 'from the sandbox' && git rev-parse HEAD")
	if code != 0 {
		t.Fatalf("commit in the sandbox: exit %d\n%s", code, out)
	}
	fields := strings.Fields(out)
	pushed := fields[len(fields)-1]
	type res struct {
		out  string
		code int
	}
	done := make(chan res, 1)
	go func() {
		o, c := e.run(t, "cd clone && git push origin HEAD:main 2>&1")
		done <- res{o, c}
	}()
	rec := e.pending(t)
	if rec.Rule != "clients.git_push" || !strings.HasSuffix(rec.URL, "/app.git/git-receive-pack") {
		t.Errorf("held record: rule %q url %q, want clients.git_push on git-receive-pack", rec.Rule, rec.URL)
	}
	if got := e.git.ref(t, "app.git", "refs/heads/main"); got != head {
		t.Fatalf("the ref moved before approval: %s", got)
	}
	if _, err := e.approval.Decide(context.Background(), rec.ID, approval.StateApproved, "tester", "ok"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 0 {
			t.Fatalf("git push after approval: exit %d\n%s", r.code, r.out)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("git push did not finish after approval")
	}
	if got := e.git.ref(t, "app.git", "refs/heads/main"); got != pushed {
		t.Errorf("after the approved push: main is %s, want %s", got, pushed)
	}
}
