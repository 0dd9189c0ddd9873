package image

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
)

// readManifest finds an archive's one image: `docker save`'s manifest.json (both its own
// layout and the OCI one Docker 25 writes have it), else the OCI layout's index.json.
func readManifest(a archive) (manifest, error) {
	raw, err := readJSON(a, "manifest.json")
	if err == nil {
		var ms []struct {
			Config string
			Layers []string
		}
		if err := json.Unmarshal(raw, &ms); err != nil {
			return manifest{}, fmt.Errorf("manifest.json: %w", err)
		}
		if len(ms) != 1 {
			return manifest{}, fmt.Errorf("manifest.json lists %d images; want an archive of one", len(ms))
		}
		return manifest{config: ms[0].Config, layers: ms[0].Layers}, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return manifest{}, err
	}
	return ociManifest(a)
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

// ociManifest follows index.json (through nested indexes) to the image manifest.
func ociManifest(a archive) (manifest, error) {
	raw, err := readJSON(a, "index.json")
	if errors.Is(err, os.ErrNotExist) {
		return manifest{}, errors.New("neither manifest.json nor index.json: not a docker save or OCI image archive")
	}
	for depth := 0; ; depth++ {
		if err != nil {
			return manifest{}, err
		}
		var doc struct {
			MediaType string       `json:"mediaType"`
			Manifests []descriptor `json:"manifests"`
			Config    descriptor   `json:"config"`
			Layers    []descriptor `json:"layers"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return manifest{}, err
		}
		if doc.Config.Digest != "" {
			m := manifest{config: ""}
			if m.config, err = blobName(doc.Config.Digest); err != nil {
				return manifest{}, err
			}
			for _, l := range doc.Layers {
				name, err := blobName(l.Digest)
				if err != nil {
					return manifest{}, err
				}
				m.layers = append(m.layers, name)
			}
			return m, nil
		}
		if len(doc.Manifests) != 1 || depth > 4 {
			return manifest{}, fmt.Errorf("the OCI index lists %d manifests; want an archive of one image", len(doc.Manifests))
		}
		name, berr := blobName(doc.Manifests[0].Digest)
		if berr != nil {
			return manifest{}, berr
		}
		raw, err = readJSON(a, name)
	}
}

// blobName is where an OCI layout keeps the blob of digest.
func blobName(digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !isHex64(hexd) {
		return "", fmt.Errorf("digest %q: want sha256:<64 hex digits>", digest)
	}
	return "blobs/sha256/" + hexd, nil
}

// readJSON reads a small file of the archive.
func readJSON(a archive, name string) ([]byte, error) {
	rc, err := a.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxJSON+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJSON {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxJSON)
	}
	return b, nil
}

// tarArchive reads a tarball, one file at a time: each open scans it from the start
// (archive/tar skips file contents by seeking).
type tarArchive struct{ f *os.File }

func (t *tarArchive) open(name string) (io.ReadCloser, error) {
	return t.openDepth(name, 0)
}

func (t *tarArchive) openDepth(name string, depth int) (io.ReadCloser, error) {
	want, err := cleanName(name)
	if err != nil {
		return nil, err
	}
	if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	tr := tar.NewReader(t.f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: %w", name, os.ErrNotExist)
		}
		if err != nil {
			return nil, fmt.Errorf("read image archive: %w", err)
		}
		if path.Clean(h.Name) != want {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg: // archive/tar reads the old '\x00' as TypeReg
			return io.NopCloser(tr), nil
		case tar.TypeSymlink:
			// docker save links a layer it already wrote (../<id>/layer.tar).
			if depth >= 4 {
				return nil, fmt.Errorf("%s: too many links", name)
			}
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(want), target)
			}
			return t.openDepth(strings.TrimPrefix(target, "/"), depth+1)
		default:
			return nil, fmt.Errorf("%s: not a file", name)
		}
	}
}

// dirArchive reads an OCI layout directory; os.Root keeps every name beneath it.
type dirArchive struct{ root *os.Root }

func (d dirArchive) open(name string) (io.ReadCloser, error) {
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openRegular opens the file at path for reading if it is a regular file. The image files
// named by a session's issuer lie where others may write: a FIFO there would block the
// open (and an OS thread) for good, a device read without end; O_NONBLOCK makes the open
// of a FIFO return at once, and the file is refused before anything reads it.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkRegular refuses an open file that is not a regular file.
func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (%s)", f.Name(), fi.Mode().Type())
	}
	return nil
}
