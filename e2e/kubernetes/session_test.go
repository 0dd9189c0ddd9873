//go:build k8s

package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSessionOnCluster: a sandbox session with "backend": "kubernetes", created through one
// proxy replica's admin API with the shipped manifests' issuer token (`airlock sandbox
// create|exec|rm --admin`), is a pod of the cluster made by that replica's service account:
// commands run one after another in the same pod (a file written by one is read by the
// next), its requests go out through every replica with the credential the owning replica
// issued, a denied one is refused, every other way out is closed, and `rm` ends it with its
// report, leaves no object behind, and revokes its credential on every replica.
func TestSessionOnCluster(t *testing.T) {
	owner := env.replicas[0]
	adminArgs := []string{"--admin", "http://" + owner.admin, "--token-file", env.issuerFile}
	cli := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(airlock, append([]string{"sandbox"}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code = cmd.ProcessState.ExitCode()
		if err != nil && code < 0 {
			t.Fatalf("airlock sandbox %s: %v", args[0], err)
		}
		return o.String(), e.String(), code
	}

	out, errOut, code := cli(append(append([]string{"create"}, adminArgs...),
		"--backend", "kubernetes", "--image", sandboxImg, "--label", "team=e2e", "--ttl", "15m")...)
	if code != 0 {
		t.Fatalf("sandbox create: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("sandbox create printed %q, want the id", out)
	}
	removed := false
	defer func() {
		if !removed {
			cli(append(append([]string{"rm"}, adminArgs...), id)...)
		}
	}()
	run := func(script string) (string, int) {
		t.Helper()
		out, errOut, code := cli(append(append([]string{"exec"}, adminArgs...), id, "--", "sh", "-c", script)...)
		t.Logf("exec: exit %d\n%s%s", code, withoutProxyCredential(out), errOut)
		return out, code
	}

	// The pod of the session, made in the sandbox namespace.
	pod, err := kadmin.CoreV1().Pods(sandboxNS).Get(t.Context(), "airlock-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the session's pod: %v", err)
	}

	// Two commands in one pod: the second reads what the first wrote.
	if _, code := run("echo kept-between-commands > /tmp/state; exit 7"); code != 7 {
		t.Errorf("exec exit %d, want the command's 7", code)
	}
	if out, _ := run("cat /tmp/state"); !strings.Contains(out, "kept-between-commands") {
		t.Errorf("the second command did not see the first one's file: %q", out)
	}

	// Through the proxy: the Service, then each replica by its pod address.
	out, _ = run(replicaScript() + "echo \"proxy=$HTTPS_PROXY\"")
	for _, r := range env.replicas {
		if !strings.Contains(out, "replica "+r.ip+": hello GET /allowed/x") {
			t.Errorf("allowed request through replica %s (session owned by %s) failed", r.name, owner.name)
		}
	}
	if !strings.Contains(out, "service: hello GET /allowed/x") {
		t.Error("allowed request through the proxy Service failed")
	}
	if !strings.Contains(out, "denied:403") {
		t.Error("denied request: want 403")
	}
	proxyURL := sandboxProxyURL(t, out, "the session pod")

	// Every other way out is closed.
	probe, _ := run(probeScript(env.replicas[1].ip))
	got := outcomes(probe)
	for _, e := range escapes {
		if reached, ok := got[e]; !ok || reached {
			t.Errorf("from the session's pod, %s: reached=%v (probed=%v), want closed by NetworkPolicy", e, reached, ok)
		}
	}

	// rm ends it and prints the run report.
	out, errOut, code = cli(append(append([]string{"rm"}, adminArgs...), id)...)
	removed = code == 0
	if code != 0 {
		t.Fatalf("sandbox rm: exit %d\n%s%s", code, out, errOut)
	}
	var rep struct {
		SandboxID string            `json:"sandbox_id"`
		Labels    map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.SandboxID != id || rep.Labels["team"] != "e2e" {
		t.Errorf("rm's report: %v %s", err, out)
	}
	assertNothingLeft(t, id, string(pod.UID))

	// The ended session's credential is refused through every replica.
	assertRefusedEverywhere(t, proxyURL, "the ended session's")
	pass, _ := proxyURL.User.Password()
	logs, _ := kubectl("", "-n", proxyNS, "logs", "-l", "app.kubernetes.io/name=airlock", "--tail", "-1")
	if strings.Contains(logs, pass) {
		t.Error("a proxy replica's log holds the session's credential")
	}
}
