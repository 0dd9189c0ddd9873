package sandbox

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A patch is built in memory from files the sandbox wrote: maxPatchFile bounds what one
// file may bring (either side), maxPatchTotal all of them together, so that a sandbox
// cannot make airlock read (and hold) without end, with sparse files for instance.
var (
	maxPatchFile  = 256 << 20
	maxPatchTotal = 1 << 30
	diffTimeout   = 2 * time.Minute
)

// ErrPatchIncomplete is wrapped by Patch's error when the patch it returns leaves changes
// out (named in '# airlock:' lines that git apply skips): FIFOs, sockets, devices, files
// over maxPatchFile, or a host side that cannot be read.
var ErrPatchIncomplete = errors.New("the patch leaves changes out")

// entry is one side of a changed path as git sees it: mode 100644, 100755 or 120000
// (a symlink, whose data is its target).
type entry struct {
	mode string
	data []byte
}

// patchOf renders the changes as one git-style diff (a/ is the host workspace, b/ the
// sandbox's view) that `git apply` applies to the host copy: text as unified hunks (made
// by the host's diff(1)), binary files as git binary literals, symlinks as symlinks, new,
// deleted and mode-changed files with git's headers, deletions first (so that a directory
// replaced by a file, or the reverse, applies). The sandbox wrote the upper directory, so
// nothing there is trusted: files are opened without following any symlink (a link to a
// host file brings its target path, never the host file's content), only regular files
// are read, within maxPatchFile and maxPatchTotal, and path names are quoted as git quotes
// them, so a file name cannot forge patch lines. What a patch cannot carry is named in a
// comment line, and the error then wraps ErrPatchIncomplete (the patch is still returned).
func patchOf(upper, lower string) ([]byte, error) {
	changes, err := changesOf(upper, lower)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "airlock-patch-")
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	defer os.RemoveAll(tmp)
	var out bytes.Buffer
	var left []string
	total := 0
	leave := func(path string, err error) {
		fmt.Fprintf(&out, "# airlock: %s left out: %v\n", quotePath(path), err)
		left = append(left, path)
	}
	for _, deletions := range []bool{true, false} {
		for _, c := range changes {
			if strings.HasSuffix(c.Path, "/") || (c.Kind == "deleted") != deletions {
				continue
			}
			var from, to *entry
			if c.Kind != "added" {
				if from, err = readEntry(lower, c.Path); err != nil {
					leave(c.Path, fmt.Errorf("host side: %w", err))
					continue
				}
			}
			if c.Kind != "deleted" {
				if to, err = readEntry(upper, c.Path); err != nil {
					leave(c.Path, err)
					continue
				}
			}
			if total += from.size() + to.size(); total > maxPatchTotal {
				return nil, fmt.Errorf("patch: the changes hold more than the %d MiB of file data a patch carries", maxPatchTotal>>20)
			}
			if from != nil && to != nil && (from.mode == "120000") != (to.mode == "120000") {
				// A file became a symlink or the reverse: git writes a deletion and an addition.
				if err := writeFilePatch(&out, tmp, c.Path, from, nil); err != nil {
					return nil, err
				}
				from = nil
			}
			if err := writeFilePatch(&out, tmp, c.Path, from, to); err != nil {
				return nil, err
			}
		}
	}
	if len(left) > 0 {
		return out.Bytes(), fmt.Errorf("%w: %s", ErrPatchIncomplete, strings.Join(quoteAll(left), ", "))
	}
	return out.Bytes(), nil
}

func (e *entry) size() int {
	if e == nil {
		return 0
	}
	return len(e.data)
}

func quoteAll(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = quotePath(p)
	}
	return out
}

// readEntry reads rel under root without following symlinks anywhere on the way.
func readEntry(root, rel string) (*entry, error) {
	dir, base := filepath.Split(rel)
	dirFD, err := openDirBeneath(root, dir)
	if err != nil {
		return nil, fmt.Errorf("open directory: %w", err)
	}
	defer unix.Close(dirFD)
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirFD, base, buf)
		if err != nil {
			return nil, err
		}
		return &entry{mode: "120000", data: buf[:n]}, nil
	case unix.S_IFREG:
	default:
		return nil, fmt.Errorf("not a regular file or symlink (mode %#o)", st.Mode&unix.S_IFMT)
	}
	fd, err := unix.Openat(dirFD, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(maxPatchFile)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPatchFile {
		return nil, fmt.Errorf("larger than the %d MiB a patch carries per file", maxPatchFile>>20)
	}
	mode := "100644"
	if st.Mode&0o111 != 0 {
		mode = "100755"
	}
	return &entry{mode: mode, data: data}, nil
}

