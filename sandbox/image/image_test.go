package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}

func layerTar(t *testing.T, entries []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body))}
		if e.typ == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// configFor is an image configuration whose diff_ids are those of layers.
func configFor(layers [][]byte) []byte {
	ids := []string{}
	for _, l := range layers {
		ids = append(ids, "sha256:"+digest(l))
	}
	b, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": ids}})
	return b
}

// outerTar writes files (name → content) as a tarball.
func outerTar(t *testing.T, path string, names []string, files map[string][]byte) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	tw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dockerSave writes a tarball in `docker save`'s own layout (layers last, as Docker
// writes them: readers must not need the manifest first).
func dockerSave(t *testing.T, layers ...[]entry) string {
	t.Helper()
	var raw [][]byte
	for _, l := range layers {
		raw = append(raw, layerTar(t, l))
	}
	cfg := configFor(raw)
	files := map[string][]byte{}
	names := []string{}
	var layerNames []string
	for i, l := range raw {
		n := fmt.Sprintf("%064d/layer.tar", i)
		files[n] = l
		names = append(names, n)
		layerNames = append(layerNames, n)
	}
	cfgName := digest(cfg) + ".json"
	files[cfgName] = cfg
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{"x:y"}, "Layers": layerNames}})
	files["manifest.json"] = m
	names = append(names, cfgName, "manifest.json")
	p := filepath.Join(t.TempDir(), "image.tar")
	outerTar(t, p, names, files)
	return p
}

// ociTar writes the same image as an OCI image layout tarball with gzip layers.
func ociTar(t *testing.T, layers ...[]entry) string {
	t.Helper()
	var raw [][]byte
	files := map[string][]byte{}
	var names []string
	var descs []map[string]any
	for _, l := range layers {
		b := layerTar(t, l)
		raw = append(raw, b)
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		n := "blobs/sha256/" + digest(z.Bytes())
		files[n] = z.Bytes()
		names = append(names, n)
		descs = append(descs, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:" + digest(z.Bytes())})
	}
	cfg := configFor(raw)
	files["blobs/sha256/"+digest(cfg)] = cfg
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "config": map[string]any{"digest": "sha256:" + digest(cfg)}, "layers": descs})
	files["blobs/sha256/"+digest(man)] = man
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{"digest": "sha256:" + digest(man)}}})
	files["index.json"] = idx
	files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	names = append(names, "blobs/sha256/"+digest(cfg), "blobs/sha256/"+digest(man), "index.json", "oci-layout")
	p := filepath.Join(t.TempDir(), "oci.tar")
	outerTar(t, p, names, files)
	return p
}

