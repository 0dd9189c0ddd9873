package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

// fakeCluster is client-go's fake clientset with the proxy Service, where created pods
// start running (the fake has no kubelet).
func fakeCluster(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock", Namespace: "airlock"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.42"},
	})
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Status.Phase = corev1.PodRunning
		return false, nil, nil
	})
	return c
}

// objectsLeft lists the sandbox objects in the namespace.
func objectsLeft(t *testing.T, c *fake.Clientset) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	pods, _ := c.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		left = append(left, "pod/"+p.Name)
	}
	secrets, _ := c.CoreV1().Secrets(DefaultNamespace).List(ctx, metav1.ListOptions{})
	for _, s := range secrets.Items {
		left = append(left, "secret/"+s.Name)
	}
	nps, _ := c.NetworkingV1().NetworkPolicies(DefaultNamespace).List(ctx, metav1.ListOptions{})
	for _, n := range nps.Items {
		left = append(left, "networkpolicy/"+n.Name)
	}
	slices.Sort(left)
	return left
}

// TestLifecycle: a sandbox through sandbox.New creates its three objects with a live
// credential, runs commands through exec with the built environment minus the proxy
// variables, and Close deletes everything and revokes the credential.
func TestLifecycle(t *testing.T) {
	c := fakeCluster(t)
	tok := &tokens{}
	ex := &execRecorder{out: "hi\n", code: 3}
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok, Execer: ex})
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-life", Backend: b, Env: []string{"FOO=bar"}, CABundle: []byte("ca")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"networkpolicy/airlock-sbx-life", "pod/airlock-sbx-life", "secret/airlock-sbx-life"}
	if got := objectsLeft(t, c); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	if !tok.live["sbx-life"] {
		t.Errorf("no live credential for sbx-life")
	}
	s, err := c.CoreV1().Secrets(DefaultNamespace).Get(ctx, "airlock-sbx-life", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(s.Data[keyProxyURL]); got != "http://sbx-life:"+testToken+"@10.96.0.42:3128" {
		t.Errorf("proxy url %q, want the credential and the service's cluster IP", got)
	}
	res, err := sb.Run(ctx, sandbox.Command{Args: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "hi\n" {
		t.Errorf("exit %d stdout %q, want 3 and %q", res.ExitCode, res.Stdout, "hi\n")
	}
	if len(ex.got) != 1 {
		t.Fatalf("%d execs, want 1", len(ex.got))
	}
	x := ex.got[0]
	if x.Pod != "airlock-sbx-life" || x.Container != "sandbox" || x.Namespace != DefaultNamespace {
		t.Errorf("exec in %s/%s/%s, want %s/airlock-sbx-life/sandbox", x.Namespace, x.Pod, x.Container, DefaultNamespace)
	}
	cmd := strings.Join(x.Command, " ")
	for _, w := range []string{"FOO=bar", "SSL_CERT_FILE=" + sandbox.CABundlePath, "HOME=" + sandbox.HomeDir, " " + sandbox.HomeDir + " ", "echo hi"} {
		if !strings.Contains(cmd, w) {
			t.Errorf("exec command %q lacks %q", cmd, w)
		}
	}
	if strings.Contains(cmd, "HTTP_PROXY=") || strings.Contains(cmd, "HTTPS_PROXY=") || strings.Contains(cmd, "proxy=http") {
		t.Errorf("exec command %q carries a proxy variable: those come from the Secret only", cmd)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("left behind after Close: %v", got)
	}
	if tok.live["sbx-life"] {
		t.Errorf("credential still live after Close")
	}
	if err := sb.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCreateFailureCleansUp: when the pod cannot be created, the policy and Secret made
// before it are deleted and the credential revoked.
func TestCreateFailureCleansUp(t *testing.T) {
	c := fakeCluster(t)
	c.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("admission webhook denied the pod")
	})
	tok := &tokens{}
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok})
	_, err := sandbox.New(context.Background(), sandbox.Options{ID: "sbx-fail", Backend: b})
	if err == nil || !strings.Contains(err.Error(), "admission webhook denied") {
		t.Fatalf("New: %v, want the pod creation error", err)
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("left behind after a failed Create: %v", got)
	}
	if len(tok.live) != 0 {
		t.Errorf("credentials still live: %v", tok.live)
	}
}

func TestProxyServiceMissing(t *testing.T) {
	b := newTestBackend(t, Options{Client: kubetest.Wrap(fake.NewClientset())})
	_, err := b.Create(context.Background(), sandbox.Options{ID: "sbx-x"})
	if err == nil || !strings.Contains(err.Error(), "proxy service airlock/airlock") {
		t.Errorf("Create: %v, want an error naming the proxy service", err)
	}
}

