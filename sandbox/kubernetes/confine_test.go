package kubernetes

import (
	"context"
	"net"
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

// listen returns the address of a loopback listener that accepts (and closes) connections
// until the test ends.
func listen(t *testing.T) (string, net.Listener) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String(), l
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestCheckConfinement(t *testing.T) {
	proxy, _ := listen(t)
	open, _ := listen(t)
	closed := closedAddr(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	tests := []struct {
		name, proxy, forbidden string
		want                   string // "" means confined
	}{
		{"confined", proxy, closed, ""},
		{"no forbidden half", proxy, ConfinementProbeNone, ""},
		{"forbidden answers", proxy, open, "which the policy forbids, answers"},
		{"proxy refuses", closed, closed, "does not answer"},
		{"no API server in the environment", proxy, "", "KUBERNETES_SERVICE_HOST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			err := CheckConfinement(ctx, tt.proxy, tt.forbidden)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckConfinement: %v, want confined", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("CheckConfinement: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestCheckConfinementWaitsForThePolicy: the forbidden destination (the API server, from
// the environment as in a pod) answers at first, as before the network plugin programs a
// new pod's policy, and the proxy refuses, as before its allow rule; the check returns
// only once both have changed.
func TestCheckConfinementWaitsForThePolicy(t *testing.T) {
	api, apiL := listen(t)
	host, port, _ := net.SplitHostPort(api)
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	proxy := closedAddr(t)
	proxyL := make(chan net.Listener, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		apiL.Close()
		time.Sleep(400 * time.Millisecond)
		l, err := net.Listen("tcp", proxy)
		if err != nil {
			t.Error(err)
		}
		proxyL <- l
	}()
	t.Cleanup(func() {
		if l := <-proxyL; l != nil {
			l.Close()
		}
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckConfinement(ctx, proxy, ""); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 800*time.Millisecond {
		t.Fatalf("confined after %v, before the proxy listened", d)
	}
}

// TestCreateReportsAFailedConfinementCheck: a pod whose init container failed (its policy
// never came into force) fails the Create with the check's reason, and leaves nothing.
func TestCreateReportsAFailedConfinementCheck(t *testing.T) {
	// No kubelet: the pod's status is what this reactor says.
	c := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock", Namespace: "airlock"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.42"},
	})
	reason := "the pod's network is not confined as its NetworkPolicy says: 10.96.0.1:443, which the policy forbids, answers"
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		p.Status.Phase = corev1.PodFailed
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: confinementContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "Error: " + reason + "\n"}}}}
		return false, nil, nil
	})
	tok := &tokens{}
	b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok})
	_, err := sandbox.New(context.Background(), sandbox.Options{ID: "sbx-open", Backend: b})
	if err == nil || !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), "container confinement exited 1") {
		t.Fatalf("create: %v, want the check's reason", err)
	}
	if left := objectsLeft(t, c); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