func newCache(t *testing.T) *Cache { return &Cache{Dir: filepath.Join(t.TempDir(), "images")} }

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnpackLayersWhiteoutsAndCache(t *testing.T) {
	base := []entry{dir("etc"), file("etc/os-release", "ID=test\n"), dir("usr/share/doc/a"), file("usr/share/doc/a/x", "x"),
		file("usr/share/doc/b", "b"), dir("gone"), file("gone/f", "f"), symlink("bin", "usr/bin"), dir("usr/bin"),
		file("usr/bin/tool", "#!/bin/sh\n"), hardlink("usr/bin/tool2", "usr/bin/tool"),
		{name: "usr/bin/su", typ: tar.TypeReg, mode: 0o4755, body: "suid"}, {name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
		dir("opq"), file("opq/lower", "l")}
	top := []entry{file("usr/share/doc/.wh.b", ""), file(".wh.gone", ""), file("opq/upper", "u"), file("opq/.wh..wh..opq", ""),
		file("etc/os-release", "ID=top\n")}
	c := newCache(t)
	root, err := c.Resolve(t.Context(), dockerSave(t, base, top))
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "etc/os-release")); got != "ID=top\n" {
		t.Errorf("etc/os-release = %q; the upper layer's wins", got)
	}
	for _, gone := range []string{"usr/share/doc/b", "gone", "opq/lower", "dev/mem", "opq/.wh..wh..opq", "usr/share/doc/.wh.b"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v); want it deleted or never made", gone, err)
		}
	}
	if got := readFile(t, filepath.Join(root, "opq/upper")); got != "u" {
		t.Errorf("opq/upper = %q: an opaque whiteout removes the lower layers' entries only", got)
	}
	if l, err := os.Readlink(filepath.Join(root, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("bin -> %q, %v", l, err)
	}
	a, _ := os.Stat(filepath.Join(root, "usr/bin/tool"))
	b, _ := os.Stat(filepath.Join(root, "usr/bin/tool2"))
	if !os.SameFile(a, b) {
		t.Error("usr/bin/tool2 is not a hard link of usr/bin/tool")
	}
	if fi, _ := os.Stat(filepath.Join(root, "usr/bin/su")); fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("usr/bin/su mode %v: setuid kept", fi.Mode())
	}
	// The same image as an OCI layout tarball with gzip layers has the same configuration:
	// the cache answers without unpacking again.
	os.WriteFile(filepath.Join(root, "marker"), nil, 0o644)
	again, err := c.Resolve(t.Context(), ociTar(t, base, top))
	if err != nil || again != root {
		t.Fatalf("OCI layout of the same image: %q, %v; want the cached %q", again, err, root)
	}
	if _, err := os.Stat(filepath.Join(again, "marker")); err != nil {
		t.Error("the cached entry was unpacked again")
	}
}

func TestUnpackOCILayout(t *testing.T) {
	c := newCache(t)
	root, err := c.Resolve(t.Context(), ociTar(t, []entry{file("hello", "world")}))
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "hello")); got != "world" {
		t.Errorf("hello = %q", got)
	}
	if filepath.Base(filepath.Dir(root)) != digest(configFor([][]byte{layerTar(t, []entry{file("hello", "world")})})) {
		t.Errorf("root %s is not keyed by the configuration's digest", root)
	}
}

// refused unpacks an image that must be refused and checks that nothing landed in outside
// or the cache.
func refused(t *testing.T, outside, want string, layers ...[]entry) {
	t.Helper()
	c := newCache(t)
	_, err := c.Resolve(t.Context(), dockerSave(t, layers...))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v; want it refused with %q", err, want)
	}
	if outside != "" {
		if names, _ := os.ReadDir(outside); len(names) != 0 {
			t.Errorf("written outside the root: %v", names)
		}
	}
	if names, _ := os.ReadDir(filepath.Join(c.Dir, "sha256")); len(names) != 0 {
		t.Errorf("a refused image left a cache entry: %v", names)
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir, "unpack-*")); len(left) != 0 {
		t.Errorf("a refused image left its temporary directory: %v", left)
	}
}

func TestUnpackRefusesHostileNames(t *testing.T) {
	parent := t.TempDir()
	t.Run("dotdot", func(t *testing.T) { refused(t, "", "climbs out", []entry{file("../../evil", "x")}) })
	t.Run("dotdot inside", func(t *testing.T) { refused(t, "", "climbs out", []entry{file("a/../../evil", "x")}) })
	t.Run("absolute", func(t *testing.T) { refused(t, "", "absolute", []entry{file(parent+"/evil", "x")}) })
	t.Run("whiteout dotdot", func(t *testing.T) { refused(t, "", "climbs out", []entry{file("../.wh.etc", "")}) })
	if _, err := os.Stat(filepath.Join(parent, "evil")); err == nil {
		t.Error("an absolute entry was written to the host")
	}
}

