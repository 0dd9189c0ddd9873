//go:build k8s

package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
)

// TestProxyDeployment: the Deployment's replicas run the image built here, are Ready
// (their probes pass against a real PostgreSQL) and were admitted by Pod Security
// "restricted", which is enforced: a pod without the restricted settings is refused.
func TestProxyDeployment(t *testing.T) {
	ctx := context.Background()
	dep, err := kadmin.AppsV1().Deployments(proxyNS).Get(ctx, "airlock", metav1.GetOptions{})
	must(t, err)
	if dep.Status.ReadyReplicas != 3 || len(env.replicas) != 3 {
		t.Fatalf("ready replicas %d (pods %d), want the manifest's 3", dep.Status.ReadyReplicas, len(env.replicas))
	}
	for _, r := range env.replicas {
		resp, err := http.Get("http://" + r.admin + "/readyz")
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("replica %s /readyz: %d", r.name, resp.StatusCode)
		}
	}
	// Each replica opened the store: its tables are there.
	out, err := env.psql(`SELECT count(*) FROM information_schema.tables WHERE table_name = 'airlock_credential_revocations'`)
	if err != nil || out != "1" {
		t.Errorf("PostgreSQL has no airlock_credential_revocations table: %q %v", out, err)
	}
	for _, ns := range []string{proxyNS, sandboxNS} {
		n, err := kadmin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		must(t, err)
		if n.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("namespace %s does not enforce restricted", ns)
		}
		// The API server refuses a pod that is not restricted (dry run: nothing is made).
		bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-restricted", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: sandboxImg}}}}
		_, err = kadmin.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("namespace %s admitted a pod that is not restricted: %v", ns, err)
		}
	}
}

// probeScript tries every way out of a pod other than the proxy; each line says OK or FAIL.
func probeScript(proxyPodIP string) string {
	up := env.upstreamURL
	return fmt.Sprintf(`reach() { name=$1; shift; "$@" >/dev/null 2>&1; rc=$?; case $rc in 6|7|28) echo "$name-FAIL($rc)";; *) echo "$name-OK($rc)";; esac; }
reach DIRECT curl -sk -m 5 --noproxy '*' %[1]s/allowed/x
if timeout 10 nslookup kubernetes.default.svc.cluster.local %[2]s >/dev/null 2>&1; then echo DNS-OK; else echo DNS-FAIL; fi
reach ADMIN-SERVICE curl -s -m 5 --noproxy '*' http://%[3]s:9090/healthz
reach ADMIN-POD curl -s -m 5 --noproxy '*' http://%[4]s:9090/healthz
reach API-SERVER curl -sk -m 5 --noproxy '*' https://%[5]s:443/version
reach POSTGRES curl -s -m 5 --noproxy '*' http://%[6]s:5432/
reach NODE-API curl -sk -m 5 --noproxy '*' https://%[2]s:6443/version
reach KUBELET curl -sk -m 5 --noproxy '*' https://%[2]s:10250/healthz
`, up, nodeIP, env.adminSvcIP, proxyPodIP, env.kubeSvcIP, env.pgSvcIP)
}

var escapes = []string{"DIRECT", "DNS", "ADMIN-SERVICE", "ADMIN-POD", "API-SERVER", "POSTGRES", "NODE-API", "KUBELET"}

// outcomes parses probeScript's output: name -> reached.
func outcomes(out string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		for _, e := range escapes {
			if strings.HasPrefix(l, e+"-OK") {
				m[e] = true
			} else if strings.HasPrefix(l, e+"-FAIL") {
				m[e] = false
			}
		}
	}
	return m
}

// replicaScript sends an allowed request through each replica's pod (not the Service) with
// the sandbox's own credential, and a denied one through the Service.
func replicaScript() string {
	var b strings.Builder
	fmt.Fprintf(&b, "creds=${HTTPS_PROXY#http://}; creds=${creds%%@*}\n")
	fmt.Fprintf(&b, "echo \"service: $(curl -sS -m 20 %s/allowed/x)\"\n", env.upstreamURL)
	for _, r := range env.replicas {
		fmt.Fprintf(&b, "echo \"replica %s: $(curl -sS -m 20 -x \"http://$creds@%s:3128\" %s/allowed/x)\"\n", r.ip, r.ip, env.upstreamURL)
	}
	fmt.Fprintf(&b, "curl -sS -m 20 -X POST -w '\\ndenied:%%{http_code}\\n' %s/allowed/x\n", env.upstreamURL)
	return b.String()
}

