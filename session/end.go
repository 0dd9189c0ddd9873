package session

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Close ends every session (airlock is stopping) and stops the sweep.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var ss []*Session
	for _, s := range m.sessions {
		if s != nil {
			ss = append(ss, s)
		}
	}
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	var errs []error
	for _, s := range ss {
		if _, err := s.end(ctx, "airlock stopped"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) sweepLoop() {
	defer close(m.done)
	t := time.NewTicker(m.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.sweep()
		}
	}
}

// sweep ends the sessions past their ttl, and those idle (no command running, none for
// idle_timeout) too long.
func (m *Manager) sweep() {
	now := m.opts.Now()
	m.mu.Lock()
	var due []*Session
	var why []string
	for _, s := range m.sessions {
		if s == nil {
			continue
		}
		s.mu.Lock()
		switch {
		case s.state != StateRunning:
		case !now.Before(s.expires):
			due, why = append(due, s), append(why, "ttl")
		case s.running == 0 && now.Sub(s.lastActive) >= s.idle:
			due, why = append(due, s), append(why, "idle_timeout")
		}
		s.mu.Unlock()
	}
	m.mu.Unlock()
	for i, s := range due {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := s.end(ctx, why[i]); err != nil {
				m.log.Error("ending a sandbox session failed", "sandbox", s.id, "reason", why[i], "err", err)
			}
		}()
	}
}

// ending reports whether the session is being or was destroyed.
func (s *Session) ending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state != StateRunning
}

// end destroys the session once; later calls wait for the first and share its result.
func (s *Session) end(ctx context.Context, reason string) (sandbox.Report, error) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.state = StateEnding
		s.endReason = reason
		for _, c := range s.cancels {
			c() // running commands end with the sandbox
		}
		s.mu.Unlock()
		err := s.sb.Close(context.WithoutCancel(ctx))
		s.m.creds.dropSandbox(s.id)
		rep := s.sb.Report()
		s.mu.Lock()
		s.state = StateEnded
		s.report = rep
		s.endErr = err
		execs := maps.Clone(s.execs)
		s.mu.Unlock()
		info := s.info()
		info.Ended = s.m.opts.Now()
		info.EndReason = reason
		m := s.m
		m.mu.Lock()
		delete(m.sessions, s.id)
		m.ended[s.id] = &tombstone{info: info, report: rep, execs: execs}
		m.endedList = append(m.endedList, s.id)
		if len(m.endedList) > maxTombstones {
			delete(m.ended, m.endedList[0])
			m.endedList = m.endedList[1:]
		}
		m.mu.Unlock()
		m.reg.release(s.id)
		if m.opts.Ended != nil {
			m.opts.Ended(s.id)
		}
		m.log.Info("sandbox session ended", "sandbox", s.id, "reason", reason, "err", err)
		close(s.endDone)
	})
	select {
	case <-s.endDone:
	case <-ctx.Done():
		return sandbox.Report{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.report, s.endErr
}
