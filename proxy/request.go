package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/secrets"
)

// A request's life, from the moment its sandbox is identified to its last audit record, is
// owned by one reqState, in this order:
//
//	begin          the state, its span and the audit event it fills (beginUnread for a
//	               request the HTTP server refused before any handler read it)
//	acquire        the sandbox's in-flight slot, held until release
//	recordDecision the decision record, appended before anything is forwarded
//	refuse         every refusal: the status, rule, reason and class, then finish
//	finish         the slot released, the last record (completion, or the only one)
//	               appended, the span ended; once, whichever way the request ended
//
// Every way a request ends goes through finish: refused (refuse), forwarded and answered
// (the response body's close), upgraded (101), tunnelled (the tunnel's close), an
// intercepted CONNECT (its one record before the tunnel is accepted), or refused by the
// HTTP server itself (servererr.go).

// reqState is the per-request state: one per CONNECT and one per request.
type reqState struct {
	p     *Proxy
	ctx   context.Context // carries the request's span
	start time.Time
	id    identity.Identity
	ev    audit.Event
	end   func(*audit.Event)
	creds []string
	done  bool
	// slot: the request holds one of its sandbox's in-flight slots (acquire, release).
	slot atomic.Bool
	// approved is the binding of a held request that was approved (nil otherwise).
	approved *approvedRequest
	// reflects: the destination may echo the credentials (unless the rule said
	// "reflects": false); upgrade: the rule allows an Upgrade with credentials.
	reflects, upgrade bool
	// recorded: the decision record is written (recordDecision); nothing is forwarded before.
	recorded bool
	// scrub is the response's scrubber once credentials are attached; finish counts its
	// redactions.
	scrub secrets.Scrubber
	// calls are the calls a body-aware request's body holds, with their decisions: shown to
	// approvers.
	calls []approval.Call
	// up is the response body as it comes from upstream (kept here: no allocation of its own).
	up upstreamBody
}

// begin starts the life of a request (or CONNECT) of the identified sandbox: its span and
// its audit event, with a request id shared by the request's records.
func (p *Proxy) begin(ctx context.Context, r *http.Request, id identity.Identity, phase string) *reqState {
	st := &reqState{p: p, start: time.Now(), id: id}
	st.ctx, st.end = p.opts.Telemetry.RequestStarted(ctx, r)
	// Field by field, not an audit.Event literal: the literal is built in this frame and
	// copied, and this frame is below the request span's start on every request's stack.
	ev := &st.ev
	ev.RequestID = audit.NewID()
	ev.Kind = event.KindRequest
	ev.SandboxID, ev.ExecID, ev.Labels = id.ID, id.Exec, id.Labels
	ev.Method, ev.Phase = r.Method, phase
	if r.Method == http.MethodConnect {
		st.ev.Kind = event.KindConnect
	}
	if p.opts.PolicyRevision != nil {
		st.ev.PolicyRev = p.opts.PolicyRevision()
	}
	return st
}

// beginUnread is begin for a request the HTTP server refused before any handler read it:
// nothing of it was read, so it has no span, no request id and no method, only the
// listener's sandbox (id).
func (p *Proxy) beginUnread(id identity.Identity) *reqState {
	st := &reqState{p: p, ctx: context.Background(), start: time.Now(), id: id, end: func(*audit.Event) {}}
	st.ev = audit.Event{Kind: event.KindRequest, SandboxID: id.ID, Labels: id.Labels, Phase: "request"}
	if p.opts.PolicyRevision != nil {
		st.ev.PolicyRev = p.opts.PolicyRevision()
	}
	return st
}

// acquire takes one of the sandbox's in-flight slots (Limits.MaxInFlightPerSandbox); false
// means the sandbox has none left and the request is to be refused (tooMany).
func (st *reqState) acquire() bool {
	if !st.p.flight.acquire(st.id.ID, st.p.opts.Limits.MaxInFlightPerSandbox) {
		return false
	}
	st.slot.Store(true)
	return true
}

// release gives the slot back, once; finish releases it, and so may a handler that is
// done with the request before its end (a CONNECT once it is decided).
func (st *reqState) release() {
	if st.slot.Swap(false) {
		st.p.flight.release(st.id.ID)
	}
}

// errAuditUnavailable refuses what could not be recorded.
var errAuditUnavailable = errors.New("the audit log cannot be written")

// recordDecision appends the decision record. It returns nil when there is no audit log
// (disabled by the operator) or the record was written as the sink promises (see
// audit.Sink); the caller forwards only then.
func (st *reqState) recordDecision() error {
	if st.recorded {
		return nil
	}
	p := st.p
	if p.opts.Auditor != nil {
		// The decision record is the request's event as it stands, staged "decision"; the
		// completion record is the same event later (auditors copy what they keep).
		ev := &st.ev
		ev.Stage, ev.Time = audit.StageDecision, st.start.UTC()
		if sc := trace.SpanContextFromContext(st.ctx); sc.IsValid() {
			ev.TraceID, ev.SpanID = traceIDs(sc)
		}
		err := p.opts.Auditor.Record(st.ctx, ev)
		ev.Stage = audit.StageCompletion
		if err != nil {
			ev.Stage = "" // the refusal that follows is the request's only record
			p.logAuditFailure(err, ev.SandboxID)
			return errAuditUnavailable
		}
	}
	st.recorded = true
	return nil
}

// logAuditFailure is out of line: recordDecision's frame is under the audit record's
// encoding, the deepest point of a request's stack.
//
//go:noinline
func (p *Proxy) logAuditFailure(err error, sandbox string) {
	p.log.Error("audit decision record failed; not forwarding", "err", err, "sandbox", sandbox)
}

// refuse ends the request with refusal f: its status, rule, reason and class go on the
// record, and so does its decision, unless the policy's deny (or report-only would_deny)
// already stands and f only repeats it.
func (st *reqState) refuse(ctx context.Context, f refusal) {
	st.ev.Status = f.status
	if st.ev.Decision == "" || f.decision != event.DecisionDeny || st.ev.Decision == event.DecisionAllow || st.ev.Decision == event.DecisionApprove {
		st.ev.Decision = f.decision
	}
	if f.rule != "" {
		st.ev.Rule = f.rule
	}
	st.ev.Reason = f.reason
	st.ev.ErrorClass = f.class
	st.finish(ctx)
}

// finish ends the request: its slot is released, its last audit record (its completion, or
// its only record) appended and its span ended. Only the first call does anything. The
// error is the record's: it refuses an intercepted CONNECT.
func (st *reqState) finish(ctx context.Context) error {
	st.release()
	if st.done {
		return nil
	}
	st.done = true
	p := st.p
	p.countRedactions(ctx, st)
	st.ev.Time = st.start.UTC()
	st.ev.DurationMS = float64(time.Since(st.start).Microseconds()) / 1000
	st.end(&st.ev)
	if p.opts.Auditor != nil {
		if err := p.opts.Auditor.Record(ctx, &st.ev); err != nil {
			p.log.Error("audit record failed", "err", err, "sandbox", st.ev.SandboxID)
			return err
		}
	}
	return nil
}
