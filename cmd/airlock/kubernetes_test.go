package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/airlock-proxy/airlock/internal/hostfile"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

// localExecer stands in for pods/exec: it runs the command the backend would exec in the
// pod on this machine with os/exec, with the proxy variables the pod gets from its Secret
// (secretKeyRef) and in a scratch directory for the pod's working directory. It is not an
// imitation of Kubernetes: it tests our wiring (the credential the admin API issued, put
// in the Secret by the backend, used by a real client through a real proxy replica).
type localExecer struct {
	t      *testing.T
	client k8s.Interface
	dir    string
	token  string // the credential seen in the Secret
}

func (l *localExecer) Exec(ctx context.Context, e kubernetes.Exec) (int, error) {
	s, err := l.client.CoreV1().Secrets(e.Namespace).Get(ctx, e.Pod, metav1.GetOptions{})
	if err != nil {
		return -1, fmt.Errorf("the pod's Secret: %w", err)
	}
	proxyURL := string(s.Data["proxy-url"])
	u, err := url.Parse(proxyURL)
	if err != nil {
		return -1, err
	}
	l.token, _ = u.User.Password()
	args := append([]string(nil), e.Command...)
	args[3] = l.dir // the script cds to its first argument: the pod's home
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HTTP_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "https_proxy=" + proxyURL}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// fakeCluster is client-go's fake clientset with the proxy's Service (its cluster IP is
// this machine, where the replica listens); created pods start running.
func fakeKubeCluster() *fake.Clientset {
	c := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock", Namespace: "airlock"},
		Spec:       corev1.ServiceSpec{ClusterIP: "127.0.0.1"},
	})
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Status.Phase = corev1.PodRunning
		return false, nil, nil
	})
	return c
}

