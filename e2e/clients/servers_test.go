//go:build e2e

package clients_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitServer is `git http-backend` (smart HTTP, push enabled) run as CGI over repositories
// under root: app.git (one commit on main) and private.git.
type gitServer struct {
	http.Handler
	root string
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "user.name=host", "-c", "user.email=host@test", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func newGitServer(t *testing.T, root string) *gitServer {
	t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Skip("git http-backend not installed (Debian package git)")
	}
	work := filepath.Join(root, "work")
	os.MkdirAll(work, 0o755)
	git(t, work, "init", "-q")
	os.WriteFile(filepath.Join(work, "README"), []byte("hello from the host\n"), 0o644)
	git(t, work, "add", "README")
	git(t, work, "commit", "-qm", "first")
	for _, name := range []string{"app.git", "private.git"} {
		git(t, root, "clone", "-q", "--bare", work, name)
		git(t, filepath.Join(root, name), "config", "http.receivepack", "true")
	}
	return &gitServer{root: root, Handler: &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
	}}
}

// commitOnHost adds a commit to app.git from the host side (what a fetch should bring).
func (g *gitServer) commitOnHost(t *testing.T, msg string) string {
	t.Helper()
	work := filepath.Join(g.root, "work")
	os.WriteFile(filepath.Join(work, "NEWS"), []byte(msg+"\n"), 0o644)
	git(t, work, "add", "NEWS")
	git(t, work, "commit", "-qm", msg)
	git(t, work, "push", "-q", filepath.Join(g.root, "app.git"), "HEAD:main")
	return git(t, work, "rev-parse", "HEAD")
}

func (g *gitServer) ref(t *testing.T, repo, ref string) string {
	t.Helper()
	return git(t, filepath.Join(g.root, repo), "rev-parse", ref)
}

// packageIndex is a PEP 503 "simple" index serving one wheel, airlock-hello 0.1, built here.
type packageIndex struct {
	wheel []byte
	name  string
}

func newPackageIndex(t *testing.T) *packageIndex {
	t.Helper()
	files := map[string]string{
		"airlock_hello/__init__.py":                 "def hello():\n    return 'hello from the local index'\n",
		"airlock_hello-0.1.dist-info/METADATA":      "Metadata-Version: 2.1\nName: airlock-hello\nVersion: 0.1\n",
		"airlock_hello-0.1.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"airlock_hello-0.1.dist-info/top_level.txt": "airlock_hello\n",
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, name := range []string{"airlock_hello/__init__.py", "airlock_hello-0.1.dist-info/METADATA", "airlock_hello-0.1.dist-info/WHEEL", "airlock_hello-0.1.dist-info/top_level.txt"} {
		w, _ := zw.Create(name)
		w.Write([]byte(files[name]))
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name]))
	}
	record.WriteString("airlock_hello-0.1.dist-info/RECORD,,\n")
	w, _ := zw.Create("airlock_hello-0.1.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return &packageIndex{wheel: buf.Bytes(), name: "airlock_hello-0.1-py3-none-any.whl"}
}

func (p *packageIndex) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sum := sha256.Sum256(p.wheel)
	switch r.URL.Path {
	case "/simple/airlock-hello/":
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n", p.name, hex.EncodeToString(sum[:]), p.name)
	case "/files/" + p.name:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(p.wheel)
	default:
		http.NotFound(w, r)
	}
}

// registry is an npm registry stand-in serving one package, airlock-hello 1.0.0: its
// packument and its tarball (with the integrity npm checks).
type registry struct {
	base    string // https://registry.test:port, set once the server listens
	tarball []byte
}

func newRegistry(t *testing.T) *registry {
	t.Helper()
	files := map[string]string{
		"package/package.json": `{"name":"airlock-hello","version":"1.0.0","main":"index.js"}`,
		"package/index.js":     "module.exports = () => 'hello from the local registry';\n",
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"package/package.json", "package/index.js"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg})
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	gz.Close()
	return &registry{tarball: buf.Bytes()}
}

func (g *registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/airlock-hello":
		s1 := sha1.Sum(g.tarball)
		s512 := sha512.Sum512(g.tarball)
		doc := map[string]any{
			"name":      "airlock-hello",
			"dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"name": "airlock-hello", "version": "1.0.0", "main": "index.js",
				"dist": map[string]string{
					"tarball":   g.base + "/airlock-hello/-/airlock-hello-1.0.0.tgz",
					"shasum":    hex.EncodeToString(s1[:]),
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
				},
			}},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	case "/airlock-hello/-/airlock-hello-1.0.0.tgz":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(g.tarball)
	default:
		http.NotFound(w, r)
	}
}