// TestSandboxPod runs a sandbox through the kubernetes backend as the airlock service
// account: its credential is issued by one replica and works through every other; a
// denied request is refused with the rule named; every other way out is closed by
// NetworkPolicy (and each is shown open for a pod without the policies); revocation
// through one replica reaches every replica; nothing is left after Close; the requests
// the backend made are exactly what the Role grants.
func TestSandboxPod(t *testing.T) {
	ctx := context.Background()
	cs, cfg, rec := saClient(t)
	issuerReplica := env.replicas[0]
	issuer := &admin.Client{BaseURL: "http://" + issuerReplica.admin, Token: env.issuerToken}
	caPEM, err := os.ReadFile(env.caFile)
	must(t, err)
	be, err := kubernetes.New(kubernetes.Options{
		Client: cs, RESTConfig: cfg, Image: sandboxImg, InitImage: airlockImg,
		ProxyService: "airlock", ProxyNamespace: proxyNS, Tokens: issuer,
	})
	must(t, err)
	id := fmt.Sprintf("sbx-e2e-%06x", time.Now().UnixNano()&0xffffff)
	sb, err := sandbox.New(ctx, sandbox.Options{ID: id, Labels: map[string]string{"team": "e2e"}, Backend: be, CABundle: caPEM})
	must(t, err)
	closed := false
	defer func() {
		if !closed {
			sb.Close(context.Background())
		}
	}()
	// The pod's own container started only after its init container saw the policy in
	// force from inside the pod (the proxy answers, the API server does not).
	pod, err := kadmin.CoreV1().Pods(sandboxNS).Get(ctx, "airlock-"+id, metav1.GetOptions{})
	must(t, err)
	if st := pod.Status.InitContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Errorf("confinement check: %+v, want one init container that exited 0", st)
	}
	if b, err := kadmin.CoreV1().Pods(sandboxNS).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "confinement"}).DoRaw(ctx); err != nil || !strings.Contains(string(b), "confined") {
		t.Errorf("confinement check's log: %q %v", b, err)
	}
	run := func(script string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		res, err := sb.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Stdout: &stdout, Stderr: &stderr, Timeout: 3 * time.Minute})
		if err != nil {
			t.Fatalf("run: %v (stderr %s)", err, stderr.String())
		}
		t.Logf("exit %d\n%s%s", res.ExitCode, stdout.String(), stderr.String())
		return stdout.String()
	}

	// Through the proxy: the Service, then each replica by its pod address.
	out := run(replicaScript())
	for _, r := range env.replicas {
		if !strings.Contains(out, "replica "+r.ip+": hello GET /allowed/x") {
			t.Errorf("allowed request through replica %s (credential issued by %s) failed", r.name, issuerReplica.name)
		}
	}
	if !strings.Contains(out, "service: hello GET /allowed/x") {
		t.Error("allowed request through the proxy Service failed")
	}
	if !strings.Contains(out, "denied:403") || !strings.Contains(out, "default") {
		t.Error("denied request: want 403 naming the rule (default)")
	}

	// Every other way out is closed.
	got := outcomes(run(probeScript(env.replicas[1].ip)))
	for _, e := range escapes {
		if reached, ok := got[e]; !ok || reached {
			t.Errorf("from the sandbox pod, %s: reached=%v (probed=%v), want closed by NetworkPolicy", e, reached, ok)
		}
	}

	// Logs over the API (pods/log): the idle process writes nothing.
	lr, err := sbLogs(ctx, cs, id)
	if err != nil {
		t.Errorf("pod logs: %v", err)
	} else {
		io.Copy(io.Discard, lr)
		lr.Close()
	}

	// Revocation through the issuing replica reaches every replica within the bound
	// (proxy.revocation_cache: 1s).
	must(t, issuer.RevokeToken(ctx, id))
	revoked := time.Now()
	var b strings.Builder
	b.WriteString("creds=${HTTPS_PROXY#http://}; creds=${creds%@*}\n")
	for _, r := range env.replicas {
		fmt.Fprintf(&b, `for i in $(seq 1 40); do code=$(curl -s -o /dev/null -w '%%{http_code}' -m 5 -x "http://$creds@%[1]s:3128" http://%[2]s/allowed/x); [ "$code" = 407 ] && break; sleep 0.25; done; echo "revoked %[1]s: $code after $i"
`, r.ip, strings.TrimPrefix(env.upstreamURL, "https://"))
	}
	out = run(b.String())
	for _, r := range env.replicas {
		if !regexp.MustCompile(`revoked ` + regexp.QuoteMeta(r.ip) + `: 407 after \d+`).MatchString(out) {
			t.Errorf("replica %s still accepts the revoked credential", r.name)
		}
	}
	t.Logf("revocation seen by every replica %s after the DELETE returned", time.Since(revoked).Round(time.Millisecond))
	secret, err := kadmin.CoreV1().Secrets(sandboxNS).Get(ctx, "airlock-"+id, metav1.GetOptions{})
	must(t, err)
	cred, _ := url.Parse(string(secret.Data["proxy-url"]))

	podUID := ""
	if p, err := kadmin.CoreV1().Pods(sandboxNS).Get(ctx, "airlock-"+id, metav1.GetOptions{}); err == nil {
		podUID = string(p.UID)
	}
	closed = true
	must(t, sb.Close(ctx))
	// Nothing is left: no object, no running container of the pod.
	assertNothingLeft(t, id, podUID)

	// The credential is refused through every replica, also after Close.
	pass, _ := cred.User.Password()
	for _, r := range env.replicas {
		req, _ := http.NewRequest(http.MethodGet, "http://"+strings.TrimPrefix(env.upstreamURL, "https://")+"/allowed/x", nil)
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(id+":"+pass)))
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.proxy})}}
		resp, err := c.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("replica %s: the closed sandbox's credential got %d, want 407", r.name, resp.StatusCode)
		}
	}
	// No replica logged the credential.
	logs, _ := kubectl("", "-n", proxyNS, "logs", "-l", "app.kubernetes.io/name=airlock", "--tail", "-1")
	if strings.Contains(logs, pass) {
		t.Error("a proxy replica's log holds the sandbox's credential")
	}

	checkRBAC(t, rec.reqs)
}

