package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// ErrBroken is wrapped by the error Verify returns when the chain or a signature is broken.
var ErrBroken = errors.New("audit log chain is broken")

// VerifyOptions selects files and checks.
type VerifyOptions struct {
	// Paths of the live file and any rotated ones, in any order: they are put in chain
	// order by the seq of their first line.
	Paths []string
	// PublicKey checks checkpoint signatures; nil skips them (the report says so).
	PublicKey ed25519.PublicKey
	// AllowPartial accepts a first file that does not start at seq 1 (older files removed
	// by retention); otherwise a missing beginning is a break.
	AllowPartial bool
	// RequireSealed reports a break when the last file does not end in a final checkpoint
	// (written by a clean Close), which is how a cut at a line boundary is caught.
	RequireSealed bool
}

// Break is one place where the log is not what the writer wrote.
type Break struct {
	File    string `json:"file"`
	Line    int    `json:"line"` // 1-based line number within File
	Seq     uint64 `json:"seq,omitempty"`
	Problem string `json:"problem"`
}

func (b Break) String() string { return fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.Problem) }

// FileReport summarises one file.
type FileReport struct {
	Path     string `json:"path"`
	Lines    int    `json:"lines"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// Report is the outcome of a verification.
type Report struct {
	Files       []FileReport `json:"files"`
	Lines       int          `json:"lines"`
	Events      int          `json:"events"`
	Checkpoints int          `json:"checkpoints"`
	// SignaturesChecked is false when no public key was given.
	SignaturesChecked bool `json:"signatures_checked"`
	// LastSignedSeq is the seq of the last checkpoint whose signature verified; lines after
	// it (UnsignedTail) are covered by the chain only.
	LastSignedSeq uint64  `json:"last_signed_seq"`
	UnsignedTail  int     `json:"unsigned_tail"`
	Sealed        bool    `json:"sealed"`
	Breaks        []Break `json:"breaks,omitempty"`
}

// OK reports whether no break was found.
func (r Report) OK() bool { return len(r.Breaks) == 0 }

// Verify checks the chain of the given files and, when pub is not nil, the checkpoint
// signatures. The error wraps ErrBroken (with the first break) when the log is broken, or
// is an I/O error; the report is filled in either case.
func Verify(paths []string, pub ed25519.PublicKey) (Report, error) {
	return VerifyFiles(VerifyOptions{Paths: paths, PublicKey: pub})
}

// VerifyAndReport verifies like VerifyFiles, writes the human report to w and returns an
// error when the log is broken or unreadable.
func VerifyAndReport(w io.Writer, opts VerifyOptions) error {
	r, err := VerifyFiles(opts)
	if _, werr := r.WriteTo(w); werr != nil && err == nil {
		err = werr
	}
	return err
}

// VerifyFiles checks the files named in opts.
func VerifyFiles(opts VerifyOptions) (Report, error) {
	r := Report{SignaturesChecked: opts.PublicKey != nil}
	if len(opts.Paths) == 0 {
		return r, errors.New("verify audit log: no files given")
	}
	files, err := orderFiles(opts.Paths)
	if err != nil {
		return r, err
	}
	v := verifier{opts: opts, r: &r}
	if opts.PublicKey != nil {
		v.keyID = KeyID(opts.PublicKey)
	}
	for _, p := range files {
		if err := v.file(p); err != nil {
			return r, err
		}
	}
	if v.lastWasFinal {
		r.Sealed = true
	} else if opts.RequireSealed && len(files) > 0 {
		last := r.Files[len(r.Files)-1]
		r.Breaks = append(r.Breaks, Break{File: last.Path, Line: last.Lines, Seq: last.LastSeq,
			Problem: "log does not end with a final checkpoint: it was cut at the end, or the writer did not close it"})
	}
	if !r.OK() {
		return r, fmt.Errorf("%w: %s", ErrBroken, r.Breaks[0])
	}
	return r, nil
}

// orderFiles sorts paths by the seq of their first line (files without one go last).
func orderFiles(paths []string) ([]string, error) {
	type f struct {
		path string
		seq  uint64
	}
	fs := make([]f, 0, len(paths))
	for _, p := range paths {
		seq, err := firstSeq(p)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f{p, seq})
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].seq < fs[j].seq })
	out := make([]string, len(fs))
	for i, x := range fs {
		out[i] = x.path
	}
	return out, nil
}

func firstSeq(path string) (uint64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("verify audit log: %w", err)
	}
	defer fh.Close()
	line, err := bufio.NewReader(fh).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return ^uint64(0), nil
	}
	var h lineHead
	if json.Unmarshal(line, &h) != nil || h.Seq == 0 {
		return ^uint64(0), nil
	}
	return h.Seq, nil
}

type verifier struct {
	opts         VerifyOptions
	r            *Report
	keyID        string
	started      bool
	seq          uint64 // seq of the previous line
	hash         string // hash of the previous line
	lastWasFinal bool
}

func (v *verifier) brk(file string, line int, seq uint64, format string, args ...any) {
	v.r.Breaks = append(v.r.Breaks, Break{File: file, Line: line, Seq: seq, Problem: fmt.Sprintf(format, args...)})
}

func (v *verifier) file(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify audit log: %w", err)
	}
	defer fh.Close()
	fr := FileReport{Path: path}
	br := bufio.NewReaderSize(fh, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("verify audit log %s: %w", path, err)
		}
		fr.Lines = n
		v.r.Lines++
		if line[len(line)-1] != '\n' {
			v.brk(path, n, 0, "incomplete last line (%d bytes, no newline): the file was truncated", len(line))
			v.lastWasFinal = false
			break
		}
		h := v.line(path, n, line)
		if fr.FirstSeq == 0 {
			fr.FirstSeq = h.Seq
		}
		fr.LastSeq = h.Seq
	}
	v.r.Files = append(v.r.Files, fr)
	return nil
}

// line checks one complete line against the chain so far, then makes it the new tip, so
// that one damaged line is reported once and verification goes on after it.
func (v *verifier) line(path string, n int, line []byte) lineHead {
	var h lineHead
	if err := json.Unmarshal(bytes.TrimSuffix(line, []byte("\n")), &h); err != nil || h.Seq == 0 {
		v.brk(path, n, 0, "not an audit line (invalid JSON or no seq)")
		v.hash, v.lastWasFinal = lineHash(line), false
		v.seq++
		return h
	}
	switch {
	case !v.started && !v.opts.AllowPartial && (h.Seq != 1 || h.Prev != Genesis):
		v.brk(path, n, h.Seq, "chain does not start at the beginning (seq %d, want 1 with genesis prev): earlier lines or files are missing", h.Seq)
	case v.started && h.Seq != v.seq+1:
		if h.Seq > v.seq+1 {
			v.brk(path, n, h.Seq, "seq jumps from %d to %d: %d line(s) missing before this line", v.seq, h.Seq, h.Seq-v.seq-1)
		} else {
			v.brk(path, n, h.Seq, "seq %d after %d: lines reordered or duplicated", h.Seq, v.seq)
		}
	case v.started && h.Prev != v.hash:
		v.brk(path, n, h.Seq, "prev does not match the hash of the line before: that line (%d) was altered, or lines were inserted or removed here", n-1)
	}
	v.started = true
	v.seq, v.hash = h.Seq, lineHash(line)
	v.lastWasFinal = false
	if h.Kind != KindCheckpoint {
		v.r.Events++
		v.r.UnsignedTail++
		return h
	}
	v.r.Checkpoints++
	v.lastWasFinal = h.Final
	if h.Hash != h.Prev {
		v.brk(path, n, h.Seq, "checkpoint hash differs from its prev")
		return h
	}
	if v.opts.PublicKey == nil {
		return h
	}
	if h.KeyID != v.keyID {
		v.brk(path, n, h.Seq, "checkpoint signed by key %q, not the given key %q", h.KeyID, v.keyID)
		return h
	}
	sig, err := base64.StdEncoding.DecodeString(h.Sig)
	if err != nil || !ed25519.Verify(v.opts.PublicKey, checkpointMessage(h.Seq, h.Hash), sig) {
		v.brk(path, n, h.Seq, "checkpoint signature does not verify")
		return h
	}
	v.r.LastSignedSeq, v.r.UnsignedTail = h.Seq, 0
	return h
}

// WriteTo writes a human report: one line per file, the totals, and every break with its
// file and line.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	for _, f := range r.Files {
		fmt.Fprintf(&b, "%s: %d lines, seq %d..%d\n", f.Path, f.Lines, f.FirstSeq, f.LastSeq)
	}
	fmt.Fprintf(&b, "%d lines: %d events, %d checkpoints\n", r.Lines, r.Events, r.Checkpoints)
	switch {
	case !r.SignaturesChecked:
		b.WriteString("signatures: not checked (no public key given)\n")
	case r.LastSignedSeq == 0:
		b.WriteString("signatures: no valid signed checkpoint found\n")
	default:
		fmt.Fprintf(&b, "signatures: valid up to seq %d; %d events after it are covered by the chain only\n", r.LastSignedSeq, r.UnsignedTail)
	}
	if r.Sealed {
		b.WriteString("sealed: the log ends with a final checkpoint\n")
	} else {
		b.WriteString("sealed: no (still being written, or cut at the end)\n")
	}
	if r.OK() {
		b.WriteString("OK: chain intact\n")
	} else {
		fmt.Fprintf(&b, "BROKEN: %d problem(s)\n", len(r.Breaks))
		for _, br := range r.Breaks {
			fmt.Fprintf(&b, "  %s\n", br)
		}
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}
