package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("audit sink is closed")

// ErrBufferFull is returned in buffer mode once the file cannot be written and the buffer
// holds BufferEvents events: the proxy must refuse traffic from then on.
var ErrBufferFull = errors.New("audit buffer is full")

// Sink writes events to a hash-chained JSON Lines file (see Genesis and KindCheckpoint for
// the format). It is safe for concurrent use and implements proxy.Auditor.
type Sink struct {
	opts  Options
	log   *slog.Logger
	key   ed25519.PrivateKey
	keyID string

	mu      sync.Mutex
	f       *os.File // nil after a failure that needs the file reopened
	size    int64
	chain   chainState
	dirty   bool
	sinceCP int
	lastCP  time.Time
	buf     []Event
	closed  bool
	failed  error // why the last Record failed; nil once one succeeds

	stop chan struct{}
	done chan struct{}
}

// Open opens or creates the file at opts.Path and continues the chain found there (or in
// its newest rotated sibling). It fails when the file ends in an incomplete line: verify
// the log and move it aside.
func Open(opts Options) (*Sink, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{opts: opts, log: opts.Logger.With("component", "audit"), lastCP: time.Now()}
	if opts.SigningKeyFile != "" {
		k, err := LoadSigningKey(opts.SigningKeyFile)
		if err != nil {
			return nil, err
		}
		s.key, s.keyID = k, KeyID(k.Public().(ed25519.PublicKey))
	}
	st, err := resumeState(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	s.chain = st
	if err := s.openFileLocked(); err != nil {
		return nil, err
	}
	s.log.Info("audit log open", "path", opts.Path, "seq", st.seq, "signed", s.key != nil,
		"fsync", opts.Fsync, "on_failure", opts.OnFailure)
	if tick := s.tickEvery(); tick > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.loop(tick)
	}
	return s, nil
}

// Record appends one event. The event is sanitized first (Event.Sanitized); an empty Time
// or ID is filled in. In block mode any write failure is returned; in buffer mode the
// event is kept in memory until the file works again, and an error is returned only once
// the buffer is full.
func (s *Sink) Record(ctx context.Context, ev Event) error {
	err := s.record(ev)
	s.mu.Lock()
	s.failed = err
	s.mu.Unlock()
	return err
}

// Healthy reports whether events are being written (buffered within bounds counts as
// written): nil, or why the last Record failed. The proxy asks before letting a request
// through, so that it refuses traffic while the audit log cannot be written (fail closed).
// A later successful Record (the proxy records its own refusals) clears it.
func (s *Sink) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.failed
}

func (s *Sink) record(ev Event) error {
	if ev.Kind == KindCheckpoint {
		return fmt.Errorf("audit: event kind %q is reserved", KindCheckpoint)
	}
	ev = ev.Sanitized()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.ID == "" {
		ev.ID = newID()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(s.buf) > 0 {
		if err := s.flushLocked(); err != nil {
			return s.bufferLocked(ev, err)
		}
	}
	if err := s.writeEventLocked(ev); err != nil {
		if s.opts.OnFailure == OnFailureBuffer {
			return s.bufferLocked(ev, err)
		}
		return fmt.Errorf("write audit event: %w", err)
	}
	return nil
}

// Close flushes the buffer, writes a final signed checkpoint (when a key is set), syncs
// and closes the file. It reports buffered events that could not be written.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if len(s.buf) > 0 {
		if err := s.flushLocked(); err != nil {
			errs = append(errs, fmt.Errorf("audit: %d buffered events were not written: %w", len(s.buf), err))
		}
	}
	if s.f == nil {
		if err := s.openFileLocked(); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	if s.key != nil && s.sinceCP > 0 {
		if err := s.writeRawLocked(s.checkpointLine(true)); err != nil {
			errs = append(errs, fmt.Errorf("write final audit checkpoint: %w", err))
		}
	}
	if s.f != nil {
		errs = append(errs, s.f.Sync(), s.f.Close())
		s.f = nil
	}
	return errors.Join(errs...)
}

