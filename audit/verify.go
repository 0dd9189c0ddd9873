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
	"strconv"

	"github.com/airlock-proxy/airlock/internal/event"
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

// Break is one place where the log is not what the writer wrote, or (in Report.Warnings)
// something a reader should look at.
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
	// SignaturesChecked is false when no public key was given: then nothing shows that the
	// lines are what airlock wrote, only that they chain together.
	SignaturesChecked bool   `json:"signatures_checked"`
	KeyID             string `json:"key_id,omitempty"`
	// LastSignedSeq is the seq of the last checkpoint whose signature verified, and
	// LastSignedTime its time. With a key, every event line must come before such a
	// checkpoint: the UnsignedTail event lines after it are a break (UnsignedFrom is the
	// first of them).
	LastSignedSeq  uint64 `json:"last_signed_seq"`
	LastSignedTime string `json:"last_signed_time,omitempty"`
	UnsignedTail   int    `json:"unsigned_tail"`
	UnsignedFrom   *Break `json:"unsigned_from,omitempty"`
	// Sealed: the log ends with a final checkpoint (written by Close); with a key, a signed one.
	Sealed bool    `json:"sealed"`
	Breaks []Break `json:"breaks,omitempty"`
	// Unfinished counts decision records without a completion record: requests in flight
	// at the end of the log, or whose completion could not be written (airlock stopped or
	// crashed, or the log failed). Warnings lists the first of them.
	Unfinished int     `json:"unfinished"`
	Warnings   []Break `json:"warnings,omitempty"`
}

// maxWarnings bounds Report.Warnings.
const maxWarnings = 20

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
	if err != nil && !errors.Is(err, ErrBroken) {
		return err // nothing was verified (a file that cannot be read): no report
	}
	if _, werr := r.WriteTo(w); werr != nil && err == nil {
		err = werr
	}
	return err
}

// VerifyFiles checks the files named in opts: the chain (seq without gaps, each prev the
// hash of the line before, from genesis unless AllowPartial) and, with a public key, that
// every checkpoint's signature verifies and that every event line is covered by one (a
// checkpoint signs the hash of the line before it, which by the chain commits to every
// earlier line). Event lines after the last valid checkpoint are a break: nothing shows
// they are what airlock wrote, so a log whose checkpoints were removed, or whose events
// after the last checkpoint were edited, deleted or appended, fails.
func VerifyFiles(opts VerifyOptions) (Report, error) {
	r := Report{SignaturesChecked: opts.PublicKey != nil}
	if len(opts.Paths) == 0 {
		return r, errors.New("verify audit log: no files given")
	}
	files, err := orderFiles(opts.Paths)
	if err != nil {
		return r, err
	}
	v := verifier{opts: opts, r: &r, open: map[string]Break{}}
	if opts.PublicKey != nil {
		v.keyID = KeyID(opts.PublicKey)
		r.KeyID = v.keyID
	}
	for _, p := range files {
		if err := v.file(p); err != nil {
			return r, err
		}
	}
	v.finish()
	if r.Lines == 0 {
		r.Breaks = append(r.Breaks, Break{File: files[len(files)-1],
			Problem: "the log holds no lines, so nothing shows what airlock recorded: a log airlock wrote holds a line per event (and, signed, a checkpoint when it closes); check the path"})
	}
	if !r.OK() {
		return r, fmt.Errorf("%w: %s", ErrBroken, r.Breaks[0])
	}
	return r, nil
}

// finish adds what only the end of the log shows: the unsigned tail, the seal, and the
// requests left without a completion.
func (v *verifier) finish() {
	r := v.r
	if v.opts.PublicKey != nil && r.UnsignedTail > 0 {
		b := *r.UnsignedFrom
		last := r.Files[len(r.Files)-1]
		if r.LastSignedSeq == 0 {
			b.Problem = fmt.Sprintf("no valid signed checkpoint covers the %d event line(s) from here to the end (%s:%d, seq %d): the log is unsigned, or its checkpoints were removed; nothing shows these lines are what airlock wrote",
				r.UnsignedTail, last.Path, last.Lines, v.seq)
		} else {
			b.Problem = fmt.Sprintf("the %d event line(s) from here to the end (%s:%d, seq %d) come after the last valid signed checkpoint (seq %d, %s): they are not signed (written after it by a writer that crashed or is still running, or checkpoints were removed or lines appended); nothing shows they are what airlock wrote",
				r.UnsignedTail, last.Path, last.Lines, v.seq, r.LastSignedSeq, r.LastSignedTime)
		}
		r.Breaks = append(r.Breaks, b)
	}
	r.Sealed = v.lastWasFinal
	if !r.Sealed && v.opts.RequireSealed && len(r.Files) > 0 {
		last := r.Files[len(r.Files)-1]
		r.Breaks = append(r.Breaks, Break{File: last.Path, Line: last.Lines, Seq: last.LastSeq,
			Problem: "log does not end with a final checkpoint: it was cut at the end, or the writer did not close it"})
	}
	r.Unfinished = len(v.open)
	open := make([]Break, 0, len(v.open))
	for _, b := range v.open {
		open = append(open, b)
	}
	sort.Slice(open, func(i, j int) bool { return open[i].Seq < open[j].Seq })
	r.Warnings = append(r.Warnings, open[:min(len(open), maxWarnings)]...)
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
	complete     bool   // the chain started at seq 1: every decision record is in it
	seq          uint64 // seq of the previous line
	hash         string // hash of the previous line
	lastWasFinal bool
	open         map[string]Break // decision records awaiting their completion, by request id
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
	if !v.started {
		v.complete = h.Seq == 1 && h.Prev == Genesis
	}
	v.started = true
	v.seq, v.hash = h.Seq, lineHash(line)
	v.lastWasFinal = false
	if h.Kind != event.KindCheckpoint {
		v.event(path, n, h)
		return h
	}
	v.checkpoint(path, n, h)
	return h
}

