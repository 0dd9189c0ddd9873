package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// decodeAll decodes every document of every manifest strictly (unknown or duplicate
// fields are errors) into typed client-go objects.
func decodeAll(t *testing.T) map[string]runtime.Object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	objs := map[string]runtime.Object{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			m, ok := obj.(metav1.Object)
			if !ok {
				t.Errorf("%s document %d: %s has no metadata", f, i, gvk)
				continue
			}
			key := gvk.Kind + "/" + m.GetNamespace() + "/" + m.GetName()
			if _, dup := objs[key]; dup {
				t.Errorf("%s: %s declared twice", f, key)
			}
			objs[key] = obj
		}
	}
	return objs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := decodeAll(t)
	for _, want := range []string{
		"Namespace//airlock", "Namespace//airlock-sandboxes",
		"ServiceAccount/airlock/airlock", "Role/airlock-sandboxes/airlock-sandbox-manager",
		"RoleBinding/airlock-sandboxes/airlock-sandbox-manager",
		"ConfigMap/airlock/airlock-config", "ConfigMap/airlock/airlock-policy",
		"Deployment/airlock/airlock", "Service/airlock/airlock", "Service/airlock/airlock-admin",
		"NetworkPolicy/airlock-sandboxes/default-deny", "PodDisruptionBudget/airlock/airlock",
	} {
		if objs[want] == nil {
			t.Errorf("missing %s", want)
		}
	}
}

// TestManifestsHangTogether: the parts refer to each other correctly and keep the
// boundary (several replicas, locked-down pods, a proxy Service that selects them, the
// PostgreSQL secret, a policy in the ConfigMap, RBAC limited to the sandbox namespace).
func TestManifestsHangTogether(t *testing.T) {
	objs := decodeAll(t)
	dep, ok := objs["Deployment/airlock/airlock"].(*appsv1.Deployment)
	if !ok {
		t.Fatal("no Deployment airlock/airlock")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("replicas %v, want at least 2", dep.Spec.Replicas)
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels); !sel.Matches(podLabels) {
		t.Errorf("deployment selector %v does not match its pods %v", sel, podLabels)
	}
	for _, svcName := range []string{"Service/airlock/airlock", "Service/airlock/airlock-admin"} {
		svc := objs[svcName].(*corev1.Service)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("%s selects %v, not the proxy pods %v", svcName, svc.Spec.Selector, podLabels)
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("proxy container security context %+v: want no escalation, read-only root, drop ALL", sc)
	}
	psc := dep.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("proxy pod security context %+v: want non-root and RuntimeDefault seccomp", psc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("proxy container has no CPU/memory limits")
	}
	pg := false
	for _, e := range c.Env {
		if e.Name == "PGPASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "airlock-postgres" {
			pg = true
		}
	}
	if !pg {
		t.Errorf("proxy container takes no PGPASSWORD from the airlock-postgres Secret")
	}
	cfg := objs["ConfigMap/airlock/airlock-config"].(*corev1.ConfigMap).Data["airlock.yaml"]
	if !strings.Contains(cfg, "store: \"postgres://") || strings.Contains(cfg, "password") {
		t.Errorf("airlock.yaml: want a postgres store without a password in it:\n%s", cfg)
	}
	// verify-full checks the server's certificate: against the CA in the airlock-postgres
	// Secret, mounted where the URL's sslrootcert points (the system roots know no cluster CA).
	if !strings.Contains(cfg, "sslmode=verify-full&sslrootcert=/etc/airlock/postgres/ca.crt") {
		t.Errorf("airlock.yaml: the postgres store URL names no sslrootcert under /etc/airlock/postgres")
	}
	if !secretMountedAt(dep, "/etc/airlock/postgres", "airlock-postgres") {
		t.Errorf("the airlock-postgres Secret (its ca.crt) is not mounted read-only at /etc/airlock/postgres")
	}
	// Credentials every replica accepts: the key and the issuer tokens are files mounted
	// from Secrets, at the paths airlock.yaml names.
	for _, want := range []struct{ key, secret string }{
		{"token_key_file: ", "airlock-token-key"},
		{"token_file: ", "airlock-issuers"},
	} {
		i := strings.Index(cfg, want.key)
		if i < 0 {
			t.Errorf("airlock.yaml has no %s: replicas would not share credentials", strings.TrimSuffix(want.key, ": "))
			continue
		}
		path := strings.TrimSpace(strings.SplitN(cfg[i+len(want.key):], "\n", 2)[0])
		if !secretMountedAt(dep, filepath.Dir(path), want.secret) {
			t.Errorf("%s%s: its directory is not a mount of the %s Secret", want.key, path, want.secret)
		}
	}
	if !strings.Contains(cfg, "require_auth: true") {
		t.Errorf("airlock.yaml: want require_auth: true (sandboxes identify by credential)")
	}
	// The admin API answers only to listed names (DNS rebinding): every name of the admin
	// Service that clients in the cluster use must be there.
	adminSvc := objs["Service/airlock/airlock-admin"].(*corev1.Service)
	hosts := adminHosts(t, cfg)
	for _, name := range []string{adminSvc.Name, adminSvc.Name + "." + adminSvc.Namespace, adminSvc.Name + "." + adminSvc.Namespace + ".svc",
		adminSvc.Name + "." + adminSvc.Namespace + ".svc.cluster.local"} {
		if !slices.Contains(hosts, name) {
			t.Errorf("airlock.yaml admin.hosts %v lacks %s: clients using that name would get 421", hosts, name)
		}
	}
	pol := objs["ConfigMap/airlock/airlock-policy"].(*corev1.ConfigMap).Data
	if !strings.Contains(pol["policy.rego"], "package airlock") {
		t.Errorf("policy ConfigMap has no Rego package airlock")
	}
	deny := objs["NetworkPolicy/airlock-sandboxes/default-deny"].(*networkingv1.NetworkPolicy)
	if len(deny.Spec.PodSelector.MatchLabels) != 0 || len(deny.Spec.Egress) != 0 || len(deny.Spec.Ingress) != 0 ||
		len(deny.Spec.PolicyTypes) != 2 {
		t.Errorf("default-deny %+v: want every pod, both directions, no rule", deny.Spec)
	}
	for key, obj := range objs {
		switch r := obj.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			t.Errorf("%s: no cluster-wide RBAC wanted", key)
		case *rbacv1.Role:
			for _, rule := range r.Rules {
				if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") {
					t.Errorf("%s: wildcard rule %+v", key, rule)
				}
			}
		case *corev1.Namespace:
			if r.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("%s: want the restricted Pod Security Standard enforced", key)
			}
		}
	}
}

// adminHosts returns admin.hosts of an airlock.yaml.
func adminHosts(t *testing.T, cfg string) []string {
	t.Helper()
	var c struct {
		Admin struct {
			Hosts []string `json:"hosts"`
		} `json:"admin"`
	}
	if err := utilyaml.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatalf("airlock.yaml: %v", err)
	}
	return c.Admin.Hosts
}

// stripComments drops comment lines, to spot documents that are only comments.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// secretMountedAt reports whether the proxy container mounts Secret secret at dir.
func secretMountedAt(dep *appsv1.Deployment, dir, secret string) bool {
	vols := map[string]string{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			vols[v.Name] = v.Secret.SecretName
		}
	}
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == dir && m.ReadOnly && vols[m.Name] == secret {
			return true
		}
	}
	return false
}
