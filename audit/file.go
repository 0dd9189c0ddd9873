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

// openFileLocked opens the live file for appending. A file that ends mid-line is refused.
func (s *Sink) openFileLocked() error {
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

// rotateLocked seals the live file with a final checkpoint (when signing), renames it to
// Path.<UTC timestamp> and starts a new one. The chain continues into the new file.
func (s *Sink) rotateLocked() error {
	if s.key != nil {
		if err := s.writeRawLocked(s.checkpointLine(true)); err != nil {
			return fmt.Errorf("seal audit log before rotation: %w", err)
		}
		s.sinceCP, s.lastCP = 0, time.Now()
	}
	err := s.f.Sync()
	err = errors.Join(err, s.f.Close())
	s.f = nil
	if err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	dst := s.opts.Path + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	for i := 1; fileExists(dst); i++ {
		dst = fmt.Sprintf("%s.%s-%d", s.opts.Path, time.Now().UTC().Format("20060102T150405.000000000Z"), i)
	}
	if err := os.Rename(s.opts.Path, dst); err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	if err := s.openFileLocked(); err != nil {
		return err
	}
	syncDir(filepath.Dir(s.opts.Path))
	s.log.Info("audit log rotated", "to", dst, "seq", s.chain.seq)
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

func (s *Sink) tickEvery() time.Duration {
	var d time.Duration
	pick := func(x time.Duration) {
		if x > 0 && (d == 0 || x < d) {
			d = x
		}
	}
	if s.opts.Fsync == FsyncInterval {
		pick(s.opts.FsyncInterval)
	}
	if s.key != nil {
		pick(s.opts.CheckpointInterval)
	}
	if s.opts.OnFailure == OnFailureBuffer {
		pick(time.Second)
	}
	return d
}

// loop syncs (Fsync "interval"), writes time-based checkpoints and retries the buffer.
func (s *Sink) loop(every time.Duration) {
	defer close(s.done)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		if err := s.flushLocked(); err != nil {
			return
		}
	}
	if s.key != nil && s.opts.CheckpointInterval > 0 && s.sinceCP > 0 && time.Since(s.lastCP) >= s.opts.CheckpointInterval {
		if err := s.checkpointLocked(); err != nil {
			s.log.Error("audit checkpoint failed", "err", err)
		}
	}
	if s.dirty && s.f != nil {
		if err := s.f.Sync(); err != nil {
			s.log.Error("audit fsync failed", "err", err)
			return
		}
		s.dirty = false
	}
}

func signCheckpoint(key ed25519.PrivateKey, seq uint64, hash string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, checkpointMessage(seq, hash)))
}

func marshalCheckpoint(c checkpointLine) []byte {
	b, _ := json.Marshal(c) // only strings and numbers: cannot fail
	return append(b, '\n')
}
