package audit

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/internal/event"
)

func TestLineFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path})
	record(t, s, 0, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (no checkpoints without a key)", len(lines))
	}
	var first, second map[string]any
	if err := json.Unmarshal(lines[0], &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lines[1], &second); err != nil {
		t.Fatal(err)
	}
	if first["seq"] != 1.0 || first["prev"] != Genesis {
		t.Errorf("first line: got seq %v prev %v, want 1 and genesis", first["seq"], first["prev"])
	}
	if second["seq"] != 2.0 || second["prev"] != lineHash(lines[0]) {
		t.Errorf("second line: got seq %v prev %v, want 2 and hash of line 1", second["seq"], second["prev"])
	}
	for _, k := range []string{"time", "id", "kind", "sandbox", "host", "decision", "rule"} {
		if first[k] == nil || first[k] == "" {
			t.Errorf("first line lacks %q: %s", k, lines[0])
		}
	}
	if !strings.HasPrefix(string(lines[0]), `{"seq":1,"prev":"`) {
		t.Errorf("line does not start with seq and prev: %s", lines[0])
	}
}

func TestReopenContinuesChain(t *testing.T) {
	keyFile, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "a.jsonl")
	for round := range 3 {
		s, err := Open(Options{Path: path, SigningKeyFile: keyFile})
		if err != nil {
			t.Fatal(err)
		}
		record(t, s, round*5, 5)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Verify([]string{path}, pub)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if r.Events != 15 || r.Checkpoints != 3 || !r.Sealed {
		t.Errorf("got %d events %d checkpoints sealed %v, want 15, 3, true", r.Events, r.Checkpoints, r.Sealed)
	}
}

func TestRotationKeepsChain(t *testing.T) {
	keyFile, pub := testKey(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, RotateBytes: 2000, CheckpointEvents: -1})
	record(t, s, 0, 30)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening after rotation continues from the live file; with it removed, from the newest rotated one.
	files, _ := filepath.Glob(path + "*")
	if len(files) < 3 {
		t.Fatalf("got %d files, want at least 3 after rotation: %v", len(files), files)
	}
	for _, f := range files {
		st, _ := os.Stat(f)
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over RotateBytes 2000", f, st.Size())
		}
	}
	r, err := VerifyFiles(VerifyOptions{Paths: files, PublicKey: pub, RequireSealed: true})
	if err != nil {
		t.Fatalf("Verify across files: %v", err)
	}
	if r.Events != 30 || len(r.Files) != len(files) {
		t.Errorf("got %d events in %d files, want 30 in %d", r.Events, len(r.Files), len(files))
	}
	if r.Files[len(r.Files)-1].Path != path {
		t.Errorf("got last file %s, want the live one %s", r.Files[len(r.Files)-1].Path, path)
	}

	// A rotated file removed from the middle is caught at the next file's first line.
	var rotated []string
	for _, f := range files {
		if f != path {
			rotated = append(rotated, f)
		}
	}
	_, err = Verify(append([]string{path}, rotated[0]), pub)
	if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("got %v, want a gap break when a middle file is left out", err)
	}

	// A rotated file cut at a line boundary is caught by the next file's prev.
	lines := readLines(t, rotated[0])
	writeLines(t, rotated[0], lines[:len(lines)-1])
	if _, err := VerifyFiles(VerifyOptions{Paths: files, PublicKey: pub}); !errors.Is(err, ErrBroken) {
		t.Errorf("got %v, want ErrBroken for a truncated rotated file", err)
	}
}

func TestResumeFromRotatedSibling(t *testing.T) {
	keyFile, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, RotateBytes: 1500})
	record(t, s, 0, 12)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash right after rotation: the live file is empty.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + ".*")
	s2 := openSink(t, Options{Path: path, SigningKeyFile: keyFile})
	record(t, s2, 12, 2)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// The last rotated file (sealed) plus the new live file chain up.
	if _, err := VerifyFiles(VerifyOptions{Paths: append(files, path), PublicKey: pub, AllowPartial: true}); err != nil {
		t.Fatalf("Verify after resume: %v", err)
	}
}

func TestOpenRefusesIncompleteLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	if err := os.WriteFile(path, []byte(`{"seq":1,"prev":"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Path: path}); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("got %v, want an incomplete-line error", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{}, "path"},
		{Options{Path: "x", Fsync: "sometimes"}, "fsync"},
		{Options{Path: "x", OnFailure: "ignore"}, "on_failure"},
		{Options{Path: "x", RotateBytes: -1}, "rotate_bytes"},
		{Options{Path: "x", SigningKeyFile: "/nonexistent/key"}, "signing key"},
	}
	for _, tt := range tests {
		_, err := Open(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%+v): got %v, want error naming %q", tt.o, err, tt.want)
		}
	}
}

func TestBlockModeFailsWhenDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	s := openSink(t, Options{Path: "/dev/full"})
	err := s.Record(context.Background(), testEvent(1))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
}

func TestBufferModeIsBounded(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	s := openSink(t, Options{Path: "/dev/full", OnFailure: OnFailureBuffer, BufferEvents: 3})
	for i := range 3 {
		if err := s.Record(context.Background(), testEvent(i)); err != nil {
			t.Fatalf("event %d: got %v, want nil while the buffer has room", i, err)
		}
	}
	err := s.Record(context.Background(), testEvent(3))
	if !errors.Is(err, ErrBufferFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ErrBufferFull wrapping ENOSPC", err)
	}
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "3 buffered events") {
		t.Errorf("Close: got %v, want a report of 3 unwritten events", err)
	}
}

// A sink whose file descriptor breaks refuses events, then recovers by reopening the file;
// buffered events are written in order and the chain stays intact.
func TestRecoversAfterWriteFailure(t *testing.T) {
	for _, mode := range []string{OnFailureBlock, OnFailureBuffer} {
		t.Run(mode, func(t *testing.T) {
			keyFile, pub := testKey(t)
			path := filepath.Join(t.TempDir(), "a.jsonl")
			s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, OnFailure: mode})
			record(t, s, 0, 2)
			s.acquire()
			_ = s.f.Close() // the next write fails with "file already closed"
			s.release()
			err := s.Record(context.Background(), testEvent(2))
			if mode == OnFailureBlock && !errors.Is(err, os.ErrClosed) {
				t.Fatalf("got %v, want ErrClosed", err)
			}
			if mode == OnFailureBuffer && err != nil {
				t.Fatalf("got %v, want nil (buffered)", err)
			}
			record(t, s, 3, 1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Verify([]string{path}, pub)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := 3
			if mode == OnFailureBuffer {
				want = 4
			}
			if r.Events != want {
				t.Errorf("got %d events, want %d", r.Events, want)
			}
		})
	}
}

func TestRecordAfterCloseAndReservedKind(t *testing.T) {
	s := openSink(t, Options{Path: filepath.Join(t.TempDir(), "a.jsonl")})
	if err := s.Record(context.Background(), &Event{Kind: event.KindCheckpoint}); err == nil {
		t.Error("got nil for a checkpoint event, want an error")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(context.Background(), testEvent(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("got %v, want ErrClosed", err)
	}
}

// The proxy refuses traffic while Healthy reports an error: it must follow Record.
func TestHealthyFollowsWriteFailureAndRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path})
	record(t, s, 0, 1)
	if err := s.Healthy(); err != nil {
		t.Fatalf("healthy sink: %v", err)
	}
	s.acquire()
	_ = s.f.Close()
	s.release()
	if err := s.Record(context.Background(), testEvent(1)); err == nil {
		t.Fatal("write on a closed file succeeded")
	}
	if err := s.Healthy(); err == nil {
		t.Fatal("Healthy = nil after a failed write; the proxy would let traffic through unaudited")
	}
	record(t, s, 2, 1) // the sink reopens the file
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy after recovery: %v", err)
	}
	s.Close()
	if err := s.Healthy(); !errors.Is(err, ErrClosed) {
		t.Errorf("Healthy after Close = %v, want ErrClosed", err)
	}
}
