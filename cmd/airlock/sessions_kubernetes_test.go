package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
	"github.com/airlock-proxy/airlock/session"
)

// memTokens is an in-memory kubernetes.TokenIssuer (the proxy's, in airlock proxy).
type memTokens struct {
	mu   sync.Mutex
	live map[string]bool
}

func (m *memTokens) IssueToken(_ context.Context, id sandbox.Identity) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[id.ID] = true
	return "tok-" + id.ID, nil
}

func (m *memTokens) RevokeToken(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, id)
	return nil
}

// TestKubernetesSession: a session with backend kubernetes is a pod of the image asked
// for, in sandbox.kubernetes.namespace, whose credential this proxy issued; commands run
// in it with the proxy URL of its Secret; delete removes the pod, Secret and policy and
// revokes the credential; a workspace or a missing image is refused, and so is a create
// when no cluster is reachable.
func TestKubernetesSession(t *testing.T) {
	c := fakeKubeCluster()
	tok := &memTokens{live: map[string]bool{}}
	sb := &sessionBackends{tokens: tok, kube: KubernetesConfig{Namespace: "sbx", InitImage: "registry.example/airlock:1"},
		connect: func(string) (kubernetes.Client, *rest.Config, error) { return kubetest.Wrap(c), &rest.Config{}, nil },
		execer:  &localExecer{t: t, client: c, dir: t.TempDir()}}
	m, err := session.New(session.Options{StateDir: t.TempDir(), Backend: sb.backend}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	ctx := context.Background()
	info, err := m.Create(ctx, session.Spec{Backend: "kubernetes", Image: "registry.example/agent:1", Labels: map[string]string{"task": "k"}})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods("sbx").Get(ctx, "airlock-"+info.ID, metav1.GetOptions{})
	if err != nil || pod.Spec.Containers[0].Image != "registry.example/agent:1" || pod.Spec.InitContainers[0].Image != "registry.example/airlock:1" {
		t.Fatalf("the session's pod: %v %v", pod, err)
	}
	if !tok.live[info.ID] {
		t.Errorf("no credential issued for %s", info.ID)
	}
	var out strings.Builder
	res, err := m.Exec(ctx, info.ID, session.ExecRequest{Argv: []string{"sh", "-c", `echo "via ${HTTPS_PROXY#*@}"`}},
		session.ExecIO{Output: func(_ string, p []byte) error { out.Write(p); return nil }})
	if err != nil || res.ExitCode != 0 || out.String() != "via 127.0.0.1:3128\n" {
		t.Errorf("exec: %+v %v %q, want the proxy Service of the Secret", res, err, out.String())
	}
	if _, err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	pods, _ := c.CoreV1().Pods("sbx").List(ctx, metav1.ListOptions{})
	secrets, _ := c.CoreV1().Secrets("sbx").List(ctx, metav1.ListOptions{})
	nps, _ := c.NetworkingV1().NetworkPolicies("sbx").List(ctx, metav1.ListOptions{})
	if len(pods.Items)+len(secrets.Items)+len(nps.Items) != 0 || tok.live[info.ID] {
		t.Errorf("left after delete: %d pods, %d secrets, %d policies, credential live %v", len(pods.Items), len(secrets.Items), len(nps.Items), tok.live[info.ID])
	}

	for _, c := range []struct {
		spec session.Spec
		want string
	}{
		{session.Spec{Backend: "kubernetes", Image: "x:1", Workspace: "/srv"}, "host directories do not exist on the cluster's nodes"},
		{session.Spec{Backend: "kubernetes"}, "needs an image"},
	} {
		if _, err := m.Create(ctx, c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
	noInit := &sessionBackends{tokens: tok, kube: KubernetesConfig{Namespace: "sbx"}, connect: sb.connect}
	if _, err := noInit.backend(ctx, "kubernetes", "x:1"); err == nil || !strings.Contains(err.Error(), "sandbox.kubernetes.init_image") {
		t.Errorf("no init image: %v", err)
	}
	none := &sessionBackends{tokens: tok, kube: KubernetesConfig{InitImage: "a:1"}, connect: func(string) (kubernetes.Client, *rest.Config, error) {
		return nil, nil, errors.New("no configuration")
	}}
	if _, err := none.backend(ctx, "kubernetes", "x:1"); err == nil || !strings.Contains(err.Error(), "this airlock reaches no Kubernetes cluster") {
		t.Errorf("no cluster: %v", err)
	}
	var _ kubernetes.TokenIssuer = tok
}
