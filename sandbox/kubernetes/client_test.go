package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

var _ Client = (*kubetest.Client)(nil)

// apiRecorder is an API server that answers every request the backend makes and records
// each as method, path, query and the object sent (decoded, whatever its encoding).
type apiRecorder struct {
	mu   sync.Mutex
	reqs []string
	objs []runtime.Object
}

func (a *apiRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var obj runtime.Object
	if len(body) > 0 {
		var err error
		if obj, _, err = serializer.NewCodecFactory(apiScheme()).UniversalDeserializer().Decode(body, nil, nil); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, r.Method+" "+r.URL.Path+" "+r.URL.Query().Encode())
	a.objs = append(a.objs, obj)
	a.mu.Unlock()

	status := func(code int, reason metav1.StatusReason) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: string(reason)})
	}
	reply := func(o runtime.Object) {
		w.Header().Set("Content-Type", "application/json")
		b, err := runtime.Encode(serializer.NewCodecFactory(apiScheme()).LegacyCodec(corev1.SchemeGroupVersion, networkingv1.SchemeGroupVersion), o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(b)
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/missing"):
		status(http.StatusNotFound, metav1.StatusReasonNotFound)
	case r.Method == http.MethodPost && obj.(metav1.Object).GetName() == "taken":
		status(http.StatusConflict, metav1.StatusReasonAlreadyExists)
	case strings.HasSuffix(r.URL.Path, "/log"):
		io.WriteString(w, "a log line\n")
	case r.Method == http.MethodPost:
		reply(obj)
	case r.Method == http.MethodDelete:
		reply(&metav1.Status{Status: metav1.StatusSuccess})
	case strings.Contains(r.URL.Path, "/services/"):
		reply(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "airlock"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.42"}})
	default:
		reply(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "airlock-x"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
}

// useClient makes each call the backend makes, with the answers it relies on: the
// objects, the log's bytes, and errors that apierrors recognises.
func useClient(t *testing.T, c Client) {
	ctx := context.Background()
	fail := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	svc, err := c.GetService(ctx, "airlock", "airlock")
	fail("get service", err)
	if err == nil && svc.Spec.ClusterIP != "10.96.0.42" {
		t.Errorf("service: cluster IP %q", svc.Spec.ClusterIP)
	}
	meta := metav1.ObjectMeta{Name: "airlock-x", Labels: map[string]string{LabelSandbox: "x"}}
	np, err := c.CreateNetworkPolicy(ctx, "sbx", &networkingv1.NetworkPolicy{ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}})
	fail("create network policy", err)
	if err == nil && (np.Name != "airlock-x" || len(np.Spec.PolicyTypes) != 1) {
		t.Errorf("created policy: %+v", np)
	}
	s, err := c.CreateSecret(ctx, "sbx", &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"proxy-url": []byte("http://u:p@10.96.0.42:3128")}})
	fail("create secret", err)
	if err == nil && string(s.Data["proxy-url"]) != "http://u:p@10.96.0.42:3128" {
		t.Errorf("created secret: %+v", s)
	}
	_, err = c.CreateSecret(ctx, "sbx", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "taken"}})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("create over an existing secret: %v, want AlreadyExists", err)
	}
	p, err := c.CreatePod(ctx, "sbx", &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "i"}}}})
	fail("create pod", err)
	if err == nil && (p.Name != "airlock-x" || p.Spec.Containers[0].Image != "i") {
		t.Errorf("created pod: %+v", p)
	}
	p, err = c.GetPod(ctx, "sbx", "airlock-x")
	fail("get pod", err)
	if err == nil && p.Status.Phase != corev1.PodRunning {
		t.Errorf("pod phase %q", p.Status.Phase)
	}
	if _, err := c.GetPod(ctx, "sbx", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("get of a missing pod: %v, want NotFound", err)
	}
	rc, err := c.PodLogs(ctx, "sbx", "airlock-x", &corev1.PodLogOptions{Container: "sandbox", Follow: true})
	fail("logs", err)
	if err == nil {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "a log line\n" {
			t.Errorf("log %q", b)
		}
	}
	grace := int64(0)
	fail("delete pod", c.DeletePod(ctx, "sbx", "airlock-x", metav1.DeleteOptions{GracePeriodSeconds: &grace}))
	fail("delete secret", c.DeleteSecret(ctx, "sbx", "airlock-x", metav1.DeleteOptions{}))
	fail("delete network policy", c.DeleteNetworkPolicy(ctx, "sbx", "airlock-x", metav1.DeleteOptions{}))
	if err := c.DeletePod(ctx, "sbx", "missing", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete of a missing pod: %v, want NotFound", err)
	}
}

