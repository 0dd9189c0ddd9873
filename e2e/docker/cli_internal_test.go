//go:build e2e

package docker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestCLIInternalModeWithTheProxyInAContainer runs `airlock sandbox run --backend docker`
// in internal mode against the airlock image (FROM scratch, built here) running `airlock
// proxy` in a container of its own: the CLI starts no proxy; the sandbox's container is on
// an internal network shared only with the proxy's container; its credential comes from
// the proxy's admin API and is revoked when the command ends.
func TestCLIInternalModeWithTheProxyInAContainer(t *testing.T) {
	ctx := context.Background()
	bin := buildAirlock(t)
	image := buildProxyImage(t, bin)

	// The proxy's own network: its admin API listens only on its address there (no sandbox
	// network has a route to it), and the upstream listens on the host's side of it.
	netName, subnet := createBackendNetwork(t)
	gw, proxyIP := subnet+".1", subnet+".10"

	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := upCA.Leaf(gw)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	up.Listener.Close()
	if up.Listener, err = net.Listen("tcp", gw+":0"); err != nil {
		t.Fatal(err)
	}
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)
	upPort := up.Listener.Addr().(*net.TCPAddr).Port

	// The proxy container's state: its CA (made with `airlock ca init`), policy, config
	// and the issuer token the CLI presents.
	state := t.TempDir()
	os.Chmod(state, 0o755)
	runCmd(t, exec.Command(bin, "ca", "init"), "AIRLOCK_HOME="+state)
	// The e2e allowlist, for the upstream's address.
	policy := strings.ReplaceAll(e2etest.UpstreamPolicy, `"upstream.test"`, `"`+gw+`"`)
	writeFile(t, filepath.Join(state, "policy", "policy.rego"), policy)
	writeFile(t, filepath.Join(state, "upstream-ca.pem"), string(upCA.CertPEM()))
	const issuerToken = "e2e-issuer-token-0123456789abcdef"
	writeFile(t, filepath.Join(state, "issuer.token"), issuerToken)
	writeFile(t, filepath.Join(state, "airlock.yaml"), fmt.Sprintf(`home: /state
listen: ["0.0.0.0:3128"]
admin_listen: "%s:9090"
policy: /state/policy
upstream_ca: /state/upstream-ca.pem
allow_private: ["%s.0/24"]
require_auth: true
audit_log: /state/audit.jsonl
proxy:
  issuers: [{name: e2e, token_file: /state/issuer.token}]
`, proxyIP, subnet))
	runCmd(t, exec.Command("chown", "-R", "65532:65532", state))
	// A secret file only its owner reads (the proxy container's user; root reads it too):
	// airlock refuses one that others may read.
	runCmd(t, exec.Command("chmod", "600", filepath.Join(state, "issuer.token")))

	proxyName := "airlock-e2e-proxy-" + randomSuffix()
	runCmd(t, exec.Command("docker", "run", "-d", "--name", proxyName, "--network", netName, "--ip", proxyIP,
		"-v", state+":/state", image, "proxy", "--config", "/state/airlock.yaml"))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "30", proxyName).CombinedOutput()
			t.Logf("proxy container log:\n%s", out)
		}
		_ = exec.Command("docker", "rm", "-f", proxyName).Run()
	})
	adminURL := "http://" + proxyIP + ":9090"
	waitReady(t, adminURL+"/readyz")

	// The CLI's side: its own home and a config naming the proxy's container and API.
	home := t.TempDir()
	cfgFile := filepath.Join(home, "airlock.yaml")
	writeFile(t, cfgFile, fmt.Sprintf(`sandbox:
  docker:
    mode: internal
    proxy_container: %s
    proxy_admin: %s
    token_file: %s
    ca_file: %s
`, proxyName, adminURL, filepath.Join(state, "issuer.token"), filepath.Join(state, "ca", "ca.pem")))
	report := filepath.Join(home, "report.json")
	target := fmt.Sprintf("https://%s:%d", gw, upPort)
	script := `curl -sS -m 20 ` + target + `/allowed/x; echo
curl -sS -m 3 --noproxy '*' ` + target + `/allowed/x >/dev/null 2>&1 && echo DIRECT-OK
nslookup example.com 127.0.0.11 >/dev/null 2>&1 && echo DNS-OK
curl -sS -m 20 -o /dev/null -w 'denied:%{http_code}\n' ` + target + `/denied
printf 'proxy=%s\n' "$HTTPS_PROXY"`
	cmd := exec.Command(bin, "sandbox", "run", "--config", cfgFile, "--backend", "docker", "--image", testImage,
		"--label", "team=e2e", "--report", report, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock sandbox run: %v\nstderr: %s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "hello GET /allowed/x") {
		t.Errorf("HTTPS through the proxy container: output lacks the upstream's answer (stderr %q)", stderr.String())
	}
	if strings.Contains(out, "DIRECT-OK") {
		t.Error("a direct connection from the sandbox reached the upstream")
	}
	if strings.Contains(out, "DNS-OK") {
		t.Error("Docker's DNS resolved an outside name for the sandbox (its only resolver is the proxy container)")
	}
	if !strings.Contains(out, "denied:403") {
		t.Errorf("denied path: want 403 through the proxy (stdout lines: %d)", strings.Count(out, "\n"))
	}

	// The credential the sandbox had is useless after the command: 407 through the proxy.
	var proxyURL *url.URL
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "proxy="); ok {
			proxyURL, _ = url.Parse(v)
		}
	}
	if proxyURL == nil || proxyURL.User == nil || proxyURL.Hostname() == "" {
		t.Fatal("the sandbox's HTTPS_PROXY carries no credential")
	}
	pass, _ := proxyURL.User.Password()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s:%d/allowed/x", gw, upPort), nil)
	req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(proxyURL.User.Username()+":"+pass)))
	viaProxy := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyIP + ":3128"})}}
	resp, err := viaProxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("the sandbox's credential after Close: %d, want 407", resp.StatusCode)
	}

	var rep struct {
		SandboxID string            `json:"sandbox_id"`
		Labels    map[string]string `json:"labels"`
	}
	b, err := os.ReadFile(report)
	if err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report: %v %s", err, b)
	}
	if rep.SandboxID != proxyURL.User.Username() || rep.Labels["team"] != "e2e" {
		t.Errorf("report names sandbox %q labels %v, want %q and team=e2e", rep.SandboxID, rep.Labels, proxyURL.User.Username())
	}
	// Nothing of the sandbox is left: no container, no network.
	for _, kind := range []string{"ps", "network"} {
		args := []string{kind, "ls", "-q", "--filter", "label=" + docker.Label + "=" + rep.SandboxID}
		if kind == "ps" {
			args = []string{"ps", "-aq", "--filter", "label=" + docker.Label + "=" + rep.SandboxID}
		}
		if left, _ := exec.Command("docker", args...).Output(); len(bytes.TrimSpace(left)) > 0 {
			t.Errorf("docker %s: left behind: %s", kind, left)
		}
	}
	if strings.Contains(stderr.String(), pass) {
		t.Error("the CLI's stderr holds the sandbox's credential")
	}
	_ = ctx
}