// openDirBeneath opens dir (relative, "" for root itself) as an O_PATH descriptor, refusing
// any symlink on the way and any way out of root.
func openDirBeneath(root, dir string) (int, error) {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil || dir == "" {
		return rootFD, err
	}
	defer unix.Close(rootFD)
	return unix.Openat2(rootFD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// writeFilePatch writes one file's section; a nil side is absent (an addition or deletion).
func writeFilePatch(out *bytes.Buffer, tmp, path string, from, to *entry) error {
	a, b := quotePath("a/"+path), quotePath("b/"+path)
	fmt.Fprintf(out, "diff --git %s %s\n", a, b)
	switch {
	case from == nil:
		fmt.Fprintf(out, "new file mode %s\n", to.mode)
	case to == nil:
		fmt.Fprintf(out, "deleted file mode %s\n", from.mode)
	case from.mode != to.mode:
		fmt.Fprintf(out, "old mode %s\nnew mode %s\n", from.mode, to.mode)
	}
	var fromData, toData []byte
	if from != nil {
		fromData = from.data
	}
	if to != nil {
		toData = to.data
	}
	if from != nil && to != nil && bytes.Equal(fromData, toData) {
		return nil // a mode change only
	}
	if from == nil && len(toData) == 0 || to == nil && len(fromData) == 0 {
		return nil // an empty file added or deleted: the header says it all
	}
	if bytes.IndexByte(fromData, 0) >= 0 || bytes.IndexByte(toData, 0) >= 0 {
		return writeBinary(out, from, to)
	}
	labelA, labelB := a, b
	if from == nil {
		labelA = "/dev/null"
	}
	if to == nil {
		labelB = "/dev/null"
	}
	hunks, err := unifiedDiff(tmp, labelA, labelB, fromData, toData)
	if err != nil {
		return fmt.Errorf("patch %s: %w", quotePath(path), err)
	}
	out.Write(hunks)
	return nil
}

// unifiedDiff runs diff(1) on copies of the two sides, so diff never opens a path the
// sandbox controls.
func unifiedDiff(tmp, labelA, labelB string, a, b []byte) ([]byte, error) {
	pa, pb := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	if err := os.WriteFile(pa, a, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(pb, b, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), diffTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "diff", "-u", "--label", labelA, "--label", labelB, pa, pb).Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return nil, fmt.Errorf("diff: %w", err)
	}
	return out, nil
}

// writeBinary writes a git binary patch: the index line with both blob ids (git apply
// checks the host side against it), then the new content and the old, each deflated and
// base85-encoded.
func writeBinary(out *bytes.Buffer, from, to *entry) error {
	var fromData, toData []byte
	fromID, toID := strings.Repeat("0", 40), strings.Repeat("0", 40)
	if from != nil {
		fromData, fromID = from.data, blobID(from.data)
	}
	if to != nil {
		toData, toID = to.data, blobID(to.data)
	}
	fmt.Fprintf(out, "index %s..%s\nGIT binary patch\n", fromID, toID)
	for _, data := range [][]byte{toData, fromData} {
		if err := writeLiteral(out, data); err != nil {
			return err
		}
	}
	return nil
}

func blobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

const base85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// writeLiteral writes "literal N", the zlib-deflated data in git's base85 lines (a length
// character, then five characters per four bytes, at most 52 bytes a line), and a blank line.
func writeLiteral(out *bytes.Buffer, data []byte) error {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "literal %d\n", len(data))
	deflated := z.Bytes()
	for len(deflated) > 0 {
		n := min(len(deflated), 52)
		line := deflated[:n]
		deflated = deflated[n:]
		if n <= 26 {
			out.WriteByte(byte('A' + n - 1))
		} else {
			out.WriteByte(byte('a' + n - 27))
		}
		for i := 0; i < n; i += 4 {
			var v uint32
			for j := range 4 {
				v <<= 8
				if i+j < n {
					v |= uint32(line[i+j])
				}
			}
			var enc [5]byte
			for k := 4; k >= 0; k-- {
				enc[k] = base85Alphabet[v%85]
				v /= 85
			}
			out.Write(enc[:])
		}
		out.WriteByte('\n')
	}
	out.WriteByte('\n')
	return nil
}

// quotePath quotes a path as git does when it holds a quote, a backslash, a control
// character or a non-ASCII byte: in double quotes with C escapes. Anything else is as is.
func quotePath(p string) string {
	needs := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			needs = true
			break
		}
	}
	if !needs {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c >= 0x7f {
				b.WriteString(`\` + strconv.FormatInt(int64(c)|0o1000, 8)[1:])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
