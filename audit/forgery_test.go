package audit

import (
	"bytes"
	"context"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// The forgeries below are what someone who can write the log files (but does not hold the
// signing key) can do. Each must make `airlock audit verify --public-key` fail, and the
// first break must point at the place that gives it away.

var linePrefix = regexp.MustCompile(`^\{"seq":\d+,"prev":"[0-9a-f]*",`)

// rechain rewrites seq and prev of every line from index from on so that the chain is
// intact again, as an attacker without the key would after removing or editing lines.
// With fixCheckpoints, a checkpoint's "hash" is set to its new prev as well (its signature
// stays what it was: the attacker cannot make a new one).
func rechain(t *testing.T, lines [][]byte, from int, fixCheckpoints bool) [][]byte {
	t.Helper()
	out := slices.Clone(lines)
	for i := from; i < len(out); i++ {
		seq, prev := uint64(1), Genesis
		if i > 0 {
			var h lineHead
			if err := jsonUnmarshal(out[i-1], &h); err != nil {
				t.Fatal(err)
			}
			seq, prev = h.Seq+1, lineHash(out[i-1])
		}
		l := linePrefix.ReplaceAll(out[i], []byte(fmt.Sprintf(`{"seq":%d,"prev":"%s",`, seq, prev)))
		if fixCheckpoints && bytes.Contains(l, []byte(`"kind":"checkpoint"`)) {
			l = regexp.MustCompile(`"hash":"[0-9a-f]*"`).ReplaceAll(l, []byte(`"hash":"`+prev+`"`))
		}
		out[i] = l
	}
	return out
}

func isCheckpoint(l []byte) bool { return bytes.Contains(l, []byte(`"kind":"checkpoint"`)) }

func withoutCheckpoints(lines [][]byte) [][]byte {
	var out [][]byte
	for _, l := range lines {
		if !isCheckpoint(l) {
			out = append(out, l)
		}
	}
	return out
}

func TestVerifyRefusesForgeries(t *testing.T) {
	// The log: events 1-4 (lines 1-4), checkpoint seq 5, events 5-8 (seq 6-9), checkpoint
	// seq 10, events 9-10 (seq 11-12), final checkpoint seq 13.
	tests := []struct {
		name     string
		forge    func(t *testing.T, l [][]byte) [][]byte
		wantLine int
		wantText string
	}{
		{"every checkpoint dropped, an event deleted, seq and prev recomputed (the attack)", func(t *testing.T, l [][]byte) [][]byte {
			l = withoutCheckpoints(l)
			return rechain(t, append(l[:4:4], l[5:]...), 0, false)
		}, 1, "no valid signed checkpoint covers the 9 event line(s) from here to the end"},
		{"every checkpoint dropped, chain recomputed", func(t *testing.T, l [][]byte) [][]byte {
			return rechain(t, withoutCheckpoints(l), 0, false)
		}, 1, "no valid signed checkpoint covers the 10 event line(s)"},
		{"last lines cut (final checkpoint and last event)", func(t *testing.T, l [][]byte) [][]byte {
			return l[:11]
		}, 11, "the 1 event line(s) from here to the end"},
		{"final checkpoint cut", func(t *testing.T, l [][]byte) [][]byte {
			return l[:12]
		}, 11, "the 2 event line(s) from here to the end"},
		{"cut after a periodic checkpoint, which is then marked final", func(t *testing.T, l [][]byte) [][]byte {
			l = l[:10]
			l[9] = bytes.Replace(l[9], []byte(`"key_id"`), []byte(`"final":true,"key_id"`), 1)
			return l
		}, 10, "checkpoint signature does not verify"},
		{"event deleted, chain and checkpoint hashes recomputed, signatures kept", func(t *testing.T, l [][]byte) [][]byte {
			return rechain(t, append(l[:1:1], l[2:]...), 1, true)
		}, 4, "checkpoint signature does not verify"},
		{"event deleted, chain recomputed, checkpoints left alone", func(t *testing.T, l [][]byte) [][]byte {
			return rechain(t, append(l[:1:1], l[2:]...), 1, false)
		}, 4, "checkpoint hash differs from its prev"},
		{"event edited, chain and checkpoint hashes recomputed", func(t *testing.T, l [][]byte) [][]byte {
			l[10] = bytes.Replace(l[10], []byte(`"decision":"allow"`), []byte(`"decision":"deny"`), 1)
			return rechain(t, l, 11, true)
		}, 13, "checkpoint signature does not verify"},
		{"events appended after the seal, chain recomputed", func(t *testing.T, l [][]byte) [][]byte {
			return rechain(t, append(l, l[0], l[1]), 13, false)
		}, 14, "the 2 event line(s) from here to the end"},
		{"final checkpoint replaced by events, chain recomputed", func(t *testing.T, l [][]byte) [][]byte {
			return rechain(t, append(l[:12:12], l[0]), 12, false)
		}, 11, "the 3 event line(s) from here to the end"},
		{"checkpoint moved earlier to cover fewer lines", func(t *testing.T, l [][]byte) [][]byte {
			cp := l[9]
			return rechain(t, append(append(l[:7:7], cp), l[7:9]...), 7, true)
		}, 8, "checkpoint signature does not verify"},
		{"checkpoint of a seq past the end", func(t *testing.T, l [][]byte) [][]byte {
			return append(l[:7:7], l[9])
		}, 8, "seq jumps from 7 to 10"},
		{"checkpoint downgraded to version 1", func(t *testing.T, l [][]byte) [][]byte {
			l[12] = bytes.Replace(l[12], []byte(`"v":2,`), nil, 1)
			return l
		}, 13, "checkpoint signature does not verify"},
		{"checkpoint of an unknown version", func(t *testing.T, l [][]byte) [][]byte {
			l[12] = bytes.Replace(l[12], []byte(`"v":2,`), []byte(`"v":3,`), 1)
			return l
		}, 13, "version 3"},
		{"signature removed", func(t *testing.T, l [][]byte) [][]byte {
			l[4] = regexp.MustCompile(`"sig":"[^"]*"`).ReplaceAll(l[4], []byte(`"sig":""`))
			return l
		}, 5, "checkpoint signature does not verify"},
		{"checkpoint naming another key", func(t *testing.T, l [][]byte) [][]byte {
			l[4] = regexp.MustCompile(`"key_id":"[^"]*"`).ReplaceAll(l[4], []byte(`"key_id":"0011223344556677"`))
			return l
		}, 5, "not the given key"},
		{"checkpoint re-signed with another key", func(t *testing.T, l [][]byte) [][]byte {
			l[4] = forgeSig(t, l[4])
			return l
		}, 5, "checkpoint signature does not verify"},
		{"two events swapped, chain recomputed", func(t *testing.T, l [][]byte) [][]byte {
			l[1], l[2] = l[2], l[1]
			return rechain(t, l, 1, true)
		}, 5, "checkpoint signature does not verify"},
		{"a line duplicated", func(t *testing.T, l [][]byte) [][]byte {
			return append(l[:3:3], l[2:]...)
		}, 4, "seq 3 after 3"},
		{"a line replaced by garbage", func(t *testing.T, l [][]byte) [][]byte {
			l[5] = []byte("{\"note\":\"nothing to see\"}\n")
			return l
		}, 6, "not an audit line"},
		{"cut mid-line", func(t *testing.T, l [][]byte) [][]byte {
			l[12] = l[12][:20]
			return l
		}, 13, "incomplete last line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, pub := writeLog(t, 10, Options{CheckpointEvents: 4})
			orig := readLines(t, path)
			if len(orig) != 13 || !isCheckpoint(orig[4]) || !isCheckpoint(orig[9]) || !isCheckpoint(orig[12]) {
				t.Fatalf("unexpected log layout: %d lines", len(orig))
			}
			writeLines(t, path, tt.forge(t, orig))
			r, err := Verify([]string{path}, pub)
			if !errors.Is(err, ErrBroken) {
				t.Fatalf("forged log verified: err %v, report %+v", err, r)
			}
			b := r.Breaks[0]
			if b.Line != tt.wantLine || !strings.Contains(b.Problem, tt.wantText) {
				t.Errorf("got first break %s, want line %d containing %q (all: %v)", b, tt.wantLine, tt.wantText, r.Breaks)
			}
			var out bytes.Buffer
			if err := VerifyAndReport(&out, VerifyOptions{Paths: []string{path}, PublicKey: pub}); err == nil {
				t.Error("VerifyAndReport returned nil for a forged log")
			}
			if !strings.Contains(out.String(), "BROKEN") || strings.Contains(out.String(), "OK:") {
				t.Errorf("report does not say BROKEN:\n%s", out.String())
			}
		})
	}
}

