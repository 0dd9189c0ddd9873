//go:build e2e

package clients_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// imagePolicy lets the sandbox GET /token* on the test upstream (127.0.0.1) with the
// credential e2e-token attached, and refuses everything else.
const imagePolicy = `package airlock

default decision := {"action": "deny", "rule": "image.default", "reason": "not on the image allowlist"}

decision := {"action": "allow", "rule": "image.connect"} if {
	input.phase == "connect"
	input.request.host == "127.0.0.1"
}

decision := {"action": "allow", "rule": "image.token", "credentials": ["e2e-token"]} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "GET"
	startswith(input.request.path, "/token")
}
`

// TestCurlInAnImage: a proper image, a `docker save` tarball the test makes of curl, sh and
// the libraries they load (taken from the suite's root: AIRLOCK_E2E_ROOTFS or the host's),
// is given to `airlock sandbox run --image`. airlock unpacks it into its image cache, and
// curl inside reaches an HTTPS upstream through the proxy with a credential airlock
// injects and the sandbox never sees: once trusting airlock's CA through CURL_CA_BUNDLE,
// once through the system bundle path alone (the image has no /etc/ssl: the sandbox's top
// layer puts the bundle there). A refused path gets airlock's reason and no credential.
func TestCurlInAnImage(t *testing.T) {
	secret := "e2e-image-token-" + rand.Text()
	var (
		mu   sync.Mutex
		seen []string // "PATH true|false" (with the credential or not), as the upstream received them
	)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := r.Header.Get("Authorization") == "Bearer "+secret
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %v", r.URL.Path, ok))
		mu.Unlock()
		if !ok {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "authorized %s %s\n", r.Method, r.URL.Path)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)

	dir := t.TempDir()
	tarball := saveImage(t, filepath.Join(dir, "curl-image.tar"), suiteRoot(), "/usr/bin/curl", "/bin/sh")
	policyDir := filepath.Join(dir, "policy")
	must(t, os.MkdirAll(policyDir, 0o700))
	must(t, os.WriteFile(filepath.Join(policyDir, "policy.rego"), []byte(imagePolicy), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "upstream.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600))
	cfg := filepath.Join(dir, "airlock.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`policy: %[1]s/policy
allow_private: [127.0.0.1/32]
upstream_ca: %[1]s/upstream.pem
credentials:
  e2e-token:
    env: AIRLOCK_E2E_IMAGE_TOKEN
    inject: {header: Authorization, value: "Bearer {{ .value }}"}
`, dir)), 0o600))
	home := filepath.Join(dir, "home")
	base := "https://127.0.0.1:" + u.Port()
	script := `echo "CURL_CA_BUNDLE=$CURL_CA_BUNDLE"; test -s /etc/ssl/certs/ca-certificates.crt && echo SYSTEM-BUNDLE
curl -sS ` + base + `/token/env-bundle
unset CURL_CA_BUNDLE SSL_CERT_FILE
curl -sS ` + base + `/token/system-path
curl -sS ` + base + `/denied`
	cmd := exec.Command(e2etest.AirlockBinary(t), "sandbox", "run", "--config", cfg, "--image", tarball, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home, "AIRLOCK_E2E_IMAGE_TOKEN="+secret)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("airlock sandbox run --image:\n%s", out)
	if err != nil {
		t.Fatalf("airlock sandbox run --image: %v", err)
	}
	for _, want := range []string{"CURL_CA_BUNDLE=/run/airlock/ca-bundle.pem", "SYSTEM-BUNDLE",
		"authorized GET /token/env-bundle", "authorized GET /token/system-path", "image.default", "not on the image allowlist"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, secret) {
		t.Error("the injected credential reached the sandbox's output")
	}
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	if want := []string{"/token/env-bundle true", "/token/system-path true"}; !slices.Equal(got, want) {
		t.Errorf("the upstream received %q, want %q (the refused path never)", got, want)
	}
	// The image went through the cache: unpacked under its image ID.
	if entries, _ := filepath.Glob(filepath.Join(home, "images", "sha256", "*", "rootfs", "usr", "bin", "curl")); len(entries) != 1 {
		t.Errorf("image cache holds %d unpacked curl images, want 1", len(entries))
	}
}

// suiteRoot is the root the suite's sandboxes run on.
func suiteRoot() string {
	if r := e2etest.Rootfs(); r != "" {
		return r
	}
	return "/"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lddPath is a library path in ldd's output ("libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1
// (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)").
var lddPath = regexp.MustCompile(`(?m)(/\S+) \(0x`)

// saveImage writes a one-layer `docker save` tarball at dst holding the programs at paths
// (as found in root) and the shared libraries ldd names for them, in the merged-/usr
// layout of root (/bin, /lib, /lib64, /sbin linking into /usr), and returns dst.
func saveImage(t *testing.T, dst, root string, paths ...string) string {
	t.Helper()
	var need []string
	for _, p := range paths {
		need = append(need, p)
		out, err := exec.Command("ldd", inRoot(t, root, p)).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", p, err)
		}
		for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
			need = append(need, m[1])
		}
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	made := map[string]bool{}
	mkdir := func(dir string) {
		var parts []string
		for d := dir; d != "." && d != "/"; d = path.Dir(d) {
			parts = append(parts, d)
		}
		for _, d := range slices.Backward(parts) {
			if !made[d] {
				made[d] = true
				must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}))
			}
		}
	}
	for _, d := range []string{"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/tmp"} {
		mkdir(d)
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		made["/"+l] = true
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: "usr/" + l}))
	}
	for _, p := range need {
		// The file's name under its directory's real path (so no entry goes through one of
		// the links above), its content the link's final target.
		name := path.Join(canonical(t, root, path.Dir(p)), path.Base(p))
		if made[name] {
			continue
		}
		mkdir(path.Dir(name))
		made[name] = true
		b, err := os.ReadFile(inRoot(t, root, p))
		if err != nil {
			t.Fatal(err)
		}
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"), Mode: 0o755, Size: int64(len(b))}))
		_, err = tw.Write(b)
		must(t, err)
	}
	must(t, tw.Close())
	sum := sha256.Sum256(layer.Bytes())
	layerID := hex.EncodeToString(sum[:])
	config, err := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}}})
	must(t, err)
	sum = sha256.Sum256(config)
	configName := hex.EncodeToString(sum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{"airlock-e2e/curl:1"},
		"Layers": []string{layerID + "/layer.tar"}}})
	must(t, err)
	f, err := os.Create(dst)
	must(t, err)
	defer f.Close()
	ow := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		body []byte
	}{{"manifest.json", manifest}, {configName, config}, {layerID + "/layer.tar", layer.Bytes()}} {
		must(t, ow.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.body))}))
		_, err := ow.Write(e.body)
		must(t, err)
	}
	must(t, ow.Close())
	must(t, f.Close())
	return dst
}

// canonical is dir with every link resolved inside root (an absolute target is root's).
func canonical(t *testing.T, root, dir string) string {
	t.Helper()
	out := "/"
	parts := strings.Split(strings.Trim(dir, "/"), "/")
	for hops := 0; len(parts) > 0; {
		p := parts[0]
		parts = parts[1:]
		if p == "" || p == "." {
			continue
		}
		next := path.Join(out, p)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			t.Fatalf("%s in %s: %v", next, root, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			out = next
			continue
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			t.Fatal(err)
		}
		if hops++; hops > 40 {
			t.Fatalf("%s in %s: too many links", dir, root)
		}
		if !path.IsAbs(target) {
			target = path.Join(out, target)
		}
		out = "/"
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
	}
	return out
}

// inRoot is the host path of p as seen in root: its directories and the file itself
// resolved inside root.
func inRoot(t *testing.T, root, p string) string {
	t.Helper()
	return filepath.Join(root, canonical(t, root, p))
}
