package audit

import "time"

// Completion records are written later: a response has gone to the client when its
// completion is recorded, so nothing waits for that write (outside fsync "always").

// CompletionWindow bounds how long a completion record waits to be written (every fsync
// setting but "always"): it goes with the next write (another request's decision record,
// typically), or at most this long after its Record returned.
const CompletionWindow = time.Millisecond

// appendLater queues a completion record and returns at once: nothing waits on it (the
// response has gone to the client), so it is written with the next batch, or by flushLoop
// within CompletionWindow, saving a write(2) on each request's way back. Under "always"
// completions are appended like any record. A kill of airlock loses at most the
// completions of the last CompletionWindow; a decision record is always in the file
// before its request goes out. A completion that cannot be written (block mode, or buffer
// mode with the buffer full) is logged by the sink, with the error, as the proxy logged a
// failed completion before; Healthy reports the failure until a write succeeds.
func (s *Sink) appendLater(body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.pending == nil {
		s.pending = &batch{}
	}
	if len(s.pending.later) == 0 {
		s.pending.laterAt = time.Now()
	}
	s.pending.later = append(s.pending.later, len(s.pending.bodies))
	s.pending.bodies = append(s.pending.bodies, body)
	s.scheduleFlushLocked()
	return nil
}

// scheduleFlushLocked wakes flushLoop for what waits in pending, unless a writer is at
// work (its release hands pending on or schedules this again) or it is already awake.
func (s *Sink) scheduleFlushLocked() {
	if s.writing || s.flushing {
		return
	}
	s.flushing = true
	select {
	case s.later <- struct{}{}:
	default:
	}
}

// flushLoop writes completion records left in pending when no request's decision record
// came to take them within CompletionWindow. It writes only records that have waited the
// whole window: when its timer finds younger ones (those it was woken for were taken by a
// decision's write meanwhile, as they are under steady traffic), it waits out their
// remainder instead of writing them alone, which had cost a single steady client 1.25
// audit write(2)s per request instead of one.
func (s *Sink) flushLoop() {
	defer s.wg.Done()
	t := time.NewTimer(CompletionWindow)
	t.Stop()
	for {
		select {
		case <-s.stop:
			return // Close writes what is pending
		case <-s.later:
		}
		for {
			s.mu.Lock()
			b, wait := s.flushDueLocked(time.Now())
			s.mu.Unlock()
			if b != nil {
				s.commit(b)
				s.mu.Lock()
				s.settleLocked(b)
				s.mu.Unlock()
				break
			}
			if wait == 0 {
				break
			}
			t.Reset(wait)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// flushDueLocked decides what flushLoop does when woken or when its timer fires (at now):
// take pending to write it (its oldest completion has waited CompletionWindow), wait the
// rest of the window (next > 0: the oldest is younger), or neither (nothing pending, or a
// writer at work, whose release hands pending on or schedules the flush again). Taking
// pending takes the writer role.
func (s *Sink) flushDueLocked(now time.Time) (b *batch, next time.Duration) {
	b = s.pending
	if b == nil || s.writing || len(b.later) == 0 {
		s.flushing = false
		return nil, 0
	}
	if age := now.Sub(b.laterAt); age >= 0 && age < CompletionWindow {
		return nil, CompletionWindow - age
	}
	s.flushing = false
	s.pending, s.writing = nil, true
	return b, 0
}

// reportLost logs the deferred completions of a committed batch that could not be
// written: nobody waits for their outcome (red team: they were dropped silently).
func (s *Sink) reportLost(b *batch) {
	lost, why := 0, error(nil)
	for _, i := range b.later {
		if b.errs[i] != nil {
			lost, why = lost+1, b.errs[i]
		}
	}
	if lost > 0 {
		s.log.Error("audit completion records could not be written; their decisions stand without completion", "count", lost, "err", why)
	}
}
