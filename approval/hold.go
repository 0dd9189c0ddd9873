package approval

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-proxy/airlock/internal/redact"
)

// storeWriteTimeout bounds the store writes Hold makes after its caller went away.
const storeWriteTimeout = 10 * time.Second

// Hold records r as a pending approval, notifies approvers and waits until it is approved,
// denied, expires (r.Timeout, or Config.Timeout) or ctx ends. A request identical to one
// approved within the retry window (same sandbox and RequestHash) is approved at once,
// using that grant up; the reuse is recorded as its own record.
//
// When ctx ends first (the client went away) the record becomes disconnected and the Result
// says disconnected, whatever raced with it: nothing may be sent. An error means no decision
// could be had (store down, or ErrClosed at shutdown): the caller must refuse the request.
func (s *Service) Hold(ctx context.Context, r Request) (Result, error) {
	select {
	case <-s.closing:
		return Result{}, ErrClosed
	default:
	}
	if n := headerBytes(r.Header); n > int64(s.cfg.MaxHeaderBytes) {
		return Result{}, &LimitError{Status: http.StatusRequestHeaderFieldsTooLarge, Rule: "limits.held_header",
			Reason: fmt.Sprintf("a request held for approval may carry at most %d bytes of header names and values (approvals.max_header_bytes); this one has %d", s.cfg.MaxHeaderBytes, n)}
	}
	start := s.now()
	rec := s.newRecord(r, start)
	if res, ok, err := s.reuseGrant(ctx, rec, r.Body, start); err != nil || ok {
		return res, err
	}
	if ok, _, _ := s.newRecords.admit(rec.Sandbox, false, start); !ok {
		s.log.Warn("approval refused: new-record limit for the sandbox", "sandbox", rec.Sandbox, "rule", rec.Rule)
		return Result{}, &LimitError{Status: http.StatusTooManyRequests, Rule: "limits.approvals", RetryAfter: s.cfg.NewInterval.D(),
			Reason: fmt.Sprintf("this sandbox asked for more approvals than it may (approvals.new_per_sandbox_burst %d, then one per approvals.new_per_sandbox_interval %s); wait before asking again",
				s.cfg.NewBurst, s.cfg.NewInterval)}
	}

	ch, duplicate := s.register(rec)
	defer s.unregister(rec)
	if err := s.store.Create(ctx, rec, r.Body); err != nil {
		return Result{}, err
	}
	s.log.Info("approval pending", "id", rec.ID, "sandbox", rec.Sandbox, "method", rec.Method,
		"url", redact.URL(rec.URL), "rule", rec.Rule, "expires", rec.Expires, "warnings", len(rec.Warnings))
	s.events.publish(Event{Type: EventCreated, Record: rec})
	s.notify(rec, duplicate)

	timer := time.NewTimer(rec.Expires.Sub(start))
	defer timer.Stop()
	result := func(r Record) Result {
		return Result{ID: r.ID, State: r.State, DecidedBy: r.DecidedBy, Comment: r.Comment,
			Waited: s.now().Sub(start)}
	}
	select {
	case d := <-ch:
		return result(d), nil
	case <-timer.C:
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		defer cancel()
		d, err := s.end(wctx, rec.ID, Decision{State: StateExpired, By: DecidedBySystem,
			Comment: "no decision before the timeout", At: s.now()})
		if err != nil && !errors.Is(err, ErrDecided) {
			return Result{}, err
		}
		return result(d), nil // decided just in time: d holds that decision
	case <-ctx.Done():
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		defer cancel()
		_, err := s.end(wctx, rec.ID, Decision{State: StateDisconnected, By: DecidedBySystem,
			Comment: disconnectedComment, At: s.now()})
		if err != nil && !errors.Is(err, ErrDecided) {
			s.log.Warn("record disconnected approval", "id", rec.ID, "err", err)
		}
		// Whatever raced with the disconnection, nothing is sent: the client is gone.
		return Result{ID: rec.ID, State: StateDisconnected, DecidedBy: DecidedBySystem,
			Comment: disconnectedComment, Waited: s.now().Sub(start)}, nil
	case <-s.closing:
		return Result{ID: rec.ID, State: StatePending, Waited: s.now().Sub(start)},
			fmt.Errorf("approval %s stays pending: %w", rec.ID, ErrClosed)
	}
}

