package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("audit sink is closed")

// ErrBufferFull is returned in buffer mode once the file cannot be written and the buffer
// holds BufferEvents events: the proxy must refuse traffic from then on.
var ErrBufferFull = errors.New("audit buffer is full")

// Sink writes events to a hash-chained JSON Lines file (see Genesis and checkpointLine for
// the format). It is safe for concurrent use and implements proxy.Auditor.
//
// Writes are group-committed. Events recorded while the file is busy queue in one batch;
// whichever caller next finds the file free takes the writer role, gives the batch its
// chain positions (so lines are in the order they were queued), writes it with one
// write(2) (and, under fsync "always", one fsync), and wakes the others with their
// outcome. Record returns only once its event's line is in the file (and fsynced under
// "always"): an error means the line is not there (in block mode) and the caller must act
// as if nothing had been recorded.
type Sink struct {
	opts  Options
	log   *slog.Logger
	key   ed25519.PrivateKey
	keyID string

	mu        sync.Mutex
	cond      sync.Cond // signalled when the writer role is released to acquire
	pending   *batch    // events queued for the next write
	writing   bool      // some goroutine holds the writer role
	acquirers int       // goroutines waiting in acquire
	closed    bool
	failed    error    // the last batch's first error; nil once one is written whole
	written   uint64   // seq of the last line written
	synced    uint64   // seq of the last line known to be fsynced
	syncFile  *os.File // the file that holds line `written`
	armed     bool     // a deferred fsync is scheduled (group, interval)
	syncErr   error    // a deferred fsync failed: batches fsync inline until one succeeds

	// Owned by the goroutine holding the writer role.
	f      *os.File // nil after a failure that needs the file reopened
	size   int64    // bytes of f known written
	at     position // where the chain stands, including lines in line not yet written
	ok     position // where it stood after the last successful write
	line   []byte   // lines built, not yet written
	buf    [][]byte // buffer mode: encoded events accepted but not yet written
	syncW  uint64   // seq of the last line this writer fsynced
	writes int      // write(2) calls, for tests

	kick chan struct{} // wakes the deferred fsync
	stop chan struct{}
	wg   sync.WaitGroup
}

// position is the writer's chain state: the last line and the checkpoint bookkeeping.
type position struct {
	chain   chainState
	sinceCP int       // event lines since the last checkpoint
	lastCP  time.Time // when the last checkpoint was written
}

// batch is the events queued while the writer role was held; all get written together.
// Its callers wait for done (closed once errs is set) or lead (the writer role handed to
// one of them to write the batch), so that a write wakes only the callers it concerns.
type batch struct {
	bodies [][]byte // encoded events, in queue order
	errs   []error  // set by the writer, one per body
	done   chan struct{}
	lead   chan struct{}
	// A caller that finds the file free and nothing queued writes its event alone, in a
	// batch nobody else sees (no channels): one allocation instead of five.
	one    [1][]byte
	oneErr [1]error
}

// aloneBatch is the batch of a caller that writes at once, its event the only one.
func aloneBatch(body []byte) *batch {
	b := &batch{}
	b.one[0] = body
	b.bodies = b.one[:]
	return b
}

