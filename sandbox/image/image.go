// Package image unpacks container images into a content-addressed cache of root file
// systems for native sandboxes: a `docker save` or OCI image layout tarball, an OCI layout
// directory, or an image of the local Docker engine (exported through its API). Each image
// is unpacked once, keyed by the digest of its configuration (its image ID); every layer is
// checked against the configuration's diff_ids, so a cache entry holds what its key names.
// Images are hostile input: see layer_linux.go.
package image

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Cache is a directory of unpacked images: Dir/sha256/<hex>/rootfs is the root file system
// of the image whose configuration has that digest. Unpacks write to a temporary directory
// beside it and rename it into place, so concurrent unpacks of one image are safe (the
// first rename wins) and an entry that exists is complete.
type Cache struct {
	Dir string
	// MaxBytes bounds the file content one image may unpack to; 0 means DefaultMaxBytes.
	MaxBytes int64

	// busy lets one image at a time be exported or unpacked: each takes up to MaxBytes
	// of disk until it is done, and the creates of a session server run side by side
	// (before sessions.max_sessions counts them), so that many creates of images not yet
	// cached would otherwise hold that much each at once. One that waits finds the image
	// cached if the one before unpacked the same.
	busy      sync.Mutex
	exporting sync.Mutex // one export from the Docker engine at a time, likewise
}

// Bounds on one unpacked image.
const (
	DefaultMaxBytes = 16 << 30
	maxEntries      = 1 << 21
	maxJSON         = 4 << 20 // a manifest, index or configuration
)

// An archive holds an image's files by name: a tarball or a directory in the `docker save`
// or the OCI image layout.
type archive interface {
	open(name string) (io.ReadCloser, error)
}

// manifest is what an archive says its image is: the name of its configuration and of
// its layers, bottom first.
type manifest struct {
	config string
	layers []string
}

// config is the part of an image configuration read here.
type config struct {
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Resolve returns the root file system of ref, unpacking it into the cache the first
// time: a tarball file, an OCI layout directory (index.json, oci-layout), or otherwise an
// image of the local Docker engine.
func (c *Cache) Resolve(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return "", errors.New("image: empty reference")
	}
	fi, err := os.Stat(ref)
	switch {
	case err == nil && fi.IsDir():
		if _, err := os.Stat(filepath.Join(ref, "oci-layout")); err != nil {
			return "", fmt.Errorf("image %s: a directory that is no OCI image layout (no oci-layout file); a root file system directory is --rootfs", ref)
		}
		root, err := os.OpenRoot(ref)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", ref, err)
		}
		defer root.Close()
		return c.unpack(dirArchive{root}, "")
	case err == nil:
		return c.unpackFile(ref, "")
	case strings.ContainsRune(ref, '/') && (strings.HasPrefix(ref, ".") || strings.HasPrefix(ref, "/")):
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return c.fromEngine(ctx, ref)
}

// unpackFile unpacks the image in the tarball at path; want, when not empty, is the
// image ID it must have.
func (c *Cache) unpackFile(path, want string) (string, error) {
	f, err := openRegular(path)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	defer f.Close()
	return c.unpack(&tarArchive{f: f}, want)
}

// entryDir is the cache entry of the image with configuration digest key (hex).
func (c *Cache) entryDir(key string) string { return filepath.Join(c.Dir, "sha256", key) }

// cached is the root file system of image id ("sha256:<hex>") if it is unpacked.
func (c *Cache) cached(id string) (string, bool) {
	key, ok := strings.CutPrefix(id, "sha256:")
	if !ok || !isHex64(key) {
		return "", false
	}
	root := filepath.Join(c.entryDir(key), "rootfs")
	if fi, err := os.Stat(root); err == nil && fi.IsDir() {
		return root, true
	}
	return "", false
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// unpack unpacks the image of a (unless the cache has it) and returns its root.
func (c *Cache) unpack(a archive, want string) (string, error) {
	m, err := readManifest(a)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	raw, err := readJSON(a, m.config)
	if err != nil {
		return "", fmt.Errorf("image config: %w", err)
	}
	sum := sha256.Sum256(raw)
	key := hex.EncodeToString(sum[:])
	if want != "" && "sha256:"+key != want {
		return "", fmt.Errorf("image: its configuration's digest is sha256:%s, not the image ID %s", key, want)
	}
	if root, ok := c.cached("sha256:" + key); ok {
		return root, nil
	}
	c.busy.Lock()
	defer c.busy.Unlock()
	if root, ok := c.cached("sha256:" + key); ok {
		return root, nil // unpacked while this one waited
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("image config: %w", err)
	}
	if cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != len(m.layers) {
		return "", fmt.Errorf("image config: %d diff_ids of type %q for %d layers", len(cfg.RootFS.DiffIDs), cfg.RootFS.Type, len(m.layers))
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "sha256"), 0o700); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	c.removeStale()
	tmp, err := os.MkdirTemp(c.Dir, "unpack-")
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	if err := c.build(a, m, cfg, tmp, raw); err != nil {
		return "", fmt.Errorf("image sha256:%.12s: %w", key, err)
	}
	final := c.entryDir(key)
	if err := os.Rename(tmp, final); err != nil {
		if _, ok := c.cached("sha256:" + key); !ok {
			return "", fmt.Errorf("image cache: %w", err)
		}
		// Another unpack of the same image won the rename: its copy is as good.
	}
	return filepath.Join(final, "rootfs"), nil
}

// build unpacks every layer into tmp/rootfs, checking each against its diff_id.
func (c *Cache) build(a archive, m manifest, cfg config, tmp string, raw []byte) error {
	rootDir := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	ap, err := newApplier(rootDir, limit, maxEntries)
	if err != nil {
		return err
	}
	defer ap.close()
	for i, name := range m.layers {
		if err := applyLayer(a, ap, name, cfg.RootFS.DiffIDs[i]); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, name, err)
		}
	}
	return os.WriteFile(filepath.Join(tmp, "config.json"), raw, 0o644)
}

// applyLayer applies the layer stored as name, whose uncompressed digest must be diffID.
func applyLayer(a archive, ap *applier, name, diffID string) error {
	rc, err := a.open(name)
	if err != nil {
		return err
	}
	defer rc.Close()
	r, err := decompress(rc)
	if err != nil {
		return err
	}
	h := sha256.New()
	tee := io.TeeReader(r, h)
	if err := ap.apply(tee); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // the tar's padding counts
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return fmt.Errorf("content is %s, the configuration says %s: refused", got, diffID)
	}
	return nil
}

// decompress reads a layer as stored: plain tar or gzip.
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return gzip.NewReader(br)
	case len(magic) == 4 && string(magic) == "\x28\xb5\x2f\xfd":
		return nil, errors.New("zstd-compressed layers are not supported: export the image with gzip or uncompressed layers")
	}
	return br, nil
}

// removeStale removes temporary directories of unpacks that died more than an hour ago.
func (c *Cache) removeStale() {
	old, _ := filepath.Glob(filepath.Join(c.Dir, "unpack-*"))
	for _, d := range old {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(d)
		}
	}
}