func buildAirlock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "airlock")
	build := exec.Command("go", "build", "-o", bin, "github.com/airlock-proxy/airlock/cmd/airlock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}
	return bin
}

// buildProxyImage builds the airlock image as deploy/Dockerfile.prebuilt describes it
// (FROM scratch) around bin.
func buildProxyImage(t *testing.T, bin string) string {
	t.Helper()
	const image = "airlock-e2e-proxy:latest"
	ctxDir := t.TempDir()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ctxDir, "airlock"), string(b))
	os.Chmod(filepath.Join(ctxDir, "airlock"), 0o755)
	roots, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ctxDir, "ca-certificates.crt"), string(roots))
	writeFile(t, filepath.Join(ctxDir, "passwd"), "airlock:x:65532:65532:airlock:/var/lib/airlock:/airlock\n")
	writeFile(t, filepath.Join(ctxDir, "group"), "airlock:x:65532:\n")
	os.MkdirAll(filepath.Join(ctxDir, "state"), 0o755)
	runCmd(t, exec.Command("docker", "build", "-q", "-t", image, "-f", "../../deploy/Dockerfile.prebuilt", ctxDir))
	return image
}

// createBackendNetwork creates a bridge network with a /24 of its own (so that the proxy
// can have a fixed address on it) and returns its name and the subnet's first three octets.
func createBackendNetwork(t *testing.T) (string, string) {
	t.Helper()
	name := "airlock-e2e-backend-" + randomSuffix()
	for i := 0; i < 20; i++ {
		subnet := fmt.Sprintf("172.31.%d", 200+i)
		if exec.Command("docker", "network", "create", "--subnet", subnet+".0/24", name).Run() == nil {
			t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", name).Run() })
			return name, subnet
		}
	}
	t.Fatal("no free 172.31.x.0/24 for the proxy's network")
	return "", ""
}

func waitReady(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", u, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runCmd(t *testing.T, cmd *exec.Cmd, env ...string) {
	t.Helper()
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomSuffix() string {
	return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
}