func newBatch() *batch {
	return &batch{done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

// Open opens or creates the file at opts.Path and continues the chain found there (or in
// its newest rotated sibling). It fails when the file ends in an incomplete line: verify
// the log and move it aside.
func Open(opts Options) (*Sink, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{opts: opts, log: opts.Logger.With("component", "audit"), kick: make(chan struct{}, 1), stop: make(chan struct{})}
	s.cond.L = &s.mu
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
	s.at = position{chain: st, lastCP: time.Now()}
	s.ok = s.at
	if err := s.openFile(); err != nil {
		return nil, err
	}
	s.written, s.synced, s.syncW, s.syncFile = st.seq, st.seq, st.seq, s.f
	s.log.Info("audit log open", "path", opts.Path, "seq", st.seq, "signed", s.key != nil,
		"fsync", opts.Fsync, "on_failure", opts.OnFailure)
	if w := s.syncWindow(); w > 0 {
		s.wg.Add(1)
		go s.syncLoop(w)
	}
	if tick := s.tickEvery(); tick > 0 {
		s.wg.Add(1)
		go s.loop(tick)
	}
	return s, nil
}

// Record appends one event and returns once its line is written (see Sink). The event is
// sanitized first (as Event.Sanitized does); an empty Time or ID is filled in. In block mode a
// failure to write is returned; in buffer mode the event is kept in memory until the file
// works again, and an error is returned only once the buffer is full.
func (s *Sink) Record(ctx context.Context, ev Event) error {
	if ev.Kind == event.KindCheckpoint {
		return fmt.Errorf("audit: event kind %q is reserved", event.KindCheckpoint)
	}
	ev = ev.scrubbed() // encoded below, before Record returns: no copy of the maps needed
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.ID == "" {
		ev.ID = NewID()
	}
	body, err := eventBody(ev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	b, i := s.pending, 0
	switch {
	case b == nil && !s.writing:
		b = aloneBatch(body)
	case b == nil:
		b = newBatch()
		s.pending = b
		fallthrough
	default:
		i = len(b.bodies)
		b.bodies = append(b.bodies, body)
	}
	lead := !s.writing
	if lead {
		s.pending, s.writing = nil, true
	}
	s.mu.Unlock()
	if !lead {
		select {
		case <-b.done:
			return b.errs[i]
		case <-b.lead: // the writer role, handed on with b already taken from pending
		}
	}
	s.commit(b)
	s.mu.Lock()
	s.failed = nil
	for _, err := range b.errs {
		if err != nil {
			s.failed = err
			break
		}
	}
	if b.done != nil {
		close(b.done)
	}
	s.releaseLocked()
	s.mu.Unlock()
	return b.errs[i]
}

// Healthy reports whether events are being written (buffered within bounds counts as
// written): nil, or why the last write failed. It is for readiness probes and operators;
// the proxy gates each request on its own record's Record result, never on this.
func (s *Sink) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.failed
}

// Close writes what is queued and buffered, a final signed checkpoint (when a key is set,
// sealing the file), fsyncs and closes the file. It reports buffered events that could not
// be written.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()

	s.acquire()
	s.mu.Lock()
	b := s.pending
	s.pending = nil
	s.mu.Unlock()
	var errs []error
	if b != nil {
		s.commit(b)
	}
	if len(s.buf) > 0 {
		if err := s.flushBuffer(); err != nil {
			errs = append(errs, fmt.Errorf("audit: %d buffered events were not written: %w", len(s.buf), err))
		}
	}
	if s.f == nil {
		if err := s.openFile(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.f != nil {
		if err := s.seal(); err != nil {
			errs = append(errs, fmt.Errorf("write final audit checkpoint: %w", err))
		}
		if err := s.f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("fsync audit log: %w", err))
		} else {
			s.syncW = s.ok.chain.seq
		}
		errs = append(errs, s.f.Close())
		s.f = nil
	}
	s.mu.Lock()
	if b != nil {
		close(b.done)
	}
	s.releaseLocked()
	s.mu.Unlock()
	return errors.Join(errs...)
}

// acquire takes the writer role for work other than a batch (ticks, Close). A writer
// releasing the role gives it to acquire before the next batch.
func (s *Sink) acquire() {
	s.mu.Lock()
	s.acquirers++
	for s.writing {
		s.cond.Wait()
	}
	s.acquirers--
	s.writing = true
	s.mu.Unlock()
}

func (s *Sink) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

// releaseLocked publishes what the writer did (written, fsynced), schedules a deferred
// fsync when lines await one, and hands the writer role on: to acquire if it waits, else
// to a caller of the batch queued meanwhile.
func (s *Sink) releaseLocked() {
	s.written = s.ok.chain.seq
	if s.syncW > s.synced {
		s.synced = s.syncW
	}
	if s.f != nil {
		s.syncFile = s.f
	}
	if s.written > s.synced && !s.armed && s.syncWindow() > 0 {
		s.armed = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	switch {
	case s.acquirers > 0:
		s.writing = false
		s.cond.Broadcast()
	case s.pending != nil:
		next := s.pending
		s.pending = nil
		next.lead <- struct{}{} // one of its callers writes it; the role stays taken
	default:
		s.writing = false
	}
}

// commit writes a batch (after what the buffer holds) and sets each event's outcome.
func (s *Sink) commit(b *batch) {
	if len(b.bodies) == 1 {
		b.errs = b.oneErr[:]
	} else {
		b.errs = make([]error, len(b.bodies))
	}
	if len(s.buf) > 0 {
		if err := s.flushBuffer(); err != nil {
			s.fail(b, 0, err)
			return
		}
	}
	if n, err := s.write(b.bodies); err != nil {
		s.fail(b, n, err)
		return
	}
	if err := s.syncInline(); err != nil {
		// Written, but not durable as "always" promises: the callers must not go on. (Not
		// buffered: the lines are in the file.)
		for i := range b.errs {
			b.errs[i] = err
		}
	}
}

// fail sets the outcome of the batch's events from index from on: buffered in buffer mode
// (while there is room), the write error otherwise.
func (s *Sink) fail(b *batch, from int, cause error) {
	for i := from; i < len(b.bodies); i++ {
		if s.opts.OnFailure != OnFailureBuffer {
			b.errs[i] = fmt.Errorf("write audit event: %w", cause)
			continue
		}
		if len(s.buf) >= s.opts.BufferEvents {
			b.errs[i] = fmt.Errorf("%w (%d events) after write failure: %w", ErrBufferFull, len(s.buf), cause)
			continue
		}
		if len(s.buf) == 0 {
			s.log.Error("audit log write failed; buffering events", "err", cause, "limit", s.opts.BufferEvents)
		}
		s.buf = append(s.buf, b.bodies[i])
	}
}

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
		flushed, err := s.put(func(dst []byte, seq uint64, prev string) []byte {
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
func (s *Sink) put(build func(dst []byte, seq uint64, prev string) []byte) (flushed bool, err error) {
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
	s.at.chain = chainState{seq: seq, hash: lineHash(s.line[mark:])}
	return flushed, nil
}

// putCheckpoint queues a periodic checkpoint signing the chain as it stands (see put).
func (s *Sink) putCheckpoint() (bool, error) {
	flushed, err := s.put(func(dst []byte, seq uint64, prev string) []byte {
		return s.appendCheckpoint(dst, seq, prev, false)
	})
	if err == nil {
		s.at.sinceCP, s.at.lastCP = 0, time.Now()
	}
	return flushed, err
}

// appendCheckpoint appends a signed checkpoint line for chain position (seq, prev).
func (s *Sink) appendCheckpoint(dst []byte, seq uint64, prev string, final bool) []byte {
	c := checkpointLine{Seq: seq, Prev: prev, Kind: event.KindCheckpoint, V: checkpointVersion,
		Time: time.Now().UTC().Format(time.RFC3339Nano), Hash: prev, KeyID: s.keyID, Final: final}
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
	s.at = position{chain: chainState{seq: seq, hash: lineHash(s.line[mark:]), final: true}, lastCP: time.Now()}
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

// NewID returns a random 128-bit identifier in hex, as used for event and request ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hexString(b[:])
}