// TestRESTClientMatchesClientset: the backend's REST client sends exactly the requests
// client-go's clientset sends for the same calls (paths, query parameters, and the objects
// in the bodies, which the clientset may encode as protobuf), builds the same exec URL,
// and reads the answers and errors the same way. Only the cluster suite shows them against
// a real API server.
func TestRESTClientMatchesClientset(t *testing.T) {
	record := func(c func(*rest.Config) Client) (*apiRecorder, Client) {
		a := &apiRecorder{}
		srv := httptest.NewServer(a)
		t.Cleanup(srv.Close)
		return a, c(&rest.Config{Host: srv.URL})
	}
	ourRec, ours := record(func(cfg *rest.Config) Client {
		c, err := NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	theirRec, theirs := record(func(cfg *rest.Config) Client {
		cs, err := k8s.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return kubetest.Wrap(cs)
	})
	useClient(t, ours)
	useClient(t, theirs)

	want := []string{
		"GET /api/v1/namespaces/airlock/services/airlock ",
		"POST /apis/networking.k8s.io/v1/namespaces/sbx/networkpolicies ",
		"POST /api/v1/namespaces/sbx/secrets ",
		"POST /api/v1/namespaces/sbx/secrets ",
		"POST /api/v1/namespaces/sbx/pods ",
		"GET /api/v1/namespaces/sbx/pods/airlock-x ",
		"GET /api/v1/namespaces/sbx/pods/missing ",
		"GET /api/v1/namespaces/sbx/pods/airlock-x/log container=sandbox&follow=true",
		"DELETE /api/v1/namespaces/sbx/pods/airlock-x ",
		"DELETE /api/v1/namespaces/sbx/secrets/airlock-x ",
		"DELETE /apis/networking.k8s.io/v1/namespaces/sbx/networkpolicies/airlock-x ",
		"DELETE /api/v1/namespaces/sbx/pods/missing ",
	}
	if !slices.Equal(ourRec.reqs, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(ourRec.reqs, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(ourRec.reqs, theirRec.reqs) {
		t.Errorf("requests differ from the clientset's:\n%s\nclientset:\n%s", strings.Join(ourRec.reqs, "\n"), strings.Join(theirRec.reqs, "\n"))
	}
	for i := range min(len(ourRec.objs), len(theirRec.objs)) {
		if !apiequality.Semantic.DeepEqual(ourRec.objs[i], theirRec.objs[i]) {
			t.Errorf("%s: body %#v, the clientset's %#v", ourRec.reqs[i], ourRec.objs[i], theirRec.objs[i])
		}
	}
	if o, ok := ourRec.objs[8].(*metav1.DeleteOptions); !ok || o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 0 {
		t.Errorf("delete pod body %#v, want the grace period", ourRec.objs[8])
	}

	opts := &corev1.PodExecOptions{Container: "sandbox", Command: []string{"sh", "-c", "echo hi"}, Stdin: true, Stdout: true, Stderr: true}
	got, wantURL := ours.PodExecURL("sbx", "airlock-x", opts), theirs.PodExecURL("sbx", "airlock-x", opts)
	if got.Path != "/api/v1/namespaces/sbx/pods/airlock-x/exec" || got.Query().Encode() != wantURL.Query().Encode() || got.Path != wantURL.Path {
		t.Errorf("exec URL %s, the clientset's %s", got, wantURL)
	}
	if q := got.Query(); !slices.Equal(q["command"], opts.Command) || q.Get("stdin") != "true" || q.Get("container") != "sandbox" {
		t.Errorf("exec URL %s: %v", got, fmt.Sprint(q))
	}
}
