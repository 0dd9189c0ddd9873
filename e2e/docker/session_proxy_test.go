//go:build e2e

package docker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/session"
)

// sessionServer is a real `airlock proxy` serving sandbox sessions; restart starts it again
// on the same config and state (after a crash, say).
type sessionServer struct {
	bin, dir, cfg, admin, token string
	cmd                         *exec.Cmd
	log                         *os.File
}

func startSessionServer(t *testing.T) *sessionServer {
	t.Helper()
	s := &sessionServer{bin: buildAirlock(t), dir: t.TempDir()}
	os.Chmod(s.dir, 0o755)
	s.token = filepath.Join(s.dir, "issuer.token")
	if err := os.WriteFile(s.token, []byte("e2e-docker-issuer-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.admin = e2etest.FreeAddr(t)
	s.cfg = filepath.Join(s.dir, "airlock.yaml")
	cfg := fmt.Sprintf(`home: %s
listen: [%q]
admin_listen: %q
log: {level: info, format: text}
proxy:
  issuers: [{name: e2e, token_file: %s}]
sessions:
  state_dir: %s
`, filepath.Join(s.dir, "home"), e2etest.FreeAddr(t), s.admin, s.token, filepath.Join(s.dir, "sessions"))
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	t.Cleanup(func() {
		s.stop(t, syscall.SIGTERM)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.dir, "proxy.log"))
			t.Logf("proxy log:\n%s", b)
		}
	})
	return s
}

func (s *sessionServer) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "proxy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s.log = log
	s.cmd = exec.Command(s.bin, "proxy", "--config", s.cfg)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, "http://"+s.admin+"/readyz")
}

// stop signals the proxy and waits for it; SIGKILL is a crash.
func (s *sessionServer) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.log.Close()
	s.cmd = nil
}

// airlock runs `airlock sandbox VERB` against the server; it returns stdout, stderr and
// the exit status.
func (s *sessionServer) airlock(t *testing.T, verb string, args ...string) (string, string, int) {
	t.Helper()
	all := append([]string{"sandbox", verb, "--admin", "http://" + s.admin, "--token-file", s.token}, args...)
	return e2etest.Run(t, exec.Command(s.bin, all...))
}

// must runs the CLI and fails the test unless it exits 0.
func (s *sessionServer) must(t *testing.T, verb string, args ...string) string {
	t.Helper()
	out, errOut, code := s.airlock(t, verb, args...)
	if code != 0 {
		t.Fatalf("airlock sandbox %s %v: exit %d: %s", verb, args, code, errOut)
	}
	return out
}

// get is an authenticated GET of the admin API.
func (s *sessionServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.admin+path, nil)
	tok, _ := os.ReadFile(s.token)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// removeSandbox removes the containers of sandbox id, whatever happened to the test.
func removeSandbox(id string) {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=org.airlock-proxy.sandbox="+id).Output()
	for _, c := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "rm", "-f", c).Run()
	}
}

// info is the session's Info as the API answers it.
func (s *sessionServer) info(t *testing.T, id string) (int, session.Info, string) {
	t.Helper()
	code, body := s.get(t, "/v1/sandboxes/"+id)
	var info session.Info
	if code == 200 {
		if err := json.Unmarshal([]byte(body), &info); err != nil {
			t.Fatalf("info %s: %v", body, err)
		}
	}
	return code, info, body
}

// sandboxLeftovers lists the containers and networks of sandbox id, and what it had on
// the host: its state directory, its devpts mount, its uid range.
func sandboxLeftovers(t *testing.T, id string) string {
	t.Helper()
	var out []string
	if _, err := os.Stat(filepath.Join(docker.DefaultStateDir, id)); err == nil {
		out = append(out, "state directory")
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), "/"+id+"/") {
		out = append(out, "mount")
	}
	slots, _ := os.ReadDir(sandbox.SlotDir)
	for _, sl := range slots {
		if b, _ := os.ReadFile(filepath.Join(sandbox.SlotDir, sl.Name())); strings.HasPrefix(string(b), id+"\n") {
			out = append(out, "uid slot "+sl.Name())
		}
	}
	for _, args := range [][]string{
		{"ps", "-aq", "--filter", "label=org.airlock-proxy.sandbox=" + id},
		{"network", "ls", "-q", "--filter", "label=org.airlock-proxy.sandbox=" + id},
	} {
		b, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v %s", args, err, b)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			out = append(out, args[0]+": "+s)
		}
	}
	return strings.Join(out, "; ")
}