func sbLogs(ctx context.Context, c kubernetes.Client, id string) (io.ReadCloser, error) {
	return c.PodLogs(ctx, sandboxNS, "airlock-"+id, &corev1.PodLogOptions{Container: "sandbox"})
}

// assertNothingLeft: no Secret, NetworkPolicy or Pod of the sandbox, and no running
// container of its pod on the node.
func assertNothingLeft(t *testing.T, id, podUID string) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: kubernetes.LabelSandbox + "=" + id}
	pods, _ := kadmin.CoreV1().Pods(sandboxNS).List(ctx, sel)
	secrets, _ := kadmin.CoreV1().Secrets(sandboxNS).List(ctx, sel)
	pols, _ := kadmin.NetworkingV1().NetworkPolicies(sandboxNS).List(ctx, sel)
	if len(pods.Items)+len(secrets.Items)+len(pols.Items) != 0 {
		t.Errorf("left after Close: %d pods, %d secrets, %d network policies", len(pods.Items), len(secrets.Items), len(pols.Items))
	}
	if podUID == "" {
		return
	}
	// The pod's containers stopped before the API object went (no force deletion): its
	// NetworkPolicy never outlives a running container.
	out, err := exec.Command("ctr", "--address", "/run/airlock-k8s/containerd/containerd.sock", "-n", "k8s.io",
		"containers", "ls", "-q", `labels."io.kubernetes.pod.uid"==`+podUID).Output()
	if err != nil {
		t.Logf("ctr containers ls: %v", err)
		return
	}
	tasks, _ := exec.Command("ctr", "--address", "/run/airlock-k8s/containerd/containerd.sock", "-n", "k8s.io", "tasks", "ls").Output()
	for _, c := range strings.Fields(string(out)) {
		for _, l := range strings.Split(string(tasks), "\n") {
			if strings.HasPrefix(l, c) && strings.Contains(l, "RUNNING") {
				t.Errorf("container %s of the closed sandbox's pod is still running", c)
			}
		}
	}
}

// TestEscapesOpenWithoutPolicies is the control for TestSandboxPod's closed ways out: the
// same image and restricted security context, in the airlock namespace (no egress policy
// there, and the admin port is open to it), reaches each of them.
func TestEscapesOpenWithoutPolicies(t *testing.T) {
	ctx := context.Background()
	no, yes, uid := false, true, int64(1000)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("control-%06x", time.Now().UnixNano()&0xffffff), Namespace: proxyNS},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "c", Image: sandboxImg, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "infinity"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	_, err := kadmin.CoreV1().Pods(proxyNS).Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	defer kadmin.CoreV1().Pods(proxyNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kadmin.CoreV1().Pods(proxyNS).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	must(t, err)
	out, err := kubectl("", "-n", proxyNS, "exec", pod.Name, "--", "sh", "-c", probeScript(env.replicas[1].ip))
	t.Logf("%s", out)
	must(t, err)
	got := outcomes(out)
	for _, e := range escapes {
		if !got[e] {
			t.Errorf("control pod without the sandbox policies: %s not reached, so the sandbox's result proves nothing", e)
		}
	}
}