func TestUnpackRefusesWriteThroughSymlink(t *testing.T) {
	outside := t.TempDir()
	t.Run("same layer", func(t *testing.T) {
		refused(t, outside, "through a link", []entry{symlink("x", outside), file("x/pwned", "x")})
	})
	t.Run("next layer", func(t *testing.T) {
		refused(t, outside, "through a link", []entry{symlink("x", outside)}, []entry{file("x/pwned", "x")})
	})
	t.Run("relative link", func(t *testing.T) {
		refused(t, outside, "leaves the root", []entry{symlink("x", "../../../../../../"+outside)})
	})
	t.Run("directory entry", func(t *testing.T) {
		refused(t, outside, "through a link", []entry{symlink("x", outside), dir("x/sub")})
	})
	t.Run("whiteout through link", func(t *testing.T) {
		os.WriteFile(filepath.Join(outside, "keep"), []byte("k"), 0o644)
		defer os.Remove(filepath.Join(outside, "keep"))
		c := newCache(t)
		_, err := c.Resolve(t.Context(), dockerSave(t, []entry{symlink("x", outside)}, []entry{file("x/.wh.keep", "")}))
		if err == nil || !strings.Contains(err.Error(), "through a link") {
			t.Errorf("err = %v; want the whiteout refused", err)
		}
		if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
			t.Errorf("a whiteout deleted a host file: %v", err)
		}
	})
}

func TestUnpackRefusesHardlinkOutside(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	t.Run("absolute", func(t *testing.T) { refused(t, "", "absolute", []entry{hardlink("h", secret)}) })
	t.Run("dotdot", func(t *testing.T) { refused(t, "", "climbs out", []entry{hardlink("h", "../../../../"+secret)}) })
	t.Run("through symlink", func(t *testing.T) {
		refused(t, "", "through a link", []entry{symlink("s", outside), hardlink("h", "s/secret")})
	})
	t.Run("missing", func(t *testing.T) { refused(t, "", "no such file", []entry{hardlink("h", "nothing")}) })
	if fi, _ := os.Stat(secret); linkCount(fi) != 1 {
		t.Errorf("the host file got %d links", linkCount(fi))
	}
}

func TestUnpackRefusesTampering(t *testing.T) {
	p := dockerSave(t, []entry{file("a", "original")})
	b, _ := os.ReadFile(p)
	b = bytes.Replace(b, []byte("original"), []byte("tampered"), 1)
	os.WriteFile(p, b, 0o644)
	c := newCache(t)
	if _, err := c.Resolve(t.Context(), p); err == nil || !strings.Contains(err.Error(), "the configuration says") {
		t.Fatalf("err = %v; want a layer that is not its diff_id refused", err)
	}
	if names, _ := os.ReadDir(filepath.Join(c.Dir, "sha256")); len(names) != 0 {
		t.Errorf("cache entry %v from a tampered image", names)
	}
}

func TestUnpackLimit(t *testing.T) {
	c := newCache(t)
	c.MaxBytes = 10
	if _, err := c.Resolve(t.Context(), dockerSave(t, []entry{file("a", strings.Repeat("x", 11))})); err == nil || !strings.Contains(err.Error(), "unpack limit") {
		t.Fatalf("err = %v; want the unpack limit", err)
	}
}