// Without the key, a rewritten chain cannot be told from the real one: the report must say
// so rather than call the log signed.
func TestVerifyWithoutKeySaysUnsigned(t *testing.T) {
	path, pub := writeLog(t, 10, Options{CheckpointEvents: 4})
	l := withoutCheckpoints(readLines(t, path))
	writeLines(t, path, rechain(t, append(l[:4:4], l[5:]...), 0, false))
	r, err := Verify([]string{path}, nil)
	if err != nil {
		t.Fatalf("the rewritten chain is intact, so without a key: got %v", err)
	}
	var out bytes.Buffer
	r.WriteTo(&out)
	for _, want := range []string{"NOT CHECKED", "OK: chain intact (UNSIGNED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "signed to the end") {
		t.Errorf("report calls an unchecked log signed:\n%s", out.String())
	}
	if _, err := Verify([]string{path}, pub); !errors.Is(err, ErrBroken) {
		t.Errorf("with the key: got %v, want ErrBroken", err)
	}
}

// A cleanly closed signed log verifies whole: every event covered, sealed.
func TestVerifyIntactSignedLogIsSealed(t *testing.T) {
	path, pub := writeLog(t, 7, Options{CheckpointEvents: 3})
	var out bytes.Buffer
	if err := VerifyAndReport(&out, VerifyOptions{Paths: []string{path}, PublicKey: pub, RequireSealed: true}); err != nil {
		t.Fatalf("intact log: %v\n%s", err, out.String())
	}
	for _, want := range []string{"every event is covered by a valid signed checkpoint", "sealed: yes", "OK: chain intact and signed to the end"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// rotatedLog writes a signed log over several rotated files and returns them in chain
// order (oldest first; the live file last).
func rotatedLog(t *testing.T, keyFile string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, RotateBytes: 2500, CheckpointEvents: 3})
	record(t, s, 0, 30)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + ".*")
	slices.Sort(files) // timestamps: oldest first
	files = append(files, path)
	if len(files) < 4 {
		t.Fatalf("got %d files, want at least 4", len(files))
	}
	return files
}

