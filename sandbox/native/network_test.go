package native_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s for %s\n", r.URL.Path, r.Header.Get("X-Sandbox-Id"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestProxyIsTheOnlyWayOut(t *testing.T) {
	up := upstream(t)
	host := strings.TrimPrefix(up.URL, "http://")
	_, port, _ := net.SplitHostPort(host)
	p := sandboxtest.NewProxy(host)
	s := newSandbox(t, sandbox.Options{Proxy: p, Labels: map[string]string{"task": "net"}})
	tests := []struct {
		name   string
		script string
		want   string // in stdout when the step works
		works  bool
	}{
		{"curl through proxy", "curl -sS -m 5 " + up.URL + "/curl", "upstream saw /curl for " + s.ID(), true},
		{"python through proxy", `python3 -c 'import urllib.request as u; print(u.urlopen("` + up.URL + `/py", timeout=5).read().decode())'`, "upstream saw /py", true},
		{"curl over IPv6 listener", "curl -sS -m 5 -x http://[::1]:3128 " + up.URL + "/v6", "upstream saw /v6", true},
		{"denied host", "curl -sS -m 5 -o /dev/null -w '%{http_code}' http://example.com/", "403", true},
		{"direct to upstream", "curl -sS -m 5 --noproxy '*' " + up.URL + "/direct", "upstream saw", false},
		{"direct to host loopback port", "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", " + port + "), 3)' && echo connected", "connected", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, s, tt.script)
			if got := strings.Contains(string(res.Stdout), tt.want); got != tt.works {
				t.Errorf("stdout %q contains %q = %v, want %v (stderr %q)", res.Stdout, tt.want, got, tt.works, res.Stderr)
			}
		})
	}
	for _, r := range p.Requests() {
		if r.Sandbox != s.ID() {
			t.Errorf("request %s attributed to %q, want %q", r.URL, r.Sandbox, s.ID())
		}
	}
}

func TestTwoSandboxesAreApart(t *testing.T) {
	up := upstream(t)
	p := sandboxtest.NewProxy(strings.TrimPrefix(up.URL, "http://"))
	wsA, wsB := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(wsA, "secret-a.txt"), []byte("A"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newSandbox(t, sandbox.Options{ID: "sbx-test-a", Workspace: wsA, Proxy: p})
	b := newSandbox(t, sandbox.Options{ID: "sbx-test-b", Workspace: wsB, Proxy: p})

	// A keeps a process running while B looks around.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.Run(ctx, sandbox.Command{Args: []string{"sleep", "300"}})
	}()
	res := run(t, b, "ps -eo comm=; ls /workspace; cat "+wsA+"/secret-a.txt; ls /proc/*/root/workspace 2>/dev/null; curl -sS -m 5 "+up.URL+"/b")
	out := string(res.Stdout)
	for _, leak := range []string{"sleep", "secret-a.txt"} {
		if strings.Contains(out, leak) {
			t.Errorf("sandbox B sees %q of sandbox A:\n%s", leak, out)
		}
	}
	run(t, a, "curl -sS -m 5 "+up.URL+"/a")
	cancel()
	<-done
	for _, r := range p.Requests() {
		want := map[string]string{"/a": "sbx-test-a", "/b": "sbx-test-b"}[strings.TrimPrefix(r.URL, up.URL)]
		if r.Sandbox != want {
			t.Errorf("request %s attributed to %q, want %q", r.URL, r.Sandbox, want)
		}
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	p := sandboxtest.NewProxy()
	ws := t.TempDir()
	s := newSandbox(t, sandbox.Options{Proxy: p, Workspace: ws, WorkspaceMode: sandbox.WorkspaceCoW, Memory: 64 << 20})
	run(t, s, "sleep 1000 & (setsid sleep 1000 &) ; echo x > f")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		_, runErr = s.Run(ctx, sandbox.Command{Args: []string{"sleep", "1000"}})
	}()
	defer func() { cancel(); <-done }()
	netns := native.NetNSInode(s)
	if netns == 0 {
		t.Fatal("no network namespace inode for the sandbox")
	}
	procs := sandboxProcesses(netns)
	if len(procs) == 0 {
		t.Fatal("no process found in the sandbox's network namespace before Close")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, leftover := range sandboxLeftovers(t, s.ID()) {
		t.Errorf("left behind after Close: %s", leftover)
	}
	for _, p := range sandboxProcesses(netns) {
		t.Errorf("process left in the sandbox's network namespace after Close: %s", p)
	}
	for _, p := range procs {
		if _, err := os.Stat(filepath.Join("/proc", strings.Fields(p)[0])); err == nil {
			t.Errorf("process of the sandbox still there after Close: %s (now %s)", p, describeProcess(strings.Fields(p)[0]))
		}
	}
	// The command Close interrupted (or never let start) says so.
	<-done
	if !errors.Is(runErr, sandbox.ErrClosed) {
		t.Errorf("Run ended by Close: %v, want sandbox.ErrClosed", runErr)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := s.Run(context.Background(), sandbox.Command{Args: []string{"true"}}); err == nil {
		t.Error("Run after Close succeeded")
	}
}

// sandboxLeftovers lists what remains of sandbox id on the host: state, cgroups, processes
// and mounts naming it.
func sandboxLeftovers(t testing.TB, id string) []string {
	t.Helper()
	var out []string
	paths := []string{filepath.Join(testState, "sandboxes", id)}
	for _, c := range []string{"memory", "pids", "cpu", "unified", ""} {
		paths = append(paths, filepath.Join("/sys/fs/cgroup", c, "airlock", id))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), id) {
		out = append(out, "a mount naming "+id)
	}
	// Processes of this sandbox are found by its network namespace (sandboxProcesses): a
	// scan for every airlock-sandbox process would also see other sandboxes on the machine.
	return out
}

// sandboxProcesses lists the processes (pid and description) in network namespace netns.
func sandboxProcesses(netns uint64) []string {
	var out []string
	links, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, l := range links {
		var st syscall.Stat_t
		if syscall.Stat(l, &st) == nil && st.Ino == netns {
			pid := strings.Split(l, "/")[2]
			out = append(out, pid+" "+describeProcess(pid))
		}
	}
	return out
}

// describeProcess is a process's command line, state and parent, for failure messages.
func describeProcess(pid string) string {
	cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	desc := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
	status, _ := os.ReadFile(filepath.Join("/proc", pid, "status"))
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "State:") || strings.HasPrefix(line, "PPid:") {
			desc += "; " + strings.Join(strings.Fields(line), " ")
		}
	}
	return desc
}
