package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/rego"
)

// hold buffers the request body and waits for an approval bound to the request exactly as it
// will be forwarded: method, URL, every forwarded header and the body. On approval the
// request's body is replaced by exactly the approved bytes and the binding is kept for the
// round trip to check; otherwise a refusal says why and who ended it.
//
// What a waiting request keeps in memory is bounded per sandbox (how many wait, and their
// bodies together) and in total, before the body is read past the bound.
// In a tunnel, conn is the client's connection, watched so that a client that goes away
// while held ends the approval as disconnected (nothing is sent).
func (p *Proxy) hold(r *http.Request, st *reqState, dec rego.Decision, conn net.Conn) *refusal {
	if p.opts.Approver == nil {
		return &refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: dec.Rule,
			reason: "this request needs approval (" + dec.Reason + ") but no approver is configured, so it is refused", class: "approval"}
	}
	sandbox := st.id.ID
	if v := p.held.enter(sandbox); v != budgetOK {
		p.discardBody(r)
		return p.overBudget(v, sandbox, 0)
	}
	var reserved int64
	body, f := p.readHeld(r, sandbox, dec, &reserved)
	if f != nil {
		p.held.leave(sandbox, reserved)
		p.discardBody(r)
		return f
	}
	defer p.held.leave(sandbox, reserved)

	// r.Header is already in forward form (handleRequest): what the policy saw is bound.
	target := forwardedURL(r.URL)
	header := forwardedHeaders(r.Header)
	held := p.opts.Telemetry.Held(st.ctx)
	_, done := p.opts.Telemetry.Step(st.ctx, "approval", "", nil)
	start := time.Now()
	hctx, stop := watchClient(r.Context(), conn)
	defer stop()
	res, err := p.opts.Approver.Hold(hctx, approval.Request{
		SandboxID: sandbox,
		Labels:    st.id.Labels,
		Method:    r.Method,
		URL:       target,
		Header:    header,
		Body:      body,
		Rule:      dec.Rule,
		Reason:    dec.Reason,
		Creds:     dec.Credentials,
		Timeout:   time.Duration(dec.Approval.Timeout),
		Calls:     st.calls,
	})
	st.ev.ApprovalID = res.ID
	if res.State.ByApprover() {
		st.ev.Approver = res.DecidedBy
	}
	held(res.State, err != nil, time.Since(start))
	switch {
	case err != nil:
		done("approval_error")
	case res.Approved():
		done("")
	default:
		done("approval_" + string(res.State))
	}
	if errors.Is(err, approval.ErrClosed) {
		return &refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: dec.Rule,
			reason: "airlock is restarting; approval " + res.ID + " stays pending: retry the same request after it is decided", class: "approval",
			extra: http.Header{"X-Airlock-Approval-Id": {res.ID}, "Retry-After": {"30"}}}
	}
	var le *approval.LimitError
	if errors.As(err, &le) {
		f := &refusal{status: le.Status, decision: event.DecisionDeny, rule: le.Rule, reason: le.Reason, class: "limit"}
		if le.RetryAfter > 0 {
			f.extra = http.Header{"Retry-After": {strconv.Itoa(int(max(le.RetryAfter/time.Second, 1)))}}
		}
		return f
	}
	if err != nil {
		p.log.Error("approval failed", "sandbox", sandbox, "err", err)
		return &refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: dec.Rule,
			reason: "the approval could not be obtained (approval store unavailable), so the request is refused", class: "approval"}
	}
	if !res.Approved() {
		return notApproved(res, dec)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	if body == nil {
		r.Body = http.NoBody
	}
	st.approved = &approvedRequest{id: res.ID, hash: approval.RequestHash(r.Method, target, header, body), body: body}
	return nil
}

// notApproved is the answer for a held request that ended any way but approved; the status,
// class and text say who ended it.
func notApproved(res approval.Result, dec rego.Decision) *refusal {
	h := http.Header{"X-Airlock-Approval-Id": {res.ID}, "X-Airlock-Approval-State": {string(res.State)}}
	f := &refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: dec.Rule, class: "approval_" + string(res.State), extra: h}
	said := ""
	if res.Comment != "" {
		said = ": " + res.Comment
	}
	switch res.State {
	case approval.StateDenied:
		f.reason = "denied by approver " + res.DecidedBy + said
	case approval.StateCancelled:
		f.reason = "cancelled by approver " + res.DecidedBy + " (withdrawn without a decision; nothing was sent)" + said
	case approval.StateExpired:
		f.reason = "no approver decided in time; the request was not sent (ask again, or ask the operator)"
	case approval.StateDisconnected:
		// Nobody reads this answer; the audit event does: the agent went away, not an approver.
		f.status = statusClientClosed
		f.reason = "the agent disconnected while the request was held for approval; nothing was sent"
	default:
		f.reason = "the request ended in approval state " + strconv.Quote(string(res.State)) + "; nothing was sent"
		f.class = "approval"
	}
	return f
}

// statusClientClosed is recorded when the client went away before its answer (as nginx's 499).
const statusClientClosed = 499

