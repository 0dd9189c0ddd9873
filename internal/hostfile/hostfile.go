// Package hostfile writes the files airlock leaves on the host at the end of a sandbox run
// (the run report, the patch) so that nothing a sandbox did meanwhile can redirect them.
//
// airlock runs as root, and a sandbox may have written near the destination (a read-write
// workspace is the host directory itself): a symlink or a FIFO planted at the file's name, a
// hard link to a host file, the parent directory swapped for a link. So the destination's
// directory is opened once, when the run starts (Open), and never looked up by path again;
// the file is created beneath that descriptor under a fresh name with O_CREAT|O_EXCL|
// O_NOFOLLOW and renamed over the destination's name, which replaces whatever entry is
// there (a link is replaced, never followed; a hard link's other names keep their content).
package hostfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dest is a file to be written later, its directory already resolved.
type Dest struct {
	path string // as the operator gave it, for messages
	dir  int    // O_PATH descriptor of the directory
	name string // the last component
}

// Open resolves path's directory now (following links: the path is the operator's, and
// nothing of the run has happened yet) and checks that a file can be made there. The file
// itself is not touched until Write or Create.
func Open(path string) (*Dest, error) {
	if path == "" {
		return nil, errors.New("empty path")
	}
	dir, name := filepath.Split(path)
	switch name {
	case "", ".", "..":
		return nil, fmt.Errorf("%s: not a file name", path)
	}
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: directory %s: %w", path, dir, err)
	}
	d := &Dest{path: path, dir: fd, name: name}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		d.Close()
		return nil, fmt.Errorf("%s is a directory", path)
	}
	// Prove a file can be made there (permissions, a read-only mount, a full disk): a
	// report lost after a long run is a run lost.
	tmp, f, err := d.create()
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	f.Close()
	_ = unix.Unlinkat(fd, tmp, 0)
	return d, nil
}

// Path is the destination as given to Open.
func (d *Dest) Path() string { return d.path }

// Close releases the directory descriptor.
func (d *Dest) Close() error {
	if d == nil || d.dir < 0 {
		return nil
	}
	err := unix.Close(d.dir)
	d.dir = -1
	return err
}

// WriteFile writes data as the destination's whole content (mode 0600).
func (d *Dest) WriteFile(data []byte) error {
	p, err := d.Create()
	if err != nil {
		return err
	}
	if _, err := p.Write(data); err != nil {
		p.Abort()
		return err
	}
	return p.Commit()
}

// Pending is a file being written; Commit puts it in place, Abort removes it.
type Pending struct {
	d   *Dest
	tmp string
	f   *os.File
}

// Create starts writing the destination: a new 0600 file under a fresh name in its
// directory.
func (d *Dest) Create() (*Pending, error) {
	tmp, f, err := d.create()
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", d.path, err)
	}
	return &Pending{d: d, tmp: tmp, f: f}, nil
}

func (d *Dest) create() (string, *os.File, error) {
	if d.dir < 0 {
		return "", nil, os.ErrClosed
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	tmp := ".airlock-" + hex.EncodeToString(b[:]) + ".tmp"
	fd, err := unix.Openat(d.dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", nil, err
	}
	return tmp, os.NewFile(uintptr(fd), tmp), nil
}

// Write appends to the pending file.
func (p *Pending) Write(b []byte) (int, error) { return p.f.Write(b) }

// Commit flushes the file and renames it over the destination's name in the directory
// resolved by Open, replacing whatever entry has that name (unless it is a directory).
func (p *Pending) Commit() error {
	err := p.f.Sync()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(p.d.dir, p.tmp, p.d.dir, p.d.name)
	}
	if err != nil {
		_ = unix.Unlinkat(p.d.dir, p.tmp, 0)
		return fmt.Errorf("write %s: %w", p.d.path, err)
	}
	return nil
}

// Abort removes the pending file.
func (p *Pending) Abort() {
	p.f.Close()
	_ = unix.Unlinkat(p.d.dir, p.tmp, 0)
}
