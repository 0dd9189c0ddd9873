//go:build e2e

package image_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// sessionServer is a real `airlock proxy` serving sandbox sessions.
type sessionServer struct {
	bin, dir, cfg, admin, token string
	cmd                         *exec.Cmd
}

// startSessionServer starts `airlock proxy` with sessions (sessions holds further lines of
// the config's sessions: section, each indented by two spaces).
func startSessionServer(t *testing.T, sessions string) *sessionServer {
	t.Helper()
	s := &sessionServer{bin: e2etest.AirlockBinary(t), dir: t.TempDir()}
	s.token = filepath.Join(s.dir, "issuer.token")
	os.WriteFile(s.token, []byte("e2e-image-issuer-token-0123456789abcdef\n"), 0o600)
	s.admin = e2etest.FreeAddr(t)
	s.cfg = filepath.Join(s.dir, "airlock.yaml")
	cfg := fmt.Sprintf("home: %s\nlisten: [%q]\nadmin_listen: %q\nlog: {level: info, format: text}\nproxy:\n  issuers: [{name: e2e, token_file: %s}]\nsessions:\n  max_sessions: 8\n%s",
		filepath.Join(s.dir, "home"), e2etest.FreeAddr(t), s.admin, s.token, sessions)
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
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
	defer log.Close()
	s.cmd = exec.Command(s.bin, "proxy", "--config", s.cfg)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + s.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "proxy.log"))
			t.Fatalf("airlock proxy not ready:\n%s", b)
		}
	}
}

// stop signals the proxy and waits for it; SIGKILL is a crash.
func (s *sessionServer) stop(sig syscall.Signal) {
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
	s.cmd = nil
}

// cli runs `airlock sandbox VERB` against the server: stdout, stderr, exit status.
func (s *sessionServer) cli(t *testing.T, verb string, args ...string) (string, string, int) {
	t.Helper()
	all := append([]string{"sandbox", verb, "--admin", "http://" + s.admin, "--token-file", s.token}, args...)
	return e2etest.Run(t, exec.Command(s.bin, all...))
}

func (s *sessionServer) must(t *testing.T, verb string, args ...string) string {
	t.Helper()
	out, errOut, code := s.cli(t, verb, args...)
	if code != 0 {
		t.Fatalf("airlock sandbox %s %v: exit %d: %s", verb, args, code, errOut)
	}
	return out
}

// api calls the admin API with the issuer token.
func (s *sessionServer) api(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	if body == nil {
		rd = bytes.NewReader(nil)
	} else {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+s.admin+path, rd)
	tok, _ := os.ReadFile(s.token)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// importImage imports root into the local Docker engine with Dockerfile changes (ENV,
// WORKDIR, USER...) and returns its reference.
func importImage(t *testing.T, root, tag string, changes ...string) string {
	t.Helper()
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Skip("needs the Docker engine")
	}
	ref := "airlock-e2e/session-image-" + tag + ":" + fmt.Sprint(os.Getpid())
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "-c", c)
	}
	imp := exec.Command("docker", append(args, "-", ref)...)
	tar := exec.Command("tar", "-C", root, "-c", ".")
	var err error
	if imp.Stdin, err = tar.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := tar.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	tar.Wait()
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	return ref
}