// hostTraces lists what on the host names sandbox id: files under /run/airlock, cgroups,
// mounts, and processes in a cgroup of its.
func hostTraces(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	walk := func(root string, depth int) {
		base := strings.Count(root, "/")
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && strings.Count(p, "/")-base >= depth {
				return filepath.SkipDir
			}
			if strings.Contains(d.Name(), id) {
				out = append(out, p)
			}
			return nil
		})
	}
	walk("/run/airlock", 6)
	walk("/sys/fs/cgroup", 5)
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), id) {
		out = append(out, "a mount")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), id) {
			out = append(out, "process "+p)
		}
	}
	return out
}

// TestDockerSessionThroughProxy: `airlock sandbox create --backend docker --image IMG`
// against a real `airlock proxy` makes a container sandbox of a local image; exec, cp, ls,
// report and rm work on it; rm leaves no container or network; a missing image and an
// image on the native backend are refused clearly.
func TestDockerSessionThroughProxy(t *testing.T) {
	s := startSessionServer(t)
	id := strings.TrimSpace(s.must(t, "create", "--backend", "docker", "--image", testImage, "--label", "task=e2e"))
	t.Cleanup(func() { removeSandbox(id) })
	if l := sandboxLeftovers(t, id); !strings.Contains(l, "ps:") {
		t.Fatalf("no container for %s", id)
	}
	if out := s.must(t, "exec", id, "--", "sh", "-c", "echo hello from $(hostname); id -u"); !strings.Contains(out, "hello from sandbox") || strings.Contains(out, "\n0\n") {
		t.Errorf("exec: %q, want the container's shell as a user that is not root", out)
	}
	if _, _, code := s.airlock(t, "exec", id, "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exec status: %d, want 7", code)
	}
	// The proxy listens inside the container: a request through it is answered by airlock.
	out, _, _ := s.airlock(t, "exec", id, "--", "sh", "-c", "wget -q -O- http://example.invalid/ 2>&1; true")
	if strings.Contains(out, "can't connect") || strings.Contains(out, "refused") {
		t.Errorf("no proxy inside the container: %q", out)
	}
	t.Logf("a request through the proxy: %q", out)
	src := filepath.Join(s.dir, "in.txt")
	if err := os.WriteFile(src, []byte("carried in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.must(t, "cp", src, id+":/tmp/in.txt")
	s.must(t, "exec", id, "--", "sh", "-c", "tr a-z A-Z < /tmp/in.txt > /tmp/out.txt")
	dst := filepath.Join(s.dir, "out.txt")
	s.must(t, "cp", id+":/tmp/out.txt", dst)
	if b, _ := os.ReadFile(dst); string(b) != "CARRIED IN\n" {
		t.Errorf("cp out: %q", b)
	}
	if ls := s.must(t, "ls"); !strings.Contains(ls, id) {
		t.Errorf("ls: %q, want %s", ls, id)
	}
	if code, inf, body := s.info(t, id); code != 200 || inf.Backend != "docker" {
		t.Errorf("info: %d %s, want backend docker", code, body)
	}
	if code, rep := s.get(t, "/v1/sandboxes/"+id+"/report"); code != 200 || !strings.Contains(rep, id) {
		t.Errorf("report: %d %s", code, rep)
	}
	if rep := s.must(t, "rm", id); !strings.Contains(rep, id) {
		t.Errorf("rm printed %q, want the report", rep)
	}
	if l := sandboxLeftovers(t, id); l != "" {
		t.Errorf("left behind after rm: %s", l)
	}

	_, errOut, code := s.airlock(t, "create", "--backend", "docker", "--image", "airlock-e2e-no-such-image:latest")
	if code == 0 || !strings.Contains(errOut, "is not on the airlock host's Docker daemon") {
		t.Errorf("missing image: exit %d %q", code, errOut)
	}
	// A native session's root may be an engine image (e2e/image), but a host directory only
	// under sessions.rootfs_roots, which this server has none of.
	_, errOut, code = s.airlock(t, "create", "--rootfs", "/etc")
	if code == 0 || !strings.Contains(errOut, "set sessions.rootfs_roots") {
		t.Errorf("rootfs without roots: exit %d %q", code, errOut)
	}
	if _, errOut, code = s.airlock(t, "create", "--backend", "docker"); code == 0 || !strings.Contains(errOut, "needs an image") {
		t.Errorf("docker without image: exit %d %q", code, errOut)
	}
}

// TestDockerSessionAdoptedAfterCrash: when `airlock proxy` is killed and started again on
// the same state, its Docker session is taken over alive (same files, the proxy listening
// in it again, rm works and leaves nothing), while its native session is ended with its
// report written to sessions.state_dir.
func TestDockerSessionAdoptedAfterCrash(t *testing.T) {
	s := startSessionServer(t)
	id := strings.TrimSpace(s.must(t, "create", "--backend", "docker", "--image", testImage, "--ttl", "2h"))
	t.Cleanup(func() { removeSandbox(id) })
	native := strings.TrimSpace(s.must(t, "create"))
	// A docker session whose record is lost: no session takes its container over, so the
	// restart removes it.
	orphan := strings.TrimSpace(s.must(t, "create", "--backend", "docker", "--image", testImage))
	t.Cleanup(func() { removeSandbox(orphan) })
	s.must(t, "exec", id, "--", "sh", "-c", "echo kept > /tmp/keep")
	_, before, _ := s.info(t, id)

	if tr := hostTraces(t, native); len(tr) == 0 {
		t.Fatalf("the native session %s has no trace on the host to look for", native)
	} else {
		t.Logf("the native session on the host before the crash: %v", tr)
	}
	s.stop(t, syscall.SIGKILL)
	// What the check after rm looks for is there while the sandbox lives.
	if l := sandboxLeftovers(t, id); !strings.Contains(l, "ps:") || !strings.Contains(l, "state directory") || !strings.Contains(l, "mount") || !strings.Contains(l, "uid slot") {
		t.Fatalf("the container and its host side did not outlive the crash: %q", l)
	}
	if err := os.Remove(filepath.Join(s.dir, "sessions", orphan+".json")); err != nil {
		t.Fatal(err)
	}
	s.start(t)

	if l := sandboxLeftovers(t, orphan); l != "" {
		t.Errorf("the docker sandbox no session took over is left: %s", l)
	}
	code, after, body := s.info(t, id)
	if code != 200 || after.State != session.StateRunning {
		t.Fatalf("after restart: %d %s, want it running", code, body)
	}
	if !after.Expires.Equal(before.Expires) || !after.Created.Equal(before.Created) {
		t.Errorf("created/expires changed: before %v/%v, after %v/%v", before.Created, before.Expires, after.Created, after.Expires)
	}
	if out := s.must(t, "exec", id, "--", "cat", "/tmp/keep"); out != "kept\n" {
		t.Errorf("the adopted sandbox's file: %q", out)
	}
	out, _, _ := s.airlock(t, "exec", id, "--", "sh", "-c", "wget -q -O- http://example.invalid/ 2>&1; true")
	if strings.Contains(out, "can't connect") || strings.Contains(out, "refused") {
		t.Errorf("no proxy inside the adopted container: %q", out)
	}
	if code, inf, b := s.info(t, native); code != 200 || inf.State != session.StateEnded || !strings.Contains(inf.EndReason, "airlock restarted") {
		t.Errorf("native session after restart: %d %s", code, b)
	}
	if tr := hostTraces(t, native); len(tr) != 0 {
		t.Errorf("the native session left on the host: %v", tr)
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "sessions", native+".report.json")); err != nil || !strings.Contains(string(b), "airlock restarted") {
		t.Errorf("native session's report: %s %v", b, err)
	}
	s.must(t, "rm", id)
	if l := sandboxLeftovers(t, id); l != "" {
		t.Errorf("left behind after rm: %s", l)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "sessions", id+".json")); !os.IsNotExist(err) {
		t.Errorf("the session's record is left: %v", err)
	}
}
