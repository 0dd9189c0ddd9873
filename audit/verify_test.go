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
	return bytes.Replace(line, []byte(h.Sig), []byte(signCheckpoint(other, h.Seq, h.Hash)), 1)
}

func TestVerifyTruncatedAtLineBoundary(t *testing.T) {
	path, pub := writeLog(t, 10, Options{CheckpointEvents: -1})
	lines := readLines(t, path)
	writeLines(t, path, lines[:5])
	if _, err := Verify([]string{path}, pub); err != nil {
		t.Fatalf("without RequireSealed a cut at a line boundary is not a break: got %v", err)
	}
	r, err := VerifyFiles(VerifyOptions{Paths: []string{path}, PublicKey: pub, RequireSealed: true})
	if !errors.Is(err, ErrBroken) || r.Sealed {
		t.Fatalf("got err %v sealed %v, want ErrBroken and not sealed", err, r.Sealed)
	}
	if r.Breaks[0].Line != 5 {
		t.Errorf("got break at line %d, want 5", r.Breaks[0].Line)
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
