package audit

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Red team (held): decisions and completions from many goroutines, with checkpoint ticks, rotation and a
// Close racing the records: nothing hangs, and every record whose Record returned nil
// (completions included) is in the files, which verify sealed.
func TestCompletionStressWithCloseTickRotation(t *testing.T) {
	for _, fsync := range []string{FsyncGroup, FsyncNever, FsyncInterval} {
		t.Run(fsync, func(t *testing.T) {
			keyFile, pub := testKey(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "a.jsonl")
			s, err := Open(Options{Path: path, SigningKeyFile: keyFile, Fsync: fsync, RotateBytes: 64 << 10,
				CheckpointEvents: 13, CheckpointInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var ok atomic.Int64
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Go(func() {
					for i := 0; ; i++ {
						st := StageDecision
						if i%3 != 0 {
							st = StageCompletion
						}
						ev := stagedEvent(i, st)
						ev.SandboxID = string(rune('a' + w))
						err := s.Record(context.Background(), ev)
						if errors.Is(err, ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("Record: %v", err)
							return
						}
						ok.Add(1)
						if i%50 == 0 {
							time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
						}
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			done := make(chan error, 1)
			go func() { done <- s.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Close hung")
			}
			wg.Wait()
			files, _ := filepath.Glob(path + "*")
			sort.Strings(files)
			// the live file last
			for i, f := range files {
				if f == path {
					files = append(append(files[:i:i], files[i+1:]...), path)
					break
				}
			}
			r, err := VerifyFiles(VerifyOptions{Paths: files, PublicKey: pub, RequireSealed: true})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if int64(r.Events) != ok.Load() {
				t.Fatalf("%d events in the files, %d Records returned nil", r.Events, ok.Load())
			}
			t.Logf("%d events, %d files", r.Events, len(files))
		})
	}
}
