//go:build k8s

package kubernetes_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
)

// recorder notes the API requests a client makes (method and path), to compare them with
// the Role the manifests grant.
type recorder struct {
	mu   sync.Mutex
	reqs []string
}

// recording is one transport of the client (the REST client's, exec's WebSocket and SPDY
// upgraders': each must keep its own, or the upgrade never reaches the upgrader) noting
// its requests in rec.
type recording struct {
	rec *recorder
	rt  http.RoundTripper
}

func (r *recording) RoundTrip(req *http.Request) (*http.Response, error) {
	r.rec.mu.Lock()
	q := ""
	if req.URL.Query().Get("watch") == "true" {
		q = "?watch"
	}
	r.rec.reqs = append(r.rec.reqs, req.Method+" "+req.URL.Path+q)
	r.rec.mu.Unlock()
	return r.rt.RoundTrip(req)
}

// saClient is the airlock service account's client (its token from the TokenRequest API),
// recording its requests: the backend's own REST client, so that the run shows its
// requests and encodings against a real API server.
func saClient(t *testing.T) (kubernetes.Client, *rest.Config, *recorder) {
	cfg, err := clientcmd.BuildConfigFromFlags("", env.saKubeconfig)
	must(t, err)
	rec := &recorder{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &recording{rec: rec, rt: rt} }
	c, err := kubernetes.NewClient(cfg)
	must(t, err)
	return c, cfg, rec
}

// checkRBAC: the Role in rbac.yaml is sufficient (the run above used only the service
// account) and no wider than needed: every verb it grants was used by the backend, and
// nothing outside it is allowed.
func checkRBAC(t *testing.T, reqs []string) {
	t.Helper()
	used := map[string]bool{} // "resource/sub verb"
	path := regexp.MustCompile(`^(GET|POST|DELETE|PUT|PATCH) /(?:api/v1|apis/[a-z0-9.]+/v1)/namespaces/([a-z0-9-]+)/([a-z]+)(?:/([^/]+))?(?:/([a-z]+))?(\?watch)?$`)
	for _, r := range reqs {
		m := path.FindStringSubmatch(r)
		if m == nil {
			t.Errorf("unexpected request by the backend: %s", r)
			continue
		}
		res := m[2] + " " + m[3]
		if m[5] != "" {
			res += "/" + m[5]
		}
		verb := map[string]string{"GET": "get", "POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}[m[1]]
		switch {
		case m[1] == "GET" && m[4] == "" && m[6] != "":
			verb = "watch"
		case m[1] == "GET" && m[4] == "":
			verb = "list"
		case m[1] == "GET" && m[5] == "exec":
			used[res+" create"] = true // a WebSocket exec (a GET) is authorized as get and create
		}
		used[res+" "+verb] = true
	}
	t.Logf("the backend's requests as verbs: %v", mapKeys(used))
	b, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes/rbac.yaml"))
	must(t, err)
	for _, doc := range strings.Split(string(b), "\n---") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			continue
		}
		role, ok := obj.(*rbacv1.Role)
		if !ok {
			continue
		}
		for _, rule := range role.Rules {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if !used[role.Namespace+" "+res+" "+v] {
						t.Errorf("Role %s/%s grants %s on %s, which the backend never used", role.Namespace, role.Name, v, res)
					}
				}
			}
		}
	}
	// Nothing wider: a few things the service account must not do.
	sa := "system:serviceaccount:airlock:airlock"
	for _, a := range []authzv1.ResourceAttributes{
		{Namespace: proxyNS, Verb: "get", Resource: "secrets", Name: "airlock-token-key"},
		{Namespace: proxyNS, Verb: "create", Resource: "pods"},
		{Namespace: proxyNS, Verb: "get", Resource: "services", Name: "airlock-admin"},
		{Namespace: proxyNS, Verb: "update", Resource: "configmaps", Name: "airlock-policy"},
		{Namespace: sandboxNS, Verb: "list", Resource: "secrets"},
		{Namespace: sandboxNS, Verb: "update", Resource: "pods"},
		{Namespace: sandboxNS, Verb: "patch", Resource: "networkpolicies", Group: "networking.k8s.io"},
		{Namespace: sandboxNS, Verb: "create", Resource: "pods", Subresource: "ephemeralcontainers"},
		{Namespace: "default", Verb: "create", Resource: "pods"},
		{Verb: "list", Resource: "nodes"},
		{Verb: "create", Resource: "clusterrolebindings", Group: "rbac.authorization.k8s.io"},
	} {
		a := a
		sar, err := kadmin.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:airlock", "system:authenticated"}, ResourceAttributes: &a},
		}, metav1.CreateOptions{})
		must(t, err)
		if sar.Status.Allowed {
			t.Errorf("the airlock service account may %s %s/%s in %q", a.Verb, a.Resource, a.Subresource, a.Namespace)
		}
	}
}

func mapKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
