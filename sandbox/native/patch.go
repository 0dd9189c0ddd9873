package native

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// entry is one side of a changed path as git sees it: mode 100644, 100755 or 120000
// (a symlink, whose data is its target).
type entry struct {
	mode string
	data []byte
}

// writePatch writes the changes as one git-style diff (a/ is the host workspace, b/ the
// sandbox's view) that `git apply` applies to the host copy: text as unified hunks (an
// in-process line diff), binary files as git binary literals, symlinks as symlinks, new,
// deleted and mode-changed files with git's headers, deletions first (so that a directory
// replaced by a file, or the reverse, applies). The sandbox wrote the upper directory, so
// nothing there is trusted: files are opened beneath directory descriptors without
// following any symlink (a link to a host file brings its target path, never the host
// file's content), only regular files are read, path names are quoted as git quotes them
// (a file name cannot forge patch lines), and the work is bounded by postRun. What the
// patch cannot carry is named in a comment line, and the error then wraps
// ErrPatchIncomplete; any other error is w's.
func writePatch(w io.Writer, upper, lower string, protected []string) error {
	l := changesOf(upper, lower)
	pw := &patchWriter{w: w, deadline: time.Now().Add(postRun.Time)}
	if why := l.Incomplete(); why != "" {
		fmt.Fprintf(&pw.sec, "# airlock: the change listing is incomplete: %s\n", why)
		if err := pw.flush(); err != nil {
			return err
		}
		pw.listing = why
	}
	up, err := newTree(upper)
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	defer up.close()
	low, err := newTree(lower)
	if err != nil {
		return fmt.Errorf("patch: host workspace: %w", err)
	}
	defer low.close()
	for _, deletions := range []bool{true, false} {
		for _, c := range l.changes {
			if strings.HasSuffix(c.Path, "/") || (c.Kind == "deleted") != deletions {
				continue
			}
			if why := hostRun(c.Path, protected); why != "" {
				if err := pw.leave(c.Path, errors.New(why)); err != nil {
					return err
				}
				continue
			}
			if err := pw.change(up, low, c); err != nil {
				return err
			}
		}
	}
	return pw.err()
}

// patchOf is writePatch into memory, with the default protected paths.
func patchOf(upper, lower string) ([]byte, error) {
	var b bytes.Buffer
	err := writePatch(&b, upper, lower, sandbox.DefaultProtectedPaths)
	return b.Bytes(), err
}

// hostRun says why a patch must not carry a change of path to the host, or "": git's own
// metadata (a path with a .git component, in any case: git apply refuses those anyway),
// or a path host tools run or read as configuration (one of protected, the sandbox's
// Options.ProtectedPaths, or beneath one). A sandbox cannot change those that existed at
// start; this keeps it from adding them through the patch.
func hostRun(path string, protected []string) string {
	p := strings.TrimSuffix(path, "/")
	for _, c := range strings.Split(p, "/") {
		if strings.EqualFold(c, ".git") {
			return "git's own files are never carried by a patch"
		}
	}
	for _, pr := range protected {
		pr = filepath.ToSlash(filepath.Clean(pr))
		if p == pr || strings.HasPrefix(p, pr+"/") {
			return "a path host tools run or read as configuration (protected: " + quotePath(pr) + ") is never carried by a patch; review it in the sandbox's copy and copy it by hand if you mean it"
		}
	}
	return ""
}

// patchWriter writes a patch one file section at a time, within postRun's bounds.
type patchWriter struct {
	w        io.Writer
	sec      bytes.Buffer // the section being built
	written  int
	deadline time.Time
	left     []string // quoted paths left out
	listing  string   // why the change listing is incomplete
	stopped  string   // a bound that ended the patch
}

func (pw *patchWriter) flush() error {
	n, err := pw.w.Write(pw.sec.Bytes())
	pw.written += n
	pw.sec.Reset()
	return err
}

// leave names a path the patch does not carry, and why.
func (pw *patchWriter) leave(path string, why error) error {
	q := quotePath(path)
	pw.left = append(pw.left, q)
	pw.sec.Reset()
	fmt.Fprintf(&pw.sec, "# airlock: %s left out: %v\n", q, why)
	return pw.flush()
}

