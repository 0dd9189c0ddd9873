//go:build k8s

package kubernetes_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-proxy/airlock/ca"
)

// replica is one pod of the proxy Deployment, with its ports forwarded to this host
// (`kubectl port-forward`, the documented way to reach the admin API from outside the
// airlock namespace).
type replica struct {
	name, ip     string
	proxy, admin string // 127.0.0.1:PORT
	pf           *exec.Cmd
}

// deployment is deploy/kubernetes/ applied to the cluster, with what it needs around it.
type deployment struct {
	dir          string
	upstream     *httptest.Server
	upstreamURL  string // https://NODE_IP:PORT
	caFile       string // airlock's CA certificate (the airlock-ca Secret)
	issuerToken  string
	issuerFile   string
	saKubeconfig string // the airlock service account's
	pgDir, pgBin string
	pgPort       int

	replicas                        []*replica
	proxySvcIP, adminSvcIP, pgSvcIP string
	kubeSvcIP                       string
	stopped                         bool
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func randomString(n int) string { return base64.RawURLEncoding.EncodeToString(randomBytes(n)) }

func deploy(ctx context.Context, dir string) (*deployment, error) {
	d := &deployment{dir: dir}
	// A cluster kept up (AIRLOCK_K8S_KEEP) after a run that died holds that run's objects.
	if _, err := kubectl("", "delete", "namespace", proxyNS, sandboxNS, "--ignore-not-found", "--timeout", "3m"); err != nil {
		return d, err
	}
	if _, err := kubectl("", "apply", "-f", filepath.Join(repo, "deploy/kubernetes/namespace.yaml")); err != nil {
		return d, err
	}

	// airlock's CA, made as the manifests say (`airlock ca init`).
	caHome := filepath.Join(dir, "ca-home")
	if out, err := exec.Command("env", "AIRLOCK_HOME="+caHome, airlock, "ca", "init").CombinedOutput(); err != nil {
		return d, fmt.Errorf("airlock ca init: %v %s", err, out)
	}
	d.caFile = filepath.Join(caHome, "ca", "ca.pem")

	// The upstream: HTTPS on the node's address, with a CA of its own that the proxy trusts
	// (upstream_ca) and the sandbox does not.
	upCA, err := ca.New()
	if err != nil {
		return d, err
	}
	leaf, err := upCA.Leaf(nodeIP)
	if err != nil {
		return d, err
	}
	d.upstream = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	d.upstream.Listener.Close()
	if d.upstream.Listener, err = net.Listen("tcp", nodeIP+":0"); err != nil {
		return d, err
	}
	d.upstream.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	d.upstream.StartTLS()
	d.upstreamURL = fmt.Sprintf("https://%s:%d", nodeIP, d.upstream.Listener.Addr().(*net.TCPAddr).Port)

	// PostgreSQL on the node, reached through a Service without a selector (as a database
	// outside the cluster is), over TLS verified against its own CA, password auth.
	pgCA, err := ca.New()
	if err != nil {
		return d, err
	}
	pgPassword := randomString(18)
	if err := d.startPostgres(pgCA, pgPassword); err != nil {
		return d, fmt.Errorf("postgres: %w", err)
	}
	tcp := corev1.ProtocolTCP
	port := int32(d.pgPort)
	name := "postgres"
	if _, err := kadmin.CoreV1().Services(proxyNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "postgres", Namespace: proxyNS},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: name, Port: 5432, TargetPort: intstr.FromInt32(port), Protocol: tcp}}},
	}, metav1.CreateOptions{}); err != nil {
		return d, err
	}
	if _, err := kadmin.DiscoveryV1().EndpointSlices(proxyNS).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "postgres-node", Namespace: proxyNS, Labels: map[string]string{discoveryv1.LabelServiceName: "postgres"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{nodeIP}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}, metav1.CreateOptions{}); err != nil {
		return d, err
	}

	// The Secrets the manifests ask for.
	caPEM, _ := os.ReadFile(d.caFile)
	caKey, _ := os.ReadFile(filepath.Join(caHome, "ca", "ca-key.pem"))
	d.issuerToken = randomString(24)
	d.issuerFile = filepath.Join(dir, "orchestrator.token")
	if err := os.WriteFile(d.issuerFile, []byte(d.issuerToken+"\n"), 0o600); err != nil {
		return d, err
	}
	for name, data := range map[string]map[string][]byte{
		"airlock-postgres":  {"password": []byte(pgPassword), "ca.crt": pgCA.CertPEM()},
		"airlock-ca":        {"ca.pem": caPEM, "ca-key.pem": caKey, "upstream-ca.pem": upCA.CertPEM()},
		"airlock-token-key": {"key": []byte(base64.StdEncoding.EncodeToString(randomBytes(32)) + "\n")},
		"airlock-issuers":   {"orchestrator": []byte(d.issuerToken + "\n")},
	} {
		if _, err := kadmin.CoreV1().Secrets(proxyNS).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: proxyNS}, Data: data,
		}, metav1.CreateOptions{}); err != nil {
			return d, err
		}
	}

	// The ConfigMaps as shipped, but for this cluster's upstream: its CA (a key of the
	// airlock-ca Secret, which the Deployment mounts), the node's private address allowed
	// to the dial guard, and the allowlist naming it.
	cm, err := os.ReadFile(filepath.Join(repo, "deploy/kubernetes/configmap.yaml"))
	if err != nil {
		return d, err
	}
	cmText, err := localConfig(string(cm), nodeIP)
	if err != nil {
		return d, err
	}
	if _, err := kubectl(cmText, "apply", "-f", "-"); err != nil {
		return d, err
	}
	for _, f := range []string{"rbac.yaml", "networkpolicy.yaml", "service.yaml", "deployment.yaml"} {
		if _, err := kubectl("", "apply", "-f", filepath.Join(repo, "deploy/kubernetes", f)); err != nil {
			return d, err
		}
	}

	// The replicas become Ready: their readiness probe passes (the store is reachable).
	var last string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		dep, err := kadmin.AppsV1().Deployments(proxyNS).Get(ctx, "airlock", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("%d/%d ready", dep.Status.ReadyReplicas, *dep.Spec.Replicas)
		return dep.Status.ReadyReplicas == *dep.Spec.Replicas && dep.Status.UpdatedReplicas == *dep.Spec.Replicas, nil
	})
	if err != nil {
		out, _ := kubectl("", "-n", proxyNS, "get", "pods,events", "-o", "wide")
		return d, fmt.Errorf("proxy Deployment not ready (%s): %w\n%s", last, err, out)
	}
	pods, err := kadmin.CoreV1().Pods(proxyNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=airlock,app.kubernetes.io/component=proxy"})
	if err != nil {
		return d, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		r := &replica{name: p.Name, ip: p.Status.PodIP}
		if err := r.forward(); err != nil {
			return d, err
		}
		d.replicas = append(d.replicas, r)
	}
	for svc, ip := range map[string]*string{"airlock": &d.proxySvcIP, "airlock-admin": &d.adminSvcIP, "postgres": &d.pgSvcIP} {
		s, err := kadmin.CoreV1().Services(proxyNS).Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			return d, err
		}
		*ip = s.Spec.ClusterIP
	}
	k, err := kadmin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return d, err
	}
	d.kubeSvcIP = k.Spec.ClusterIP

	// The proxy's service account, as a sandbox starter in the airlock namespace would use
	// it: a token from the TokenRequest API, nothing more.
	exp := int64(3600)
	tr, err := kadmin.CoreV1().ServiceAccounts(proxyNS).CreateToken(ctx, "airlock", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return d, err
	}
	d.saKubeconfig = filepath.Join(dir, "airlock-sa.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: airlock
  user: {token: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: airlock, namespace: airlock}
current-context: e2e
`, adminREST.Host, base64.StdEncoding.EncodeToString(adminREST.CAData), tr.Status.Token)
	return d, os.WriteFile(d.saKubeconfig, []byte(kc), 0o600)
}

// localConfig adapts the shipped configmap.yaml to this cluster's upstream.
func localConfig(cm, nodeIP string) (string, error) {
	const anchor = "    admin_listen: \"0.0.0.0:9090\"\n"
	const hosts = "      - api.github.com\n      - pypi.org\n      - files.pythonhosted.org\n"
	if !strings.Contains(cm, anchor) || !strings.Contains(cm, hosts) {
		return "", fmt.Errorf("deploy/kubernetes/configmap.yaml changed: update localConfig")
	}
	cm = strings.Replace(cm, anchor, anchor+
		"    upstream_ca: /var/lib/airlock/ca/upstream-ca.pem\n"+
		"    allow_private: [\""+nodeIP+"/32\"]\n", 1)
	return strings.Replace(cm, hosts, "      - \""+nodeIP+"\"\n", 1), nil
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)`)