func TestVerifyRotatedSetForgeries(t *testing.T) {
	keyFile, pub := testKey(t)
	files := rotatedLog(t, keyFile)
	other := rotatedLog(t, keyFile) // another log signed with the same key (a second replica)

	if r, err := VerifyFiles(VerifyOptions{Paths: files, PublicKey: pub, RequireSealed: true}); err != nil || !r.Sealed || r.UnsignedTail != 0 {
		t.Fatalf("intact rotated set: %v (sealed %v, tail %d)", err, r.Sealed, r.UnsignedTail)
	}
	shuffled := slices.Clone(files)
	slices.Reverse(shuffled)
	if _, err := Verify(shuffled, pub); err != nil {
		t.Errorf("files given newest first: %v (they are put in chain order)", err)
	}

	tests := []struct {
		name     string
		paths    func(t *testing.T) []string
		wantFile int // index into files of the file the first break names
		wantLine int
		wantText string
	}{
		{"a middle file missing", func(t *testing.T) []string {
			return slices.Delete(slices.Clone(files), 1, 2)
		}, 2, 1, "line(s) missing"},
		{"a file given twice", func(t *testing.T) []string {
			return append(slices.Clone(files), files[1])
		}, 1, 1, "lines reordered or duplicated"},
		{"a middle file swapped for another log's", func(t *testing.T) []string {
			d := t.TempDir()
			var out []string
			for i, f := range files {
				src := f
				if i == 1 {
					src = other[1]
				}
				dst := filepath.Join(d, filepath.Base(f))
				b, _ := os.ReadFile(src)
				os.WriteFile(dst, b, 0o600)
				out = append(out, dst)
			}
			return out
		}, 1, 1, "prev does not match"},
		{"a rotated file cut at its seal", func(t *testing.T) []string {
			d := t.TempDir()
			var out []string
			for i, f := range files {
				b, _ := os.ReadFile(f)
				if i == 1 {
					lines := bytes.SplitAfter(b, []byte("\n"))
					b = bytes.Join(lines[:len(lines)-3], nil)
				}
				dst := filepath.Join(d, filepath.Base(f))
				os.WriteFile(dst, b, 0o600)
				out = append(out, dst)
			}
			return out
		}, 2, 1, "line(s) missing"},
		{"the newest files dropped, the last kept one cut", func(t *testing.T) []string {
			d := t.TempDir()
			b, _ := os.ReadFile(files[1])
			lines := bytes.SplitAfter(b, []byte("\n"))
			dst := filepath.Join(d, "audit.jsonl")
			os.WriteFile(dst, bytes.Join(lines[:len(lines)-2], nil), 0o600)
			return []string{files[0], dst}
		}, -1, 0, "come after the last valid signed checkpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := tt.paths(t)
			r, err := Verify(paths, pub)
			if !errors.Is(err, ErrBroken) {
				t.Fatalf("forged set verified: %v", err)
			}
			b := r.Breaks[0]
			if tt.wantFile >= 0 && (filepath.Base(b.File) != filepath.Base(files[tt.wantFile]) || b.Line != tt.wantLine) ||
				!strings.Contains(b.Problem, tt.wantText) {
				t.Errorf("got first break %s, want file %d line %d containing %q", b, tt.wantFile, tt.wantLine, tt.wantText)
			}
		})
	}
}