// readHeld reads r's body for a held request, reserving its bytes in the sandbox's budget
// before they are buffered (*reserved grows as it goes; the caller releases it).
func (p *Proxy) readHeld(r *http.Request, sandbox string, dec rego.Decision, reserved *int64) ([]byte, *refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	max := p.opts.Limits.MaxBodyBytes
	tooLarge := &refusal{status: http.StatusRequestEntityTooLarge, decision: event.DecisionDeny, rule: "limits.body",
		reason: "a request held for approval may carry at most " + strconv.FormatInt(max, 10) + " bytes of body", class: "limit"}
	if r.ContentLength > max {
		return nil, tooLarge
	}
	grow := func(n int64) *refusal {
		if v := p.held.grow(sandbox, n); v != budgetOK {
			return p.overBudget(v, sandbox, n)
		}
		*reserved += n
		return nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		if f := grow(r.ContentLength); f != nil {
			return nil, f
		}
		buf.Grow(int(r.ContentLength))
	}
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(chunk)
		if n > 0 {
			size := int64(buf.Len() + n)
			if size > max {
				return nil, tooLarge
			}
			if size > *reserved {
				if f := grow(size - *reserved); f != nil {
					return nil, f
				}
			}
			buf.Write(chunk[:n])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: dec.Rule, reason: "could not read the request body: " + err.Error(), class: "bad_request"}
		}
	}
	return buf.Bytes(), nil
}

// discardBody reads what is left of a refused request's body, up to the body limit, into
// nothing (no memory is kept) before the refusal is written: a client that sends its whole
// body before reading the answer (Connection: close, as Python's urllib sends) would
// otherwise have its connection reset mid-send and never see the refusal. A longer body is
// left to the server, which drops the connection.
func (p *Proxy) discardBody(r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		_, _ = io.CopyN(io.Discard, r.Body, p.opts.Limits.MaxBodyBytes)
	}
}

// overBudget is the refusal for a sandbox at one of its held-request bounds.
func (p *Proxy) overBudget(v budgetVerdict, sandbox string, want int64) *refusal {
	l := p.opts.Limits
	pending, bytes, _ := p.held.usage(sandbox)
	retry := http.Header{"Retry-After": {"60"}}
	switch v {
	case budgetSandboxPending:
		return &refusal{status: http.StatusTooManyRequests, decision: event.DecisionDeny, rule: "limits.held", class: "limit", extra: retry,
			reason: "this sandbox already has " + strconv.Itoa(pending) + " requests waiting for approval, its limit (approvals.max_pending_per_sandbox); wait until some are decided before sending more"}
	case budgetSandboxBytes:
		return &refusal{status: http.StatusRequestEntityTooLarge, decision: event.DecisionDeny, rule: "limits.held_bytes", class: "limit", extra: retry,
			reason: "this sandbox's requests waiting for approval already hold " + strconv.FormatInt(bytes, 10) + " bytes of body; " +
				strconv.FormatInt(want, 10) + " more would pass its limit of " + strconv.FormatInt(l.MaxHeldBytesPerSandbox, 10) +
				" bytes (approvals.max_held_bytes_per_sandbox); wait until some are decided, or send a smaller body"}
	default:
		return &refusal{status: http.StatusRequestEntityTooLarge, decision: event.DecisionDeny, rule: "limits.held_bytes_total", class: "limit", extra: retry,
			reason: "airlock holds as many request bodies for approval as it may (approvals.max_held_bytes, " +
				strconv.FormatInt(l.MaxHeldBytes, 10) + " bytes for all sandboxes); retry later"}
	}
}

// forwardForm brings h to the form in which it is forwarded, before the policy input is
// built and an approval bound to it: hop-by-hop headers removed (as the round trip does), Expect dropped (the body is
// already buffered) and, unless goproxy keeps it, Accept-Encoding dropped (goproxy removes
// it before the round trip; the transport negotiates its own).
func forwardForm(h http.Header, keepAcceptEncoding bool) {
	removeHopHeaders(h)
	h.Del("Expect")
	if !keepAcceptEncoding {
		h.Del("Accept-Encoding")
	}
}

// derivedHeaders are written by the transport from the request itself (URL, body length,
// framing), not from the header map: they are bound through the URL and the body.
var derivedHeaders = [...]string{"Host", "Content-Length", "Transfer-Encoding", "Trailer"}

// forwardedHeaders is the header map as the transport writes it: h (in forward form)
// without the headers it derives from the request.
func forwardedHeaders(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, k := range derivedHeaders {
		delete(out, k)
	}
	return out
}

// forwardedURL is what is sent: scheme://host[:port] and the request target on the wire.
func forwardedURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.RequestURI()
}

// approvedRequest is the binding of an approved request, checked again just before the
// round trip: what goes upstream is what was approved, or nothing.
type approvedRequest struct {
	id   string
	hash string
	body []byte
}

// verify recomputes the binding of the outbound request (after hop-by-hop removal, before
// credentials) and refuses it if anything changed since the approval.
func (a *approvedRequest) verify(req *http.Request) *refusal {
	if approval.RequestHash(req.Method, forwardedURL(req.URL), forwardedHeaders(req.Header), a.body) == a.hash {
		return nil
	}
	return &refusal{status: http.StatusInternalServerError, decision: event.DecisionError, rule: "approval.binding", class: "approval",
		reason: "the request changed between its approval (" + a.id + ") and sending, so nothing was sent; this is a bug in airlock: tell the operator",
		extra:  http.Header{"X-Airlock-Approval-Id": {a.id}}}
}