// disconnectedComment is the record's comment when the agent went away while held.
const disconnectedComment = "the agent disconnected while the request was held; nothing was sent"

// newRecord builds the pending record for r.
func (s *Service) newRecord(r Request, now time.Time) Record {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = s.cfg.Timeout.D()
	}
	preview, cut := Preview(r.Body, int(s.cfg.BodyPreview))
	creds := append([]string(nil), r.Creds...)
	labels := make(map[string]string, len(r.Labels))
	for k, v := range r.Labels {
		labels[k] = v
	}
	headers := r.Header.Clone()
	if headers == nil {
		headers = http.Header{}
	}
	// Never forwarded, and it would be the sandbox's airlock credential: not in a record.
	headers.Del("Proxy-Authorization")
	return Record{
		ID:            newID(),
		State:         StatePending,
		Sandbox:       r.SandboxID,
		Labels:        labels,
		Method:        r.Method,
		URL:           r.URL,
		Headers:       headers,
		Warnings:      Warnings(r.Method, r.URL, r.Header, r.Body),
		Calls:         r.Calls,
		ContentType:   r.Header.Get("Content-Type"),
		BodyPreview:   preview,
		BodySize:      int64(len(r.Body)),
		BodyTruncated: cut,
		BodySHA256:    sha256Hex(r.Body),
		RequestSHA256: RequestHash(r.Method, r.URL, r.Header, r.Body),
		Rule:          r.Rule,
		Reason:        r.Reason,
		Credentials:   creds,
		Created:       now.UTC(),
		Expires:       now.Add(timeout).UTC(),
	}
}

// reuseGrant lets rec through at once when an identical request was approved within the
// retry window and that grant is still unused.
func (s *Service) reuseGrant(ctx context.Context, rec Record, body []byte, now time.Time) (Result, bool, error) {
	// A command is not a network retry: running it again (or with other environment
	// values, or after the workspace changed) is another act, so it is always asked again.
	if s.cfg.RetryWindow <= 0 || rec.Method == MethodExec {
		return Result{}, false, nil
	}
	g, ok, err := s.store.UseGrant(ctx, GrantQuery{RequestSHA256: rec.RequestSHA256,
		Sandbox: rec.Sandbox, Since: now.Add(-s.cfg.RetryWindow.D()), UsedBy: rec.ID})
	if err != nil || !ok {
		return Result{}, false, err
	}
	rec.State = StateApproved
	rec.DecidedBy = g.DecidedBy
	rec.DecidedAt = now.UTC()
	rec.Comment = fmt.Sprintf("retry of %s, approved by %s within the retry window", g.ID, g.DecidedBy)
	rec.RetryOf = g.ID
	if err := s.store.Create(ctx, rec, body); err != nil {
		return Result{}, false, err
	}
	s.log.Info("approval reused", "id", rec.ID, "retry_of", g.ID, "sandbox", rec.Sandbox)
	s.events.publish(Event{Type: EventCreated, Record: rec})
	return Result{ID: rec.ID, State: StateApproved, DecidedBy: rec.DecidedBy, Comment: rec.Comment,
		Waited: s.now().Sub(now)}, true, nil
}

// LimitError is Hold's refusal of a request over one of the approval store's bounds, before
// any record is made: Status is the answer for the client (431 for too many header bytes,
// 429 for too many new approvals), Rule names the bound, Reason says which key sets it.
type LimitError struct {
	Status     int
	Rule       string
	Reason     string
	RetryAfter time.Duration // 0: none
}

func (e *LimitError) Error() string { return e.Reason }

// headerBytes counts h's names and values as they are stored (and sent: name, ": ", value,
// CRLF per value).
func headerBytes(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// MethodExec is the method of a held sandbox command (session exec): such records never
// reuse a grant.
const MethodExec = "EXEC"