// TestCLISandboxRun runs `airlock sandbox run --backend kubernetes` as the airlock service
// account, with the credential issued through one replica's admin API.
func TestCLISandboxRun(t *testing.T) {
	home := t.TempDir()
	cfgFile := filepath.Join(home, "airlock.yaml")
	must(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`sandbox:
  kubernetes:
    init_image: `+airlockImg+`
    proxy_admin: http://%s
    token_file: %s
    kubeconfig: %s
    ca_file: %s
`, env.replicas[2].admin, env.issuerFile, env.saKubeconfig, env.caFile)), 0o600))
	report := filepath.Join(home, "report.json")
	cmd := exec.Command(airlock, "sandbox", "run", "--config", cfgFile, "--backend", "kubernetes", "--image", sandboxImg,
		"--label", "team=e2e", "--report", report, "--", "sh", "-c", replicaScript()+"echo \"proxy=$HTTPS_PROXY\"; exit 3")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", withoutProxyCredential(stdout.String()), stderr.String())
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("airlock sandbox run: %v, want the command's exit status 3", err)
	}
	out := stdout.String()
	for _, r := range env.replicas {
		if !strings.Contains(out, "replica "+r.ip+": hello GET /allowed/x") {
			t.Errorf("allowed request through replica %s failed", r.name)
		}
	}
	if !strings.Contains(out, "denied:403") {
		t.Error("denied request: want 403")
	}
	var rep struct {
		SandboxID string            `json:"sandbox_id"`
		Labels    map[string]string `json:"labels"`
	}
	b, err := os.ReadFile(report)
	if err != nil || json.Unmarshal(b, &rep) != nil || rep.SandboxID == "" {
		t.Fatalf("report: %v %s", err, b)
	}
	if rep.Labels["team"] != "e2e" {
		t.Errorf("report labels %v", rep.Labels)
	}
	assertNothingLeft(t, rep.SandboxID, "")
	proxyURL := sandboxProxyURL(t, out, "the sandbox")
	pass, _ := proxyURL.User.Password()
	if strings.Contains(stderr.String(), pass) {
		t.Error("the CLI's stderr holds the credential")
	}
	assertRefusedEverywhere(t, proxyURL, "the finished run's")
}

// sandboxProxyURL is the proxy URL a sandbox printed as "proxy=$HTTPS_PROXY" in out (what
// names the sandbox, e.g. "the session pod"), checked to hold a credential and to point at
// the proxy Service's cluster IP.
func sandboxProxyURL(t *testing.T, out, what string) *url.URL {
	t.Helper()
	var proxyURL *url.URL
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "proxy="); ok {
			proxyURL, _ = url.Parse(v)
		}
	}
	if proxyURL == nil || proxyURL.User == nil {
		t.Fatalf("no credential in %s's HTTPS_PROXY", what)
	}
	if proxyURL.Hostname() != env.proxySvcIP {
		t.Errorf("HTTPS_PROXY points at %s, want the proxy Service's cluster IP %s", proxyURL.Hostname(), env.proxySvcIP)
	}
	return proxyURL
}

// assertRefusedEverywhere checks that every replica answers 407 to the credential in
// proxyURL once the revocation cache (proxy.revocation_cache, 1 s) has expired; whose
// names it in the errors ("the ended session's").
func assertRefusedEverywhere(t *testing.T, proxyURL *url.URL, whose string) {
	t.Helper()
	time.Sleep(2 * time.Second) // proxy.revocation_cache
	pass, _ := proxyURL.User.Password()
	for _, r := range env.replicas {
		req, _ := http.NewRequest(http.MethodGet, "http://"+strings.TrimPrefix(env.upstreamURL, "https://")+"/allowed/x", nil)
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(proxyURL.User.Username()+":"+pass)))
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.proxy})}}
		resp, err := c.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("replica %s: %s credential got %d, want 407", r.name, whose, resp.StatusCode)
		}
	}
}

// withoutProxyCredential is out with the password of each proxy= line's URL redacted: the
// sandbox's proxy credential stays out of the test log.
func withoutProxyCredential(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(l, "proxy="); ok {
			if u, err := url.Parse(v); err == nil {
				lines[i] = "proxy=" + u.Redacted()
			} else {
				lines[i] = "proxy=[unparsable, not shown]"
			}
		}
	}
	return strings.Join(lines, "\n")
}