func kubeConfig(t *testing.T, home, body string) *Config {
	t.Helper()
	p := filepath.Join(home, "sandbox.yaml")
	must(t, os.WriteFile(p, []byte("home: "+home+"\n"+body), 0o600))
	cfg, _, err := loadWithFlags(t, "--config", p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestKubernetesRun: `sandbox run --backend kubernetes` against the fake clientset and a
// real proxy replica: the credential comes from the replica's admin API, the command
// reaches the upstream through the proxy with it, its exit status and output come back,
// the report is written, and after the run the objects are gone and the credential gets 407.
func TestKubernetesRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	up := newOKUpstream(t)
	home := sharedSetup(t)
	r := startReplica(t, home, "a", "sqlite:"+filepath.Join(home, "approvals.db"))
	_, port, _ := net.SplitHostPort(r.proxy)
	cfg := kubeConfig(t, home, fmt.Sprintf(`sandbox:
  image: registry.example/agent:1
  kubernetes:
    init_image: registry.example/airlock:1
    proxy_admin: %s
    token_file: %s
    proxy_port: %s
`, r.admin.URL, filepath.Join(home, "issuer.token"), port))
	cluster := fakeKubeCluster()
	ex := &localExecer{t: t, client: cluster, dir: t.TempDir()}
	var stdout, stderr bytes.Buffer
	report := filepath.Join(home, "report.json")
	dest, err := hostfile.Open(report)
	must(t, err)
	defer dest.Close()
	o := sandbox.Options{ID: "sbx-k8s-run", Labels: map[string]string{"task": "triage"}}
	err = runKubernetes(context.Background(), cfg, o,
		[]string{"sh", "-c", `curl -sS -o /dev/null -w '%{http_code}' "$0/ok"; exit 3`, up}, dest, nil,
		kubeRun{connect: func(string) (kubernetes.Client, *rest.Config, error) { return kubetest.Wrap(cluster), nil, nil },
			execer: ex, stdout: &stdout, stderr: &stderr})
	var ec exitCode
	if !errors.As(err, &ec) || int(ec) != 3 {
		t.Fatalf("runKubernetes: %v (stderr %q), want the command's exit status 3", err, stderr.String())
	}
	if stdout.String() != "200" {
		t.Errorf("the command saw status %q through the proxy, want 200 (stderr %q)", stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(ex.token, "v1.") {
		t.Fatalf("the pod's Secret held no signed credential")
	}
	var rep sandbox.Report
	b, err := os.ReadFile(report)
	must(t, err)
	must(t, json.Unmarshal(b, &rep))
	if rep.SandboxID != "sbx-k8s-run" || rep.ExitCode != 3 || rep.Labels["task"] != "triage" || rep.Runs != 1 {
		t.Errorf("report %+v, want sbx-k8s-run, exit 3, its labels, one run", rep)
	}
	ctx := context.Background()
	pods, _ := cluster.CoreV1().Pods(kubernetes.DefaultNamespace).List(ctx, metav1.ListOptions{})
	secrets, _ := cluster.CoreV1().Secrets(kubernetes.DefaultNamespace).List(ctx, metav1.ListOptions{})
	nps, _ := cluster.NetworkingV1().NetworkPolicies(kubernetes.DefaultNamespace).List(ctx, metav1.ListOptions{})
	if len(pods.Items)+len(secrets.Items)+len(nps.Items) != 0 {
		t.Errorf("left in the cluster: %d pods, %d secrets, %d network policies", len(pods.Items), len(secrets.Items), len(nps.Items))
	}
	if got := r.through(t, url.UserPassword("sbx-k8s-run", ex.token), up+"/ok"); got != 407 {
		t.Errorf("the credential after the run: status %d, want 407 (revoked)", got)
	}
	if bytes.Contains(r.logs.Bytes(), []byte(ex.token)) || strings.Contains(stderr.String(), ex.token) {
		t.Error("the credential reached the replica's log or the command's stderr")
	}
}

// TestKubernetesRunErrors: what is missing or unreachable is said plainly, and nothing is
// created in the cluster before a credential was had.
func TestKubernetesRunErrors(t *testing.T) {
	home := sharedSetup(t)
	must(t, os.MkdirAll(filepath.Join(home, "ca"), 0o700))
	must(t, os.WriteFile(filepath.Join(home, "ca", "ca.pem"), []byte("-----BEGIN CERTIFICATE-----\n"), 0o600))
	tokenFile := filepath.Join(home, "issuer.token")
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAdmin := "http://" + closed.Addr().String()
	closed.Close()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cluster := fakeKubeCluster()
	fakeConnect := func(string) (kubernetes.Client, *rest.Config, error) { return kubetest.Wrap(cluster), nil, nil }
	tests := []struct {
		name, yaml string
		connect    func(string) (kubernetes.Client, *rest.Config, error)
		want       string
	}{
		{"no image", "sandbox:\n  kubernetes: {init_image: airlock:t, proxy_admin: http://a:9090, token_file: " + tokenFile + "}\n", fakeConnect, "needs --image"},
		{"no admin", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, token_file: " + tokenFile + "}\n", fakeConnect, "sandbox.kubernetes.proxy_admin"},
		{"no token file", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, proxy_admin: http://a:9090}\n", fakeConnect, "sandbox.kubernetes.token_file"},
		{"token file missing", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, proxy_admin: http://a:9090, token_file: /nonexistent/t}\n", fakeConnect, "sandbox.kubernetes.token_file: open /nonexistent/t"},
		{"no ca", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, proxy_admin: http://a:9090, token_file: " + tokenFile + ", ca_file: /nonexistent/ca.pem}\n", fakeConnect, "sandbox.kubernetes.ca_file"},
		{"no kubeconfig", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, proxy_admin: http://a:9090, token_file: " + tokenFile + ", kubeconfig: " + home + "/no-kubeconfig}\n",
			kubernetes.Connect, "no usable cluster configuration"},
		{"no init image", "sandbox:\n  image: i\n  kubernetes: {proxy_admin: http://a:9090, token_file: " + tokenFile + "}\n", fakeConnect, "sandbox.kubernetes.init_image"},
		{"admin unreachable", "sandbox:\n  image: i\n  kubernetes: {init_image: airlock:t, proxy_admin: " + deadAdmin + ", token_file: " + tokenFile + "}\n", fakeConnect, "airlock admin API at " + deadAdmin + " unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := kubeConfig(t, home, tt.yaml)
			var stderr bytes.Buffer
			err := runKubernetes(context.Background(), cfg, sandbox.Options{ID: "sbx-err"}, []string{"true"}, nil, nil,
				kubeRun{connect: tt.connect, execer: &localExecer{}, stdout: &stderr, stderr: &stderr})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("runKubernetes: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	pods, _ := cluster.CoreV1().Pods(kubernetes.DefaultNamespace).List(context.Background(), metav1.ListOptions{})
	nps, _ := cluster.NetworkingV1().NetworkPolicies(kubernetes.DefaultNamespace).List(context.Background(), metav1.ListOptions{})
	if len(pods.Items)+len(nps.Items) != 0 {
		t.Errorf("objects created without a credential: %d pods, %d network policies", len(pods.Items), len(nps.Items))
	}
	// Config validation names the key.
	for body, want := range map[string]string{
		"sandbox:\n  kubernetes: {init_image: airlock:t, proxy_admin: ftp://x}\n":               "sandbox.kubernetes.proxy_admin",
		"sandbox:\n  kubernetes: {init_image: airlock:t, proxy_admin: \"http://u:p@x:9090\"}\n": "token_file, not in the URL",
		"sandbox:\n  kubernetes: {proxy_port: 70000}\n":                                         "sandbox.kubernetes.proxy_port",
		"sandbox:\n  kubernetes: {confinement_probe: 10.96.0.1}\n":                              "sandbox.kubernetes.confinement_probe",
		"proxy:\n  revocation_cache: 1m\n":                                                      "proxy.revocation_cache",
		"proxy:\n  issuers: [{name: a}]\n":                                                      "proxy.issuers[0].token_file",
		"proxy:\n  issuers: [{name: a, token_file: x}, {name: a, token_file: y}]\n":             "proxy.issuers[1].name",
	} {
		p := writeConfig(t, "home: "+home+"\n"+body)
		if _, _, err := loadWithFlags(t, "--config", p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: %v, want an error naming %s", body, err, want)
		}
	}
}

// TestSandboxRunAcceptsKubernetes: the command no longer refuses the backend; without its
// config it says what is missing.
func TestSandboxRunAcceptsKubernetes(t *testing.T) {
	root := newRoot()
	root.SetArgs([]string{"sandbox", "run", "--config", writeConfig(t, "home: "+t.TempDir()+"\n"), "--backend", "kubernetes", "--image", "i", "--", "true"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "sandbox.kubernetes.proxy_admin") {
		t.Errorf("sandbox run --backend kubernetes: %v, want the missing proxy_admin named", err)
	}
}

// TestConfinementCheckCommand: what a sandbox pod's init container runs exits 0 once the
// proxy answers and the forbidden address does not, and fails with the reason otherwise;
// malformed addresses are refused before anything is dialled.
func TestConfinementCheckCommand(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	proxy := l.Addr().String()
	for _, tt := range []struct {
		args []string
		want string // "" means success
	}{
		{[]string{"--proxy", proxy, "--forbidden", "none"}, ""},
		{[]string{"--proxy", proxy, "--forbidden", proxy, "--timeout", "300ms"}, "which the policy forbids, answers"},
		{[]string{"--proxy", "10.0.0.1"}, "--proxy \"10.0.0.1\": want HOST:PORT"},
		{[]string{"--proxy", proxy, "--forbidden", "api"}, "want HOST:PORT or none"},
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"sandbox", "confinement-check"}, tt.args...))
		err := root.Execute()
		switch {
		case tt.want == "" && (err != nil || !strings.Contains(out.String(), "confined")):
			t.Errorf("%v: %v %q, want confined", tt.args, err, out.String())
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: %v, want an error mentioning %q", tt.args, err, tt.want)
		}
	}
}