// The report counts decision records left without their completion (requests in flight
// when the log ended, or whose completion could not be written) and names them.
func TestVerifyFlagsDecisionsWithoutCompletion(t *testing.T) {
	keyFile, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile})
	rec := func(id string, stage Stage) {
		ev := testEvent(0)
		ev.RequestID, ev.Stage = id, stage
		if err := s.Record(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	rec("r1", StageDecision)
	rec("r2", StageDecision)
	rec("r1", StageCompletion)
	rec("r3", "") // a refusal: one record
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Verify([]string{path}, pub)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unfinished != 1 || len(r.Warnings) != 1 || r.Warnings[0].Line != 2 || !strings.Contains(r.Warnings[0].Problem, `"r2"`) {
		t.Errorf("got unfinished %d warnings %v, want r2 at line 2", r.Unfinished, r.Warnings)
	}
	var out bytes.Buffer
	r.WriteTo(&out)
	if !strings.Contains(out.String(), "1 decision record(s) without a completion") {
		t.Errorf("report:\n%s", out.String())
	}
}

// FuzzVerifySigned feeds verify with arbitrary changes to a valid signed log. Whatever the
// bytes, it must not panic, and it may pass them only if their event lines are exactly the
// original's first ones: the checkpoints' signatures pin every event line before them.
func FuzzVerifySigned(f *testing.F) {
	dir := f.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	// A fixed seed, so that the corpus stays meaningful from one run to the next.
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("5a", 32)), 0o600); err != nil {
		f.Fatal(err)
	}
	pub, err := LoadPublicKey(keyFile)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "audit.jsonl")
	s, err := Open(Options{Path: path, SigningKeyFile: keyFile, CheckpointEvents: 3})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 7 {
		ev := testEvent(i)
		ev.ID, ev.Time = fmt.Sprintf("ev-%d", i), time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		ev.RequestID, ev.Stage = fmt.Sprintf("r%d", i/2), []Stage{StageDecision, StageCompletion}[i%2]
		if err := s.Record(context.Background(), ev); err != nil {
			f.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(orig)
	lines := bytes.SplitAfter(orig, []byte("\n"))
	f.Add(bytes.Join(withoutCheckpoints(lines[:len(lines)-1]), nil))
	f.Add(bytes.Join(lines[:5], nil))
	var origEvents [][]byte
	for _, l := range lines {
		if len(l) > 0 && !isCheckpoint(l) {
			origEvents = append(origEvents, l)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _ = Verify([]string{p}, nil)
		r, err := Verify([]string{p}, pub)
		if err != nil {
			return
		}
		if r.UnsignedTail != 0 || r.Events > 0 && r.LastSignedSeq == 0 {
			t.Fatalf("verified with an unsigned tail: %+v", r)
		}
		var got [][]byte
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			var h lineHead
			if len(l) > 0 && jsonUnmarshal(l, &h) == nil && h.Kind != event.KindCheckpoint {
				got = append(got, l)
			}
		}
		if len(got) > len(origEvents) {
			t.Fatalf("verified %d event lines, the signed log has %d", len(got), len(origEvents))
		}
		for i := range got {
			if !bytes.Equal(got[i], origEvents[i]) {
				t.Fatalf("verified event line %d that is not the signed one:\n%s\nwant\n%s", i+1, got[i], origEvents[i])
			}
		}
	})
}