// event counts an event line: unsigned until a valid checkpoint follows, and a decision
// record open until its completion.
func (v *verifier) event(path string, n int, h lineHead) {
	v.r.Events++
	if v.r.UnsignedTail == 0 {
		v.r.UnsignedFrom = &Break{File: path, Line: n, Seq: h.Seq}
	}
	v.r.UnsignedTail++
	switch h.Stage {
	case StageDecision:
		v.open[h.RequestID] = Break{File: path, Line: n, Seq: h.Seq,
			Problem: "decision record of request " + strconv.Quote(h.RequestID) + " has no completion record: it was in flight at the end of the log, or airlock stopped or its log failed before the completion was written"}
	case StageCompletion:
		if _, ok := v.open[h.RequestID]; ok {
			delete(v.open, h.RequestID)
		} else if v.complete && len(v.r.Warnings) < maxWarnings {
			v.r.Warnings = append(v.r.Warnings, Break{File: path, Line: n, Seq: h.Seq,
				Problem: "completion record of request " + strconv.Quote(h.RequestID) + " has no decision record before it"})
		}
	}
}

// checkpoint checks a checkpoint line: well formed, and with a key, signed by it.
func (v *verifier) checkpoint(path string, n int, h lineHead) {
	v.r.Checkpoints++
	if h.Hash != h.Prev {
		v.brk(path, n, h.Seq, "checkpoint hash differs from its prev")
		return
	}
	if h.V > checkpointVersion {
		v.brk(path, n, h.Seq, "checkpoint version %d is newer than this verifier knows (%d)", h.V, checkpointVersion)
		return
	}
	if v.opts.PublicKey == nil {
		v.lastWasFinal = h.Final
		return
	}
	if h.KeyID != v.keyID {
		v.brk(path, n, h.Seq, "checkpoint signed by key %q, not the given key %q", h.KeyID, v.keyID)
		return
	}
	sig, err := base64.StdEncoding.DecodeString(h.Sig)
	c := checkpointLine{Seq: h.Seq, Hash: h.Hash, V: h.V, Time: h.Time, Final: h.Final}
	if err != nil || !ed25519.Verify(v.opts.PublicKey, checkpointMessage(c), sig) {
		v.brk(path, n, h.Seq, "checkpoint signature does not verify")
		return
	}
	// A version 1 checkpoint did not sign its final flag: it does not seal the log.
	v.lastWasFinal = h.Final && h.V >= 2
	v.r.LastSignedSeq, v.r.LastSignedTime = h.Seq, h.Time
	v.r.UnsignedTail, v.r.UnsignedFrom = 0, nil
}

// WriteTo writes a human report: one line per file, the totals, what the signatures show,
// and every break with its file and line.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	for _, f := range r.Files {
		fmt.Fprintf(&b, "%s: %d lines, seq %d..%d\n", f.Path, f.Lines, f.FirstSeq, f.LastSeq)
	}
	fmt.Fprintf(&b, "%d lines: %d events, %d checkpoints\n", r.Lines, r.Events, r.Checkpoints)
	switch {
	case !r.SignaturesChecked:
		b.WriteString("signatures: NOT CHECKED (no --public-key): this only shows that the lines chain together; whoever can write the files can rewrite an unsigned chain end to end\n")
	case r.LastSignedSeq == 0:
		fmt.Fprintf(&b, "signatures: key %s: no valid signed checkpoint\n", r.KeyID)
	case r.UnsignedTail == 0:
		fmt.Fprintf(&b, "signatures: key %s: every event is covered by a valid signed checkpoint (the last at seq %d, %s)\n", r.KeyID, r.LastSignedSeq, r.LastSignedTime)
	default:
		fmt.Fprintf(&b, "signatures: key %s: valid up to seq %d (%s); the %d event(s) after it are NOT signed\n", r.KeyID, r.LastSignedSeq, r.LastSignedTime, r.UnsignedTail)
	}
	switch {
	case r.Sealed:
		b.WriteString("sealed: yes, the log ends with the final checkpoint airlock writes when it closes the log\n")
	case !r.SignaturesChecked && r.Checkpoints == 0:
		b.WriteString("sealed: does not apply: the log is unsigned (no audit.signing_key_file), and only a signed log ends with the checkpoint that shows airlock closed it\n")
	case !r.SignaturesChecked:
		b.WriteString("sealed: not checked (the seal is a signed checkpoint: give --public-key)\n")
	case r.SignaturesChecked && r.LastSignedSeq > 0 && r.UnsignedTail == 0:
		fmt.Fprintf(&b, "sealed: no: airlock is still writing the newest file, or stopped without closing it, or lines after seq %d were cut (--require-sealed demands the seal)\n", r.LastSignedSeq)
	default:
		b.WriteString("sealed: no (still being written, or cut at the end)\n")
	}
	if r.Unfinished > 0 {
		fmt.Fprintf(&b, "requests: %d decision record(s) without a completion record (in flight at the end, or airlock stopped or its log failed before writing it)\n", r.Unfinished)
	}
	for _, wn := range r.Warnings {
		fmt.Fprintf(&b, "  note: %s\n", wn)
	}
	switch {
	case !r.OK():
		fmt.Fprintf(&b, "BROKEN: %d problem(s)\n", len(r.Breaks))
		for _, br := range r.Breaks {
			fmt.Fprintf(&b, "  %s\n", br)
		}
	case r.SignaturesChecked:
		b.WriteString("OK: chain intact and signed to the end\n")
	default:
		b.WriteString("OK: chain intact (UNSIGNED: signatures not checked)\n")
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}
