package kubernetes

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testToken stands in for a proxy credential; it is not a secret.
const testToken = "test-token-not-a-secret"

// tokens is an in-memory TokenIssuer recording what is live; issueErr and revokeErr make
// it fail as an unreachable admin API would.
type tokens struct {
	live                map[string]bool
	issued              int // credentials issued: each replaces the id's earlier one
	issueErr, revokeErr error
}

func (t *tokens) IssueToken(_ context.Context, id sandbox.Identity) (string, error) {
	if t.issueErr != nil {
		return "", t.issueErr
	}
	if t.live == nil {
		t.live = map[string]bool{}
	}
	t.live[id.ID] = true
	t.issued++
	return testToken, nil
}

func (t *tokens) RevokeToken(_ context.Context, id string) error {
	if t.revokeErr != nil {
		return t.revokeErr
	}
	delete(t.live, id)
	return nil
}

// execRecorder is an in-memory Execer that records commands and answers with a status.
type execRecorder struct {
	got  []Exec
	code int
	out  string
}

func (e *execRecorder) Exec(_ context.Context, x Exec) (int, error) {
	e.got = append(e.got, x)
	_, _ = x.Stdout.Write([]byte(e.out))
	return e.code, nil
}

func newTestBackend(t *testing.T, o Options) *Backend {
	t.Helper()
	if o.Client == nil {
		o.Client = kubetest.Wrap(fake.NewClientset(&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "airlock", Namespace: "airlock"},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.42"},
		}))
	}
	if o.InitImage == "" {
		o.InitImage = "registry.example/airlock:1.0"
	}
	if o.Image == "" {
		o.Image = "registry.example/agent-sandbox:1.0"
	}
	o.ProxyService, o.ProxyNamespace = "airlock", "airlock"
	if o.Tokens == nil {
		o.Tokens = &tokens{}
	}
	if o.Execer == nil {
		o.Execer = &execRecorder{}
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func golden(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run with -update after checking):\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// TestGoldenObjects: the Pod, NetworkPolicy and Secret of one sandbox, as YAML.
func TestGoldenObjects(t *testing.T) {
	tests := []struct {
		name string
		bo   Options
		o    sandbox.Options
	}{
		{"limits", Options{RuntimeClassName: "gvisor"}, sandbox.Options{ID: "sbx-7f3a", Labels: map[string]string{"task": "triage"},
			Memory: 512 << 20, CPUs: 1.5, Pids: 256, TmpSize: 64 << 20, CABundle: []byte("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")}},
		{"workspace", Options{WorkspaceClaim: "agent-work", User: 2000, ConfinementProbe: "10.0.0.9:443"}, sandbox.Options{ID: "sbx-ws", WorkspaceMode: sandbox.WorkspaceRO, TmpSize: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend(t, tt.bo)
			objs, err := b.buildObjects(tt.o, "10.96.0.42", testToken)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name+"-pod.yaml", objs.Pod)
			golden(t, tt.name+"-networkpolicy.yaml", objs.NetworkPolicy)
			golden(t, tt.name+"-secret.yaml", objs.Secret)
		})
	}
}

func TestBuildRefuses(t *testing.T) {
	b := newTestBackend(t, Options{})
	tests := []struct {
		name string
		o    sandbox.Options
		want string
	}{
		{"upper case id", sandbox.Options{ID: "SBX-1"}, "lower-case"},
		{"underscore id", sandbox.Options{ID: "sbx_1"}, "lower-case"},
		{"host workspace", sandbox.Options{ID: "sbx-1", Workspace: "/home/me/src"}, "host directories"},
		{"read-only paths", sandbox.Options{ID: "sbx-1", ReadOnlyPaths: []string{"/opt/go"}}, "host paths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := b.buildObjects(tt.o, "10.0.0.1", "x"); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	c := kubetest.Wrap(fake.NewClientset())
	ex := &execRecorder{}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no client", Options{Image: "i", InitImage: "a", ProxyService: "a", Tokens: &tokens{}, Execer: ex}, "client"},
		{"no image", Options{Client: c, InitImage: "a", ProxyService: "a", Tokens: &tokens{}, Execer: ex}, "image"},
		{"no proxy service", Options{Client: c, Image: "i", InitImage: "a", Tokens: &tokens{}, Execer: ex}, "proxy service"},
		{"no tokens", Options{Client: c, Image: "i", InitImage: "a", ProxyService: "a", Execer: ex}, "token issuer"},
		{"no exec", Options{Client: c, Image: "i", InitImage: "a", ProxyService: "a", Tokens: &tokens{}}, "REST config"},
		{"no init image", Options{Client: c, Image: "i", ProxyService: "a", Tokens: &tokens{}, Execer: ex}, "init image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}