func TestExecCommand(t *testing.T) {
	tests := []struct {
		cmd  sandbox.Command
		want []string
	}{
		{sandbox.Command{Args: []string{"ls", "-l"}, Dir: "/workspace", Env: []string{"A=1", "HTTP_PROXY=http://127.0.0.1:3128"}},
			[]string{"/bin/sh", "-c", `cd "$0" && exec env "$@"`, "/workspace", "A=1", "ls", "-l"}},
		{sandbox.Command{Args: []string{"X=y"}},
			[]string{"/bin/sh", "-c", `cd "$0" && exec env "$@"`, sandbox.HomeDir, "/bin/sh", "-c", `exec "$0" "$@"`, "X=y"}},
	}
	for _, tt := range tests {
		if got := execCommand(tt.cmd); !slices.Equal(got, tt.want) {
			t.Errorf("execCommand(%v) = %q, want %q", tt.cmd.Args, got, tt.want)
		}
	}
}

func TestConnectNamesTheMissingConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, _, err := Connect(t.TempDir() + "/no-such-kubeconfig")
	if err == nil || !strings.Contains(err.Error(), "no-such-kubeconfig") {
		t.Errorf("Connect: %v, want an error naming the kubeconfig", err)
	}
}

// TestIssueFailureCreatesNothing: when no credential can be had (the admin API is down),
// Create fails with that error and no object is made.
func TestIssueFailureCreatesNothing(t *testing.T) {
	c := fakeCluster(t)
	tok := &tokens{issueErr: errors.New("airlock admin API at http://airlock-admin:9090 unreachable")}
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok})
	_, err := sandbox.New(context.Background(), sandbox.Options{ID: "sbx-noissue", Backend: b})
	if err == nil || !strings.Contains(err.Error(), "issue proxy credential") || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("New: %v, want the issue error", err)
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("objects made without a credential: %v", got)
	}
}

// TestRevokeFailureIsReported: Close still deletes everything when the credential cannot
// be revoked, and says that it could not.
func TestRevokeFailureIsReported(t *testing.T) {
	c := fakeCluster(t)
	tok := &tokens{}
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok})
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-norevoke", Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	tok.revokeErr = errors.New("admin API answered 503")
	err = sb.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "revoke proxy credential") {
		t.Errorf("Close: %v, want the revoke error", err)
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("left behind after Close: %v", got)
	}
}

// TestConcurrentCloseWaitsForTheFirst: a Close that comes while another is tearing the
// sandbox down returns only when the objects are gone (it used to return nil at once).
func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	c := fakeCluster(t)
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: &tokens{}})
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-twice", Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	c.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		close(entered)
		<-release
		return false, nil, nil
	})
	first := make(chan error, 1)
	go func() { first <- sb.Close(ctx) }()
	<-entered
	second := make(chan error, 1)
	go func() { second <- sb.Close(ctx) }()
	select {
	case err := <-second:
		t.Fatalf("second Close returned (%v) while the first was still deleting the pod", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("left behind after Close: %v", got)
	}
}

// TestCloseDoesNotForceDeleteThePod: the pod is deleted with a grace period above 0 (0 is a
// force deletion: the API object goes at once while the containers still run, and the
// NetworkPolicy deleted right after would leave them unconfined), and its spec has one too.
func TestCloseDoesNotForceDeleteThePod(t *testing.T) {
	c := fakeCluster(t)
	var podGrace []*int64
	c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		podGrace = append(podGrace, a.(k8stesting.DeleteAction).GetDeleteOptions().GracePeriodSeconds)
		return false, nil, nil
	})
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: &tokens{}, Execer: &execRecorder{}})
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-grace", Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods(DefaultNamespace).Get(ctx, "airlock-sbx-grace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 0 {
		t.Errorf("pod terminationGracePeriodSeconds %v: want above 0", g)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(podGrace) != 1 || podGrace[0] == nil || *podGrace[0] <= 0 {
		t.Errorf("pod deleted with grace periods %v: want one deletion with a grace period above 0", podGrace)
	}
}

// TestPolicyOutlivesAPodThatMayRun: when the pod's delete fails, or the pod is still there
// when waitGone gives up, Close keeps the NetworkPolicy (the pod may still run, and the
// policy is what confines it) and says so; the Secret still goes.
func TestPolicyOutlivesAPodThatMayRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reactor func(*fake.Clientset)
	}{
		{"delete fails", func(c *fake.Clientset) {
			c.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("etcdserver: request timed out")
			})
		}},
		{"pod never goes", func(c *fake.Clientset) {
			c.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, nil // accepted; the kubelet never stops it
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeCluster(t)
			b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: &tokens{}, Execer: &execRecorder{}, StartTimeout: time.Second})
			ctx := context.Background()
			sb, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-stays", Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			tc.reactor(c)
			err = sb.Close(ctx)
			if err == nil || !strings.Contains(err.Error(), "networkpolicy airlock-sandboxes/airlock-sbx-stays kept") {
				t.Errorf("Close = %v; want it to say the policy was kept", err)
			}
			want := []string{"networkpolicy/airlock-sbx-stays", "pod/airlock-sbx-stays"}
			if left := objectsLeft(t, c); !slices.Equal(left, want) {
				t.Errorf("left %v; want %v (the policy stays with the pod)", left, want)
			}
		})
	}
}