func (pw *patchWriter) change(up, low *tree, c sandbox.Change) error {
	if pw.stopped == "" && time.Now().After(pw.deadline) {
		pw.stopped = fmt.Sprintf("the patch stopped after %s", postRun.Time)
	}
	if pw.stopped != "" {
		return pw.leave(c.Path, errors.New(pw.stopped))
	}
	var from, to *entry
	var err error
	if c.Kind != "added" {
		if from, err = low.entry(c.Path); err != nil {
			return pw.leave(c.Path, fmt.Errorf("host side: %w", err))
		}
	}
	if c.Kind != "deleted" {
		if to, err = up.entry(c.Path); err != nil {
			return pw.leave(c.Path, err)
		}
	}
	if from != nil && to != nil && (from.mode == "120000") != (to.mode == "120000") {
		// A file became a symlink or the reverse: git writes a deletion and an addition.
		writeFilePatch(&pw.sec, c.Path, from, nil)
		from = nil
	}
	writeFilePatch(&pw.sec, c.Path, from, to)
	if pw.written+pw.sec.Len() > postRun.PatchBytes {
		pw.stopped = fmt.Sprintf("the patch reached its %d MiB bound", postRun.PatchBytes>>20)
		return pw.leave(c.Path, errors.New(pw.stopped))
	}
	return pw.flush()
}

// err is the patch's outcome: nil, or ErrPatchIncomplete naming what it left out.
func (pw *patchWriter) err() error {
	var why []string
	if pw.listing != "" {
		why = append(why, "the change listing is incomplete ("+pw.listing+")")
	}
	if len(pw.left) > 0 {
		const show = 20
		names := pw.left
		more := ""
		if len(names) > show {
			more = fmt.Sprintf(" and %d more", len(names)-show)
			names = names[:show]
		}
		why = append(why, strings.Join(names, ", ")+more)
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", sandbox.ErrPatchIncomplete, strings.Join(why, "; "))
}

// tree opens paths beneath a root one directory descriptor per level, without following
// any symlink and without a path length limit; it keeps the last parent directory open,
// since changes come sorted.
type tree struct {
	root   int
	dirRel string
	dir    int // dirRel's descriptor; -1 when none
}

func newTree(root string) (*tree, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &tree{root: fd, dir: -1}, nil
}

func (t *tree) close() {
	if t.dir >= 0 {
		unix.Close(t.dir)
	}
	unix.Close(t.root)
}

// parent returns a descriptor of rel's directory (owned by t) and rel's last component.
func (t *tree) parent(rel string) (int, string, error) {
	dir, base := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	if dir == "" {
		return t.root, base, nil
	}
	if t.dir >= 0 && t.dirRel == dir {
		return t.dir, base, nil
	}
	if t.dir >= 0 {
		unix.Close(t.dir)
		t.dir = -1
	}
	fd, err := unix.Dup(t.root)
	if err != nil {
		return -1, "", err
	}
	for _, name := range strings.Split(dir, "/") {
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("open directory: %w", err)
		}
		fd = next
	}
	t.dir, t.dirRel = fd, dir
	return fd, base, nil
}

// entry reads rel: a symlink's target, or a regular file's content within
// postRun.FileBytes.
func (t *tree) entry(rel string) (*entry, error) {
	dirFD, base, err := t.parent(rel)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, err := readLink(dirFD, base)
		if err != nil {
			return nil, err
		}
		return &entry{mode: "120000", data: []byte(target)}, nil
	}
	f, err := openRegular(dirFD, base)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Size > int64(postRun.FileBytes) {
		return nil, fmt.Errorf("larger than the %d MiB a patch carries per file", postRun.FileBytes>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(postRun.FileBytes)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > postRun.FileBytes {
		return nil, fmt.Errorf("larger than the %d MiB a patch carries per file", postRun.FileBytes>>20)
	}
	mode := "100644"
	if st.Mode&0o111 != 0 {
		mode = "100755"
	}
	return &entry{mode: mode, data: data}, nil
}

// writeFilePatch writes one file's section; a nil side is absent (an addition or deletion).
func writeFilePatch(out *bytes.Buffer, path string, from, to *entry) {
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
		return // a mode change only
	}
	if from == nil && len(toData) == 0 || to == nil && len(fromData) == 0 {
		return // an empty file added or deleted: the header says it all
	}
	if bytes.IndexByte(fromData, 0) >= 0 || bytes.IndexByte(toData, 0) >= 0 {
		writeBinary(out, from, to)
		return
	}
	labelA, labelB := a, b
	if from == nil {
		labelA = "/dev/null"
	}
	if to == nil {
		labelB = "/dev/null"
	}
	fmt.Fprintf(out, "--- %s\n+++ %s\n", labelA, labelB)
	writeHunks(out, splitLines(fromData), splitLines(toData))
}

// writeBinary writes a git binary patch: the index line with both blob ids (git apply
// checks the host side against it), then the new content and the old, each deflated and
// base85-encoded.
func writeBinary(out *bytes.Buffer, from, to *entry) {
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
		writeLiteral(out, data)
	}
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
func writeLiteral(out *bytes.Buffer, data []byte) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	_, _ = zw.Write(data) // a bytes.Buffer does not fail
	_ = zw.Close()
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
