package audit

import (
	"fmt"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// syncInline fsyncs after a write when Record must not return before it: under "always",
// and after a deferred fsync failed (until one succeeds again).
func (s *Sink) syncInline() error {
	s.mu.Lock()
	inline := s.opts.Fsync == FsyncAlways || s.syncErr != nil
	s.mu.Unlock()
	if !inline || s.f == nil || s.syncW >= s.ok.chain.seq {
		return nil
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("fsync audit log: %w", err)
	}
	s.syncW = s.ok.chain.seq
	s.mu.Lock()
	s.syncErr = nil
	s.mu.Unlock()
	return nil
}

// flushBuffer writes the buffered events; those written leave the buffer.
func (s *Sink) flushBuffer() error {
	n, err := s.write(s.buf)
	for _, b := range s.buf[:n] {
		releaseBody(b)
	}
	clear(s.buf[:n])
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil
	}
	if err != nil {
		return err
	}
	s.log.Info("audit log writable again; buffer flushed")
	return nil
}

// write appends the lines for bodies, with the checkpoints and rotations they make due,
// and reports how many of the bodies are in the file: all of them, unless err is set.
func (s *Sink) write(bodies [][]byte) (int, error) {
	if s.f == nil {
		if err := s.openFile(); err != nil {
			return 0, err
		}
	}
	done, queued := 0, 0
	for _, body := range bodies {
		flushed, err := s.put(func(dst []byte, seq uint64, prev lineSum) []byte {
			return appendLine(dst, seq, prev, body)
		})
		if flushed {
			done, queued = done+queued, 0
		}
		if err != nil {
			return done, err
		}
		s.at.sinceCP++
		queued++
		if s.key != nil && s.opts.CheckpointEvents > 0 && s.at.sinceCP >= s.opts.CheckpointEvents {
			flushed, err := s.putCheckpoint()
			if flushed {
				done, queued = done+queued, 0
			}
			if err != nil {
				return done, err
			}
		}
	}
	if err := s.flush(); err != nil {
		return done, err
	}
	return done + queued, nil
}

// put queues the line that build makes for the chain's next position. When that line
// would take the file past RotateBytes, what is queued is written first and the file
// rotated (flushed reports that), and the line is built again for the new file.
func (s *Sink) put(build func(dst []byte, seq uint64, prev lineSum) []byte) (flushed bool, err error) {
	mark := len(s.line)
	seq, prev := s.at.chain.next()
	s.line = build(s.line, seq, prev)
	if s.rotateDue(mark) {
		s.line = s.line[:mark]
		if err := s.flush(); err != nil {
			return false, err
		}
		if err := s.rotate(); err != nil {
			return true, err
		}
		seq, prev = s.at.chain.next()
		mark, flushed = 0, true
		s.line = build(s.line[:0], seq, prev)
	}
	s.at.chain = chainState{seq: seq, hash: sumLine(s.line[mark:])}
	return flushed, nil
}

// putCheckpoint queues a periodic checkpoint signing the chain as it stands (see put).
func (s *Sink) putCheckpoint() (bool, error) {
	flushed, err := s.put(func(dst []byte, seq uint64, prev lineSum) []byte {
		return s.appendCheckpoint(dst, seq, prev, false)
	})
	if err == nil {
		s.at.sinceCP, s.at.lastCP = 0, time.Now()
	}
	return flushed, err
}

// appendCheckpoint appends a signed checkpoint line for chain position (seq, prev).
func (s *Sink) appendCheckpoint(dst []byte, seq uint64, prev lineSum, final bool) []byte {
	c := checkpointLine{Seq: seq, Prev: string(prev[:]), Kind: event.KindCheckpoint, V: checkpointVersion,
		Time: time.Now().UTC().Format(time.RFC3339Nano), KeyID: s.keyID, Final: final}
	c.Hash = c.Prev
	c.Sig = signCheckpoint(s.key, c)
	return append(dst, marshalCheckpoint(c)...)
}

// rotateDue reports whether the line queued from mark on would take the file past
// RotateBytes (keeping room for the seal), when the file or the queue already holds a line.
func (s *Sink) rotateDue(mark int) bool {
	if s.opts.RotateBytes <= 0 || s.size+int64(mark) == 0 {
		return false
	}
	return s.size+int64(len(s.line))+s.sealReserve() > s.opts.RotateBytes
}

// flush writes the lines built so far with one write(2). On failure it cuts the file back
// to its last good size, so no partial line stays, and the chain back to the last line
// written; if even the cut fails, the file is closed and reopened by the next write (which
// refuses a file ending mid-line).
func (s *Sink) flush() error {
	if len(s.line) == 0 {
		return nil
	}
	_, err := s.f.Write(s.line)
	s.writes++
	if err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			_ = s.f.Close()
			s.f = nil
		}
		s.at = s.ok
		s.line = s.line[:0]
		return err
	}
	s.size += int64(len(s.line))
	s.ok = s.at
	s.line = s.line[:0]
	return nil
}

// seal writes a final checkpoint unless the file already ends in one or is empty (or no
// key is set). It never rotates: it is how a file ends.
func (s *Sink) seal() error {
	if s.key == nil || s.at.chain.seq == 0 || s.at.chain.final {
		return nil
	}
	seq, prev := s.at.chain.next()
	mark := len(s.line)
	s.line = s.appendCheckpoint(s.line, seq, prev, true)
	s.at = position{chain: chainState{seq: seq, hash: sumLine(s.line[mark:]), final: true}, lastCP: time.Now()}
	return s.flush()
}

// sealReserve is room kept for the final checkpoint that seals a file before rotation
// (a checkpoint line is about 370 bytes), so files stay under RotateBytes.
func (s *Sink) sealReserve() int64 {
	if s.key == nil {
		return 0
	}
	return 400
}
