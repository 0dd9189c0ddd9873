package audit

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// openFile opens the live file for appending. A file that ends mid-line is refused.
func (s *Sink) openFile() error {
	if _, _, err := stateOf(s.opts.Path); err != nil {
		return err
	}
	f, err := os.OpenFile(s.opts.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("open audit log: %w", err)
	}
	s.f, s.size = f, st.Size()
	return nil
}

// rotate seals the live file with a final checkpoint (when signing), fsyncs it, renames it
// to Path.<UTC timestamp> and starts a new one. The chain continues into the new file.
func (s *Sink) rotate() error {
	if err := s.seal(); err != nil {
		return fmt.Errorf("seal audit log before rotation: %w", err)
	}
	err := s.f.Sync()
	err = errors.Join(err, s.f.Close())
	s.f = nil
	if err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	s.syncW = s.ok.chain.seq
	dst := s.opts.Path + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	for i := 1; fileExists(dst); i++ {
		dst = fmt.Sprintf("%s.%s-%d", s.opts.Path, time.Now().UTC().Format("20060102T150405.000000000Z"), i)
	}
	if err := os.Rename(s.opts.Path, dst); err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	if err := s.openFile(); err != nil {
		return err
	}
	syncDir(filepath.Dir(s.opts.Path))
	s.log.Info("audit log rotated", "to", dst, "seq", s.ok.chain.seq)
	return nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// syncWindow is how long a written line may wait for its fsync: 0 when Record fsyncs
// itself (always) or never does.
func (s *Sink) syncWindow() time.Duration {
	switch s.opts.Fsync {
	case FsyncGroup:
		return s.opts.GroupWindow
	case FsyncInterval:
		return s.opts.FsyncInterval
	}
	return 0
}

// syncLoop is the deferred fsync (group, interval): woken by the first line written while
// no fsync is scheduled, it waits the window, so that the lines written meanwhile share one
// fsync, and fsyncs. A line is thus fsynced at most window after it is written, plus the
// time fsync takes (and, for a line written while one runs, the rest of that one).
func (s *Sink) syncLoop(window time.Duration) {
	defer s.wg.Done()
	t := time.NewTimer(window)
	t.Stop()
	for {
		select {
		case <-s.stop:
			return // Close fsyncs
		case <-s.kick:
		}
		t.Reset(window)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		s.syncNow()
	}
}

// syncNow fsyncs the lines written so far. It does not take the writer role: writes go on
// meanwhile (fsync covers the whole file, whichever descriptor asks). Lines written while
// it runs get the next fsync scheduled as it ends, so that at any time every written line
// is fsynced or has an fsync scheduled (armed).
func (s *Sink) syncNow() {
	s.mu.Lock()
	f, upto := s.syncFile, s.written
	s.mu.Unlock()
	var err error
	if f != nil && upto > 0 {
		err = f.Sync()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, os.ErrClosed) && s.syncFile != f:
		// Rotated meanwhile: the old file was fsynced before it was closed.
	case err != nil:
		s.syncErr = err
		s.failed = fmt.Errorf("fsync audit log: %w", err)
		s.log.Error("audit fsync failed; fsyncing every write until one succeeds", "err", err)
	default:
		s.synced, s.syncErr = max(s.synced, upto), nil
	}
	s.armed = false
	if s.written > s.synced && s.syncErr == nil {
		s.armed = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Sink) tickEvery() time.Duration {
	var d time.Duration
	pick := func(x time.Duration) {
		if x > 0 && (d == 0 || x < d) {
			d = x
		}
	}
	if s.key != nil {
		pick(s.opts.CheckpointInterval)
	}
	if s.opts.OnFailure == OnFailureBuffer {
		pick(time.Second)
	}
	return d
}

// loop writes time-based checkpoints and retries the buffer.
func (s *Sink) loop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.tick()
		}
	}
}

func (s *Sink) tick() {
	s.acquire()
	defer s.release()
	if len(s.buf) > 0 {
		if err := s.flushBuffer(); err != nil {
			return
		}
	}
	if s.key == nil || s.opts.CheckpointInterval <= 0 || s.at.sinceCP == 0 || time.Since(s.at.lastCP) < s.opts.CheckpointInterval {
		return
	}
	if s.f == nil {
		if err := s.openFile(); err != nil {
			s.log.Error("audit checkpoint failed", "err", err)
			return
		}
	}
	_, err := s.putCheckpoint()
	if err == nil {
		err = s.flush()
	}
	if err == nil {
		err = s.syncInline()
	}
	if err != nil {
		s.log.Error("audit checkpoint failed", "err", err)
	}
}

func signCheckpoint(key ed25519.PrivateKey, c checkpointLine) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, checkpointMessage(c)))
}

func marshalCheckpoint(c checkpointLine) []byte {
	b, _ := json.Marshal(c) // only strings and numbers: cannot fail
	return append(b, '\n')
}

// CheckResume reads, and never writes, what Open reads of the log at path before it
// appends: the last line of the log (or of its rotated siblings) where the chain goes on.
// Its error is the one Open would return (a last line that is not an audit line, a file
// that cannot be read). `airlock proxy --check` runs it.
func CheckResume(path string) error {
	_, err := resumeState(path)
	return err
}
