package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerifyIntactLog(t *testing.T) {
	path, pub := writeLog(t, 10, Options{CheckpointEvents: 4})
	r, err := Verify([]string{path}, pub)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// 10 events, checkpoints after events 4 and 8, and the final one from Close.
	if r.Events != 10 || r.Checkpoints != 3 || !r.Sealed || r.UnsignedTail != 0 {
		t.Errorf("got events=%d checkpoints=%d sealed=%v tail=%d, want 10, 3, true, 0",
			r.Events, r.Checkpoints, r.Sealed, r.UnsignedTail)
	}
	if r.LastSignedSeq != 13 {
		t.Errorf("got last signed seq %d, want 13", r.LastSignedSeq)
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	tests := []struct {
		name     string
		tamper   func(lines [][]byte) [][]byte
		wantLine int
		wantText string
	}{
		{"edited line", func(l [][]byte) [][]byte {
			l[2] = bytes.Replace(l[2], []byte(`"decision":"allow"`), []byte(`"decision":"deny"`), 1)
			return l
		}, 4, "line (3) was altered"},
		{"deleted line", func(l [][]byte) [][]byte {
			return append(l[:3:3], l[4:]...)
		}, 4, "1 line(s) missing"},
		{"reordered lines", func(l [][]byte) [][]byte {
			l[3], l[4] = l[4], l[3]
			return l
		}, 4, "missing"},
		{"truncated mid-line", func(l [][]byte) [][]byte {
			l[6] = l[6][:10]
			return l[:7]
		}, 7, "incomplete last line"},
		{"deleted first line", func(l [][]byte) [][]byte {
			return l[1:]
		}, 1, "does not start at the beginning"},
		{"forged signature", func(l [][]byte) [][]byte {
			for i, x := range l {
				if bytes.Contains(x, []byte(`"kind":"checkpoint"`)) {
					l[i] = forgeSig(t, x)
					break
				}
			}
			return l
		}, 5, "signature does not verify"},
		{"appended unsigned line after seal", func(l [][]byte) [][]byte {
			return append(l, []byte(`{"seq":99,"prev":"x","kind":"request"}`+"\n"))
		}, 14, "seq jumps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, pub := writeLog(t, 10, Options{CheckpointEvents: 4})
			writeLines(t, path, tt.tamper(readLines(t, path)))
			r, err := Verify([]string{path}, pub)
			if !errors.Is(err, ErrBroken) {
				t.Fatalf("got err %v, want ErrBroken", err)
			}
			b := r.Breaks[0]
			if b.Line != tt.wantLine || !strings.Contains(b.Problem, tt.wantText) {
				t.Errorf("got first break %q at line %d, want line %d containing %q", b.Problem, b.Line, tt.wantLine, tt.wantText)
			}
			var out bytes.Buffer
			if err := VerifyAndReport(&out, VerifyOptions{Paths: []string{path}, PublicKey: pub}); err == nil {
				t.Error("VerifyAndReport returned nil for a broken log")
			}
			if !strings.Contains(out.String(), "BROKEN") || !strings.Contains(out.String(), path) {
				t.Errorf("report does not say BROKEN with the file:\n%s", out.String())
			}
		})
	}
}

// forgeSig re-signs a checkpoint line with another key but keeps the original key_id.
func forgeSig(t *testing.T, line []byte) []byte {
	t.Helper()
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var h lineHead
	if err := jsonUnmarshal(line, &h); err != nil {
		t.Fatal(err)
	}
	c := checkpointLine{Seq: h.Seq, Hash: h.Hash, V: h.V, Time: h.Time, Final: h.Final}
	return bytes.Replace(line, []byte(h.Sig), []byte(signCheckpoint(other, c)), 1)
}