func (r *replica) forward() error {
	bin := filepath.Join(cacheDir(), "bin", "kubectl")
	r.pf = exec.Command(bin, "--kubeconfig", adminKube, "-n", proxyNS, "port-forward", "pod/"+r.name, ":3128", ":9090")
	out, err := r.pf.StdoutPipe()
	if err != nil {
		return err
	}
	if err := r.pf.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(30*time.Second, func() { r.pf.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() && (r.proxy == "" || r.admin == "") {
		m := forwarding.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		switch m[2] {
		case "3128":
			r.proxy = "127.0.0.1:" + m[1]
		case "9090":
			r.admin = "127.0.0.1:" + m[1]
		}
	}
	if r.proxy == "" || r.admin == "" {
		return fmt.Errorf("port-forward to %s: no ports", r.name)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return nil
}

func (d *deployment) close() {
	for _, r := range d.replicas {
		if r.pf != nil && r.pf.Process != nil {
			r.pf.Process.Kill()
			r.pf.Wait()
		}
	}
	if d.upstream != nil {
		d.upstream.Close()
	}
	d.stopPostgres()
}

func (d *deployment) dumpProxyLogs() {
	out, _ := kubectl("", "-n", proxyNS, "logs", "-l", "app.kubernetes.io/name=airlock", "--tail", "30", "--prefix")
	fmt.Println(out)
}

// startPostgres runs Debian's PostgreSQL on the node's address: TLS only, password auth,
// a certificate for postgres.airlock.svc signed by pgCA.
func (d *deployment) startPostgres(pgCA *ca.CA, password string) error {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return fmt.Errorf("no PostgreSQL server (apt-get install postgresql)")
	}
	d.pgBin = filepath.Dir(bins[len(bins)-1])
	d.pgDir = filepath.Join(d.dir, "pg")
	if err := os.MkdirAll(d.pgDir, 0o700); err != nil {
		return err
	}
	l, err := net.Listen("tcp", nodeIP+":0")
	if err != nil {
		return err
	}
	d.pgPort = l.Addr().(*net.TCPAddr).Port
	l.Close()
	leaf, err := pgCA.Leaf("postgres.airlock.svc")
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"pwfile":     []byte(password + "\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(d.pgDir, name), b, 0o600); err != nil {
			return err
		}
	}
	asPG := func(args ...string) error {
		out, err := asPostgres(args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", filepath.Base(args[0]), err, out)
		}
		return nil
	}
	if out, err := exec.Command("chown", "-R", "postgres:", d.pgDir).CombinedOutput(); err != nil {
		return fmt.Errorf("chown: %v %s", err, out)
	}
	os.Chmod(d.dir, 0o755)
	data := filepath.Join(d.pgDir, "data")
	if err := asPG(filepath.Join(d.pgBin, "initdb"), "-D", data, "-U", "airlock", "--pwfile", filepath.Join(d.pgDir, "pwfile"),
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8"); err != nil {
		return err
	}
	// TLS or nothing from the network.
	hba := "local all all trust\nhostssl all airlock 0.0.0.0/0 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	exec.Command("chown", "postgres:", filepath.Join(data, "pg_hba.conf")).Run()
	opts := fmt.Sprintf("-c listen_addresses=%s -p %d -k %s -c ssl=on -c ssl_cert_file=%s -c ssl_key_file=%s -c fsync=off",
		nodeIP, d.pgPort, d.pgDir, filepath.Join(d.pgDir, "server.crt"), filepath.Join(d.pgDir, "server.key"))
	if err := asPG(filepath.Join(d.pgBin, "pg_ctl"), "-D", data, "-l", filepath.Join(d.pgDir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(d.pgDir, "server.log"))
		return fmt.Errorf("%v\n%s", err, log)
	}
	return asPG(filepath.Join(d.pgBin, "createdb"), "-h", d.pgDir, "-p", strconv.Itoa(d.pgPort), "-U", "airlock", "airlock")
}

// psql runs a query on the test's PostgreSQL (over its unix socket).
func (d *deployment) psql(query string) (string, error) {
	out, err := asPostgres(filepath.Join(d.pgBin, "psql"), "-h", d.pgDir,
		"-p", strconv.Itoa(d.pgPort), "-U", "airlock", "-d", "airlock", "-At", "-c", query).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// asPostgres is a command run as the postgres user, from /: the checkout may be a directory
// only root can enter (a clone in `mktemp -d`), and psql then adds "could not change
// directory" to its output.
func asPostgres(args ...string) *exec.Cmd {
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
	cmd.Dir = "/"
	return cmd
}

func (d *deployment) stopPostgres() {
	if d.pgBin == "" || d.stopped {
		return
	}
	d.stopped = true
	asPostgres(filepath.Join(d.pgBin, "pg_ctl"), "-D", filepath.Join(d.pgDir, "data"), "-m", "fast", "-w", "stop").Run()
}