// TestImageSession: native sessions on a root of their own, an engine image (whose Env,
// WorkingDir and User are honoured) and a directory under sessions.rootfs_roots; an image
// naming a user the sandbox cannot be is refused; after a crash of the proxy the sessions
// are ended with their reports and nothing of them is left, and the cached image serves
// the next session.
func TestImageSession(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (TestRootlessSession is the rootless case)")
	}
	root := busyboxRoot(t)
	os.MkdirAll(filepath.Join(root, "srv/app"), 0o755)
	os.MkdirAll(filepath.Join(root, "opt/tools"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/image-marker"), []byte("marker-of-the-image\n"), 0o644)
	ref := importImage(t, root, "cfg", "ENV APP_MODE=from-image", "ENV HTTP_PROXY=http://image.invalid:1",
		"ENV PATH=/opt/tools:/bin", "WORKDIR /srv/app", "USER imageuser")
	badUser := importImage(t, root, "uid", "USER 4242")
	state := t.TempDir()
	s := startSessionServer(t, fmt.Sprintf("  state_dir: %s\n  rootfs_roots: [%s]\n", state, filepath.Dir(root)))

	id := strings.TrimSpace(s.must(t, "create", "--image", ref, "--env", "EXTRA=from-create"))
	out := s.must(t, "exec", id, "--", "sh", "-c",
		`pwd; echo "mode=$APP_MODE extra=$EXTRA path=$PATH proxy=$HTTP_PROXY"; id; cat /etc/passwd /etc/image-marker`)
	for _, want := range []string{"/srv/app\n", "mode=from-image extra=from-create path=/opt/tools:/bin proxy=http://exec-",
		"uid=1000(sandbox)", "sandbox:x:1000:1000", "marker-of-the-image"} {
		if !strings.Contains(out, want) {
			t.Errorf("image session: output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "imageuser") || strings.Contains(out, "image.invalid") {
		t.Errorf("the image's passwd or proxy variable shows:\n%s", out)
	}
	// The files API on an image root.
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("carried in\n"), 0o644)
	s.must(t, "cp", in, id+":/tmp/in.txt")
	dst := filepath.Join(t.TempDir(), "out.txt")
	s.must(t, "cp", id+":/tmp/in.txt", dst)
	if b, _ := os.ReadFile(dst); string(b) != "carried in\n" {
		t.Errorf("cp round trip: %q", b)
	}

	dirID := strings.TrimSpace(s.must(t, "create", "--rootfs", root))
	if _, err := os.Stat(sandboxState(native.DefaultStateDir, dirID)); err != nil {
		t.Errorf("the control: %v; the leftover check below would prove nothing", err)
	}
	if out := s.must(t, "exec", dirID, "--", "sh", "-c", "pwd; cat /etc/image-marker; echo $APP_MODE"); out != "/home/sandbox\nmarker-of-the-image\n\n" {
		t.Errorf("rootfs session: %q, want the marker in $HOME and no image config", out)
	}
	if _, errOut, code := s.cli(t, "create", "--image", badUser); code == 0 || !strings.Contains(errOut, "is uid 4242") {
		t.Errorf("image of uid 4242: exit %d %q", code, errOut)
	}
	if _, errOut, code := s.cli(t, "create", "--rootfs", "/usr"); code == 0 || !strings.Contains(errOut, "not under sessions.rootfs_roots") {
		t.Errorf("rootfs outside the roots: exit %d %q", code, errOut)
	}

	// A crash: the restarted proxy ends both sessions with their reports; nothing is left.
	s.stop(syscall.SIGKILL)
	s.start(t)
	for _, sid := range []string{id, dirID} {
		b, err := os.ReadFile(filepath.Join(state, sid+".report.json"))
		if err != nil || !strings.Contains(string(b), "airlock restarted") {
			t.Errorf("report of %s after the restart: %v %s", sid, err, b)
		}
		if _, errOut, code := s.cli(t, "exec", sid, "--", "true"); code == 0 || !strings.Contains(errOut, "ended") {
			t.Errorf("exec in %s after the restart: exit %d %q", sid, code, errOut)
		}
		if l := leftovers(sid, native.DefaultStateDir); l != "" {
			t.Errorf("%s left after the restart: %s", sid, l)
		}
	}
	// The image was unpacked once, and serves the next session from the cache.
	id = strings.TrimSpace(s.must(t, "create", "--image", ref))
	if out := s.must(t, "exec", id, "--", "cat", "/etc/image-marker"); out != "marker-of-the-image\n" {
		t.Errorf("after the restart: %q", out)
	}
	if rep := s.must(t, "rm", id); !strings.Contains(rep, id) {
		t.Errorf("rm printed %q, want the report", rep)
	}
	if l := leftovers(id, native.DefaultStateDir); l != "" {
		t.Errorf("%s left after rm: %s", id, l)
	}
	// Two images (the one of uid 4242 was unpacked before its User was read), each once.
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "home", "images", "sha256")); len(entries) != 2 {
		t.Errorf("image cache holds %d images, want the two, each unpacked once", len(entries))
	}
	if left, _ := filepath.Glob(filepath.Join(s.dir, "home", "images", "*")); len(left) != 1 {
		t.Errorf("image cache directory holds %v; want only sha256/", left)
	}
}

// sandboxState is the state directory of native sandbox id (its image top layer among
// others).
func sandboxState(nativeState, id string) string {
	return filepath.Join(nativeState, "sandboxes", id)
}

// leftovers lists what sandbox id left on the host: its state directory (under
// nativeState), a mount naming it, a process in it.
func leftovers(id, nativeState string) string {
	var out []string
	if _, err := os.Stat(sandboxState(nativeState, id)); err == nil {
		out = append(out, "state directory "+sandboxState(nativeState, id))
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), id) {
		out = append(out, "a mount")
	}
	if p := processesNaming(id); len(p) > 0 {
		out = append(out, "processes "+strings.Join(p, ", "))
	}
	return strings.Join(out, "; ")
}