func (s *Sink) writeEventLocked(ev Event) error {
	err := s.appendLocked(func(seq uint64, prev string) ([]byte, error) { return eventLine(seq, prev, ev) })
	if err != nil {
		return err
	}
	s.sinceCP++
	if s.key != nil && s.opts.CheckpointEvents > 0 && s.sinceCP >= s.opts.CheckpointEvents {
		if err := s.checkpointLocked(); err != nil {
			s.log.Error("audit checkpoint failed", "err", err)
		}
	}
	return nil
}

func (s *Sink) checkpointLocked() error {
	err := s.appendLocked(func(uint64, string) ([]byte, error) { return s.checkpointLine(false), nil })
	if err == nil {
		s.sinceCP, s.lastCP = 0, time.Now()
	}
	return err
}

// appendLocked writes the line that build makes for the chain's next position, rotating
// first when the line would take the file past RotateBytes.
func (s *Sink) appendLocked(build func(seq uint64, prev string) ([]byte, error)) error {
	if s.f == nil {
		if err := s.openFileLocked(); err != nil {
			return err
		}
	}
	line, err := build(s.chain.next())
	if err != nil {
		return err
	}
	if s.opts.RotateBytes > 0 && s.size > 0 && s.size+int64(len(line))+s.sealReserve() > s.opts.RotateBytes {
		if err := s.rotateLocked(); err != nil {
			return err
		}
		if line, err = build(s.chain.next()); err != nil {
			return err
		}
	}
	return s.writeRawLocked(line)
}

// writeRawLocked writes a line that was built for s.chain.next(). On failure it cuts the
// file back to its previous size so no partial line stays; if even that fails, the file is
// closed and reopened on the next write (which refuses a file ending mid-line).
func (s *Sink) writeRawLocked(line []byte) error {
	if s.f == nil {
		return errors.New("audit log is not open")
	}
	seq, _ := s.chain.next()
	_, err := s.f.Write(line)
	if err == nil && s.opts.Fsync == FsyncAlways {
		err = s.f.Sync()
	}
	if err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			_ = s.f.Close()
			s.f = nil
		}
		return err
	}
	s.size += int64(len(line))
	s.chain = chainState{seq: seq, hash: lineHash(line)}
	s.dirty = s.opts.Fsync == FsyncInterval
	return nil
}

// sealReserve is room kept for the final checkpoint that seals a file before rotation
// (a checkpoint line is about 330 bytes), so files stay under RotateBytes.
func (s *Sink) sealReserve() int64 {
	if s.key == nil {
		return 0
	}
	return 360
}

// checkpointLine signs the chain's current position; it must be written next.
func (s *Sink) checkpointLine(final bool) []byte {
	seq, prev := s.chain.next()
	return marshalCheckpoint(checkpointLine{
		Seq: seq, Prev: prev, Kind: KindCheckpoint, Time: time.Now().UTC().Format(time.RFC3339Nano),
		Hash: prev, Sig: signCheckpoint(s.key, seq, prev), KeyID: s.keyID, Final: final,
	})
}

func (s *Sink) bufferLocked(ev Event, cause error) error {
	if len(s.buf) >= s.opts.BufferEvents {
		return fmt.Errorf("%w (%d events) after write failure: %w", ErrBufferFull, len(s.buf), cause)
	}
	if len(s.buf) == 0 {
		s.log.Error("audit log write failed; buffering events", "err", cause, "limit", s.opts.BufferEvents)
	}
	s.buf = append(s.buf, ev)
	return nil
}

func (s *Sink) flushLocked() error {
	for len(s.buf) > 0 {
		if err := s.writeEventLocked(s.buf[0]); err != nil {
			return err
		}
		s.buf[0] = Event{}
		s.buf = s.buf[1:]
	}
	s.buf = nil
	s.log.Info("audit log writable again; buffer flushed")
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