func TestConcurrentUnpacks(t *testing.T) {
	c := newCache(t)
	p := dockerSave(t, []entry{file("a", "1"), dir("d"), file("d/b", "2")})
	var wg sync.WaitGroup
	roots := make([]string, 4)
	errs := make([]error, 4)
	for i := range roots {
		wg.Go(func() { roots[i], errs[i] = c.Resolve(t.Context(), p) })
	}
	wg.Wait()
	for i := range roots {
		if errs[i] != nil || roots[i] != roots[0] {
			t.Fatalf("unpack %d: %q, %v; want %q", i, roots[i], errs[i], roots[0])
		}
	}
	if got := readFile(t, filepath.Join(roots[0], "d/b")); got != "2" {
		t.Errorf("d/b = %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir, "unpack-*")); len(left) != 0 {
		t.Errorf("temporary directories left: %v", left)
	}
}

func TestResolveRefusesPlainDirectory(t *testing.T) {
	c := newCache(t)
	if _, err := c.Resolve(t.Context(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "--rootfs") {
		t.Errorf("err = %v; want a pointer to --rootfs", err)
	}
}

func TestLoadConfig(t *testing.T) {
	c := newCache(t)
	root, err := c.Resolve(context.Background(), dockerSave(t, []entry{file("a", "1")}))
	if err != nil {
		t.Fatal(err)
	}
	if ic, err := LoadConfig(root); err != nil || ic == nil || ic.User != "" || len(ic.Env) != 0 {
		t.Errorf("an image without config section: %+v, %v", ic, err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(root), "config.json"),
		[]byte(`{"config":{"Env":["PATH=/opt/bin","A=b"],"WorkingDir":"/srv","User":"node"}}`), 0o644)
	ic, err := LoadConfig(root)
	if err != nil || ic.User != "node" || ic.WorkingDir != "/srv" || strings.Join(ic.Env, " ") != "PATH=/opt/bin A=b" {
		t.Errorf("got %+v, %v", ic, err)
	}
	if ic, err := LoadConfig(t.TempDir()); ic != nil || err != nil {
		t.Errorf("a plain directory: %+v, %v; want none", ic, err)
	}
}

// TestResolveRefusesFIFO: an image path that is a FIFO (made by whoever may write under
// sessions.rootfs_roots), or an OCI layout whose index.json is one, is refused; opening it
// would block airlock's request for good, and each such blocked open holds an OS thread.
func TestResolveRefusesFIFO(t *testing.T) {
	d := t.TempDir()
	fifo := filepath.Join(d, "image.tar")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(d, "layout")
	if err := os.MkdirAll(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(layout, "index.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, layout} {
		c := &Cache{Dir: t.TempDir()}
		done := make(chan error, 1)
		go func() { _, err := c.Resolve(context.Background(), p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Resolve(%s): %v, want an error saying it is not a regular file", p, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Resolve(%s) still blocked on the FIFO", p)
			// Unblock it: a writer that closes at once.
			name := p
			if p == layout {
				name = filepath.Join(layout, "index.json")
			}
			if f, err := os.OpenFile(name, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			<-done
		}
	}
}

// gatedArchive holds each layer open until released, counting how many are open at once.
type gatedArchive struct {
	archive
	in       chan string
	release  chan struct{}
	cur, max *atomic.Int32
}

type countedCloser struct {
	io.ReadCloser
	cur *atomic.Int32
}

func (c countedCloser) Close() error { c.cur.Add(-1); return c.ReadCloser.Close() }

func (g gatedArchive) open(name string) (io.ReadCloser, error) {
	rc, err := g.archive.open(name)
	if err != nil || !strings.HasSuffix(name, "layer.tar") {
		return rc, err
	}
	n := g.cur.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
	g.in <- name
	<-g.release
	return countedCloser{rc, g.cur}, nil
}

// TestUnpacksOneAtATime: creates of a session server resolve images side by side, before
// sessions.max_sessions counts them; each unpack of an image not yet cached takes up to
// MaxBytes of disk until it is done, so unpacks run one at a time, not one per create.
func TestUnpacksOneAtATime(t *testing.T) {
	c := newCache(t)
	var cur, most atomic.Int32
	in, release := make(chan string, 8), make(chan struct{})
	unpack := func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = c.unpack(gatedArchive{&tarArchive{f: f}, in, release, &cur, &most}, "")
		return err
	}
	a := dockerSave(t, []entry{file("a", "1")})
	b := dockerSave(t, []entry{file("b", "2")})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = unpack(a) })
	<-in // a's layer is being unpacked
	wg.Go(func() { errs[1] = unpack(b) })
	select {
	case <-in:
		t.Errorf("a second image's layer was opened while the first one's was being unpacked")
	case <-time.After(2 * time.Second): // the second waits: what the first would see happen
	}
	close(release)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d layers were being unpacked at once, want 1", m)
	}
}