// processesNaming lists the processes whose command line or environment names s.
func processesNaming(s string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if p == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(p, "environ"))
		if bytes.Contains(cmdline, []byte(s)) || bytes.Contains(environ, []byte(s)) {
			out = append(out, filepath.Base(p)+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// TestRootlessSession: `airlock proxy` run by an ordinary user (AIRLOCK_E2E_ROOTLESS=1:
// airlock-test) serves native sessions with its state under that user's directories
// (sessions.state_dir unset): create, exec streamed and its result fetched again, files in
// and out, rm with the report, a root of its own, and nothing left of the sandboxes: no
// process, no mount, no state. As root it is the same against root sandboxes.
func TestRootlessSession(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "w.txt"), []byte("from-the-workspace\n"), 0o644)
	root := busyboxRoot(t)
	extra := fmt.Sprintf("  workspace_roots: [%s]\n  rootfs_roots: [%s]\n", filepath.Dir(ws), filepath.Dir(root))
	nativeState := native.DefaultStateDir
	if e2etest.Rootless() {
		nativeState = native.RootlessStateDir()
	} else {
		extra += "  state_dir: " + t.TempDir() + "\n" // the default under /run is shared as root
	}
	s := startSessionServer(t, extra)
	marker := "86399." + strconv.Itoa(os.Getpid()) // a sleep of the sandbox, found by its argument

	id := strings.TrimSpace(s.must(t, "create", "--workspace", ws, "--label", "task=rootless"))
	out, errOut, code := s.cli(t, "exec", id, "--", "sh", "-c", "cat w.txt; id -u; echo to-stderr >&2; exit 3")
	if code != 3 || out != "from-the-workspace\n1000\n" || !strings.Contains(errOut, "to-stderr") {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 3, the workspace file and uid 1000", code, out, errOut)
	}
	// The streamed form, then its result fetched again by exec id.
	codeHTTP, body := s.api(t, "POST", "/v1/sandboxes/"+id+"/exec", session.ExecRequest{Argv: []string{"sh", "-c", "echo streamed; exit 7"}})
	var last session.ExecResult
	var stdout strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var f session.Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Text(), err)
		}
		if f.Result != nil {
			last = *f.Result
		} else if f.Stream == "stdout" {
			stdout.Write(f.Data)
		}
	}
	if codeHTTP != 200 || stdout.String() != "streamed\n" || last.ExitCode != 7 || last.ExecID == "" {
		t.Fatalf("streamed exec: %d %q %+v", codeHTTP, stdout.String(), last)
	}
	codeHTTP, body = s.api(t, "GET", "/v1/sandboxes/"+id+"/execs/"+last.ExecID, nil)
	var again session.ExecResult
	if err := json.Unmarshal(body, &again); codeHTTP != 200 || err != nil || again.ExitCode != 7 || again.State != "done" {
		t.Errorf("exec result by id: %d %s", codeHTTP, body)
	}
	// Files in and out.
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("carried in\n"), 0o644)
	s.must(t, "cp", in, id+":/workspace/in.txt")
	dst := filepath.Join(t.TempDir(), "out.txt")
	s.must(t, "cp", id+":/workspace/in.txt", dst)
	if b, _ := os.ReadFile(dst); string(b) != "carried in\n" {
		t.Errorf("cp round trip: %q", b)
	}
	// A command still running when the sandbox is removed.
	sleeping := make(chan struct{})
	go func() {
		defer close(sleeping)
		cmd := exec.Command(s.bin, "sandbox", "exec", "--admin", "http://"+s.admin, "--token-file", s.token, id, "--", "sleep", marker)
		_ = cmd.Run()
	}()
	t.Cleanup(func() { <-sleeping })
	for deadline := time.Now().Add(10 * time.Second); len(processesNaming(marker)) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox's sleep is not seen on the host: the leftover check below would prove nothing")
		}
	}
	// A root of its own.
	dirID := strings.TrimSpace(s.must(t, "create", "--rootfs", root))
	if _, err := os.Stat(sandboxState(nativeState, dirID)); err != nil {
		t.Errorf("the control: %v; the leftover check below would prove nothing", err)
	}
	if out := s.must(t, "exec", dirID, "--", "sh", "-c", "test -e /bin/busybox && test ! -e /usr/bin/apt && id -un"); out != "sandbox\n" {
		t.Errorf("rootfs session: %q", out)
	}

	if e2etest.Rootless() { // no cgroup: a memory limit asked for is refused, saying why
		if _, errOut, code := s.cli(t, "create", "--memory", "64M"); code == 0 || !strings.Contains(errOut, "cannot be enforced in this rootless native sandbox") {
			t.Errorf("rootless create with a memory limit: exit %d %q", code, errOut)
		}
	}
	for _, sid := range []string{id, dirID} {
		rep := s.must(t, "rm", sid)
		var r struct {
			SandboxID string `json:"sandbox_id"`
		}
		if err := json.Unmarshal([]byte(rep), &r); err != nil || r.SandboxID != sid {
			t.Errorf("rm %s printed %q, want its report", sid, rep)
		}
		if sid == id { // its client, which names it too, ends with the command rm killed
			select {
			case <-sleeping:
			case <-time.After(30 * time.Second):
				t.Errorf("exec of a command running at rm did not end")
			}
		}
		if l := leftovers(sid, nativeState); l != "" {
			t.Errorf("%s left after rm: %s", sid, l)
		}
	}
	if p := processesNaming(marker); len(p) > 0 {
		t.Errorf("the sandbox's background process outlived rm: %v", p)
	}
	s.stop(syscall.SIGTERM)
	if p := processesNaming(s.bin); len(p) > 0 {
		t.Errorf("airlock processes left after the proxy stopped: %v", p)
	}
}
