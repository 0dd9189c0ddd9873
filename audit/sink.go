package audit

import (
	"context"
	"crypto/ed25519"
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
	flushing  bool     // a write of pending completion records is scheduled (flushLoop)

	// Owned by the goroutine holding the writer role.
	f      *os.File // nil after a failure that needs the file reopened
	size   int64    // bytes of f known written
	at     position // where the chain stands, including lines in line not yet written
	ok     position // where it stood after the last successful write
	line   []byte   // lines built, not yet written
	buf    [][]byte // buffer mode: encoded events accepted but not yet written
	syncW  uint64   // seq of the last line this writer fsynced
	writes int      // write(2) calls, for tests

	kick  chan struct{} // wakes the deferred fsync
	later chan struct{} // wakes flushLoop: completion records wait in pending
	stop  chan struct{}
	wg    sync.WaitGroup
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
	bodies  [][]byte  // encoded events, in queue order
	errs    []error   // set by the writer, one per body
	waiters int       // callers waiting for this batch's outcome (not deferred completions)
	later   []int     // indexes of the deferred completions (appendLater), whose errors nobody reads
	laterAt time.Time // when the first of them was queued
	done    chan struct{}
	lead    chan struct{}
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
	s := &Sink{opts: opts, log: opts.Logger.With("component", "audit"), kick: make(chan struct{}, 1),
		later: make(chan struct{}, 1), stop: make(chan struct{})}
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
	if opts.Fsync != FsyncAlways {
		s.wg.Add(1)
		go s.flushLoop()
	}
	return s, nil
}

// Record appends one event and returns once its line is written (see Sink). The event is
// sanitized first (as Event.Sanitized does) in a copy: ev itself is neither changed nor
// kept; an empty Time or ID is filled in. In block mode a failure to write is returned; in
// buffer mode the event is kept in memory until the file works again, and an error is
// returned only once the buffer is full.
//
// Events travel by pointer through the recorders in front of the sink (fan-out, refusal
// limit) and are copied only here, in encode, whose frame is gone before the write: an
// event is a few hundred bytes, and a copy per recorder in the request goroutine's frames
// made its stack outgrow its first 8 KiB, which an idle keep-alive connection then kept.
func (s *Sink) Record(ctx context.Context, ev *Event) error {
	if ev.Kind == event.KindCheckpoint {
		return fmt.Errorf("audit: event kind %q is reserved", event.KindCheckpoint)
	}
	body, err := encodeRecord(ev)
	if err != nil {
		return err
	}
	if ev.Stage == StageCompletion && s.opts.Fsync != FsyncAlways {
		return s.appendLater(body)
	}
	return s.append(body)
}

// encodeRecord is the line body of a sanitized copy of ev, its Time and ID filled in.
// The copy comes from a pool, not the stack: an Event is large, and this is the deepest
// point of a request's stack (recorded from inside the upstream round trip), where a copy
// in the frame made the request goroutine's stack outgrow 8 KiB, which an idle keep-alive
// connection then keeps.
func encodeRecord(in *Event) ([]byte, error) {
	ev := eventPool.Get().(*Event)
	defer func() {
		*ev = Event{} // keeps nothing of the event alive in the pool
		eventPool.Put(ev)
	}()
	*ev = *in
	ev.scrub() // encoded here: no copy of the maps needed
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.ID != "" {
		return eventBody(ev, nil)
	}
	var id [16]byte
	randomID(&id)
	return eventBody(ev, &id)
}

var eventPool = sync.Pool{New: func() any { return new(Event) }}

// append queues an encoded event for the next group commit and returns its outcome.
func (s *Sink) append(body []byte) error {
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
	} else {
		b.waiters++
		if b.done == nil { // a batch of completions only, until now
			b.done, b.lead = make(chan struct{}), make(chan struct{}, 1)
		}
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
	s.settleLocked(b)
	s.mu.Unlock()
	return b.errs[i]
}

// settleLocked publishes a committed batch's outcome (Healthy, its waiters) and releases
// the writer role.
func (s *Sink) settleLocked(b *batch) {
	s.failed = nil
	for _, err := range b.errs {
		if err != nil {
			s.failed = err
			break
		}
	}
	s.reportLost(b)
	if b.done != nil {
		close(b.done)
	}
	s.releaseLocked()
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
		s.reportLost(b)
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
	if b != nil && b.done != nil { // a batch of completions only has no one to wake
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
	case s.pending != nil && s.pending.waiters > 0:
		next := s.pending
		s.pending = nil
		next.lead <- struct{}{} // one of its callers writes it; the role stays taken
	case s.pending != nil: // completions only: the next caller or flushLoop writes them
		s.writing = false
		s.scheduleFlushLocked()
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
	n, err := s.write(b.bodies)
	for i := range n { // their lines are in the file: nothing reads these bodies again
		releaseBody(b.bodies[i])
		b.bodies[i] = nil
	}
	if err != nil {
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