// A cut at a line boundary after the last checkpoint leaves event lines that no signature
// covers: with the key that is a break naming exactly those lines; without it, the chain
// alone cannot tell, and the report says the log is unsigned.
func TestVerifyTruncatedAtLineBoundary(t *testing.T) {
	path, pub := writeLog(t, 10, Options{CheckpointEvents: 4})
	lines := readLines(t, path)
	writeLines(t, path, lines[:8]) // events 1-4, checkpoint (seq 5), events 5-7 (seq 6-8)
	r, err := Verify([]string{path}, pub)
	if !errors.Is(err, ErrBroken) || r.Sealed {
		t.Fatalf("got err %v sealed %v, want ErrBroken and not sealed", err, r.Sealed)
	}
	b := r.Breaks[0]
	if b.Line != 6 || b.Seq != 6 || r.UnsignedTail != 3 || r.LastSignedSeq != 5 ||
		!strings.Contains(b.Problem, "3 event line(s) from here to the end") || !strings.Contains(b.Problem, ":8, seq 8)") {
		t.Errorf("got break %+v tail %d last signed %d, want line 6 seq 6 naming the 3 lines to :8 seq 8 after seq 5", b, r.UnsignedTail, r.LastSignedSeq)
	}
	r, err = Verify([]string{path}, nil)
	if err != nil {
		t.Fatalf("without a key a cut at a line boundary is not visible: got %v", err)
	}
	var out bytes.Buffer
	r.WriteTo(&out)
	if !strings.Contains(out.String(), "UNSIGNED") || strings.Contains(out.String(), "signed to the end") {
		t.Errorf("report without a key must say the log is unsigned:\n%s", out.String())
	}
	r, err = VerifyFiles(VerifyOptions{Paths: []string{path}, RequireSealed: true})
	if !errors.Is(err, ErrBroken) || r.Breaks[0].Line != 8 {
		t.Errorf("RequireSealed: got %v (%+v), want a break at line 8", err, r.Breaks)
	}
}

func TestVerifyWrongKey(t *testing.T) {
	path, _ := writeLog(t, 3, Options{})
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify([]string{path}, other)
	if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "not the given key") {
		t.Errorf("got %v, want a key mismatch break", err)
	}
}

func TestVerifyWithoutKey(t *testing.T) {
	path, _ := writeLog(t, 3, Options{})
	r, err := Verify([]string{path}, nil)
	if err != nil || r.SignaturesChecked {
		t.Fatalf("got err %v checked %v, want nil and false", err, r.SignaturesChecked)
	}
	var out bytes.Buffer
	if _, err := r.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "not checked") || !strings.Contains(out.String(), "OK") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestVerifyMissingFile(t *testing.T) {
	_, err := Verify([]string{filepath.Join(t.TempDir(), "nope")}, nil)
	if err == nil || errors.Is(err, ErrBroken) {
		t.Errorf("got %v, want an I/O error", err)
	}
	if _, err := Verify(nil, nil); err == nil {
		t.Error("got nil for no files")
	}
}

// Logs signed by an older airlock (version 1 checkpoints, whose final flag was not signed)
// still verify, but do not count as sealed; the next Close seals them with a version 2
// checkpoint.
func TestVersion1CheckpointsVerifyButDoNotSeal(t *testing.T) {
	keyFile, pub := testKey(t)
	key, err := LoadSigningKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, CheckpointEvents: 2})
	record(t, s, 0, 4)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the checkpoints as version 1 wrote them, keeping the chain as it would have been.
	lines := readLines(t, path)
	for i := range lines {
		lines = rechain(t, lines, i, true)
		if !isCheckpoint(lines[i]) {
			continue
		}
		var h lineHead
		if err := jsonUnmarshal(lines[i], &h); err != nil {
			t.Fatal(err)
		}
		l := bytes.Replace(lines[i], []byte(`"v":2,`), nil, 1)
		lines[i] = bytes.Replace(l, []byte(h.Sig), []byte(signCheckpoint(key, checkpointLine{Seq: h.Seq, Hash: h.Hash, V: 1})), 1)
	}
	writeLines(t, path, lines)
	r, err := Verify([]string{path}, pub)
	if err != nil || r.Sealed || r.UnsignedTail != 0 {
		t.Fatalf("version 1 log: %v, sealed %v, tail %d; want verified, not sealed, no tail", err, r.Sealed, r.UnsignedTail)
	}
	s = openSink(t, Options{Path: path, SigningKeyFile: keyFile})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := VerifyFiles(VerifyOptions{Paths: []string{path}, PublicKey: pub, RequireSealed: true}); err != nil || !r.Sealed {
		t.Errorf("after a Close by this version: %v, sealed %v", err, r.Sealed)
	}
}
