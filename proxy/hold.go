package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/rego"
)

// hold buffers the request body and waits for an approval. On approval the request's body
// is replaced by exactly the approved bytes; otherwise a refusal says why.
// In a tunnel, conn is the client's connection, watched so that a client that goes away
// while held cancels the approval (nothing is sent).
func (p *Proxy) hold(r *http.Request, st *reqState, dec rego.Decision, conn net.Conn) *refusal {
	if p.opts.Approver == nil {
		return &refusal{status: http.StatusServiceUnavailable, decision: "error", rule: dec.Rule,
			reason: "this request needs approval (" + dec.Reason + ") but no approver is configured, so it is refused", class: "approval"}
	}
	max := p.opts.Limits.MaxBodyBytes
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			return &refusal{status: http.StatusBadRequest, decision: "error", rule: dec.Rule, reason: "could not read the request body: " + err.Error(), class: "bad_request"}
		}
		if int64(len(b)) > max {
			return &refusal{status: http.StatusRequestEntityTooLarge, decision: "deny", rule: dec.Rule,
				reason: "a request held for approval may carry at most " + strconv.FormatInt(max, 10) + " bytes of body", class: "limit"}
		}
		body = b
	}
	held := p.opts.Telemetry.Held(st.ctx)
	_, done := p.opts.Telemetry.Step(st.ctx, "approval", "", nil)
	start := time.Now()
	hctx, stop := watchClient(r.Context(), conn)
	defer stop()
	res, err := p.opts.Approver.Hold(hctx, approval.Request{
		SandboxID: st.id.ID,
		Labels:    st.id.Labels,
		Method:    r.Method,
		URL:       r.URL.String(),
		Header:    policyHeaders(r.Header),
		Body:      body,
		Rule:      dec.Rule,
		Reason:    dec.Reason,
		Creds:     dec.Credentials,
		Timeout:   time.Duration(dec.Approval.Timeout),
	})
	st.ev.ApprovalID, st.ev.Approver = res.ID, res.DecidedBy
	state := res.State
	if err != nil {
		state = "error"
	}
	held(state, time.Since(start))
	if state == "approved" {
		done("")
	} else {
		done("approval_" + state)
	}
	if errors.Is(err, approval.ErrClosed) {
		return &refusal{status: http.StatusServiceUnavailable, decision: "error", rule: dec.Rule,
			reason: "airlock is restarting; approval " + res.ID + " stays pending: retry the same request after it is decided", class: "approval",
			extra: http.Header{"X-Airlock-Approval-Id": {res.ID}, "Retry-After": {"30"}}}
	}
	if err != nil {
		p.log.Error("approval failed", "sandbox", st.id.ID, "err", err)
		return &refusal{status: http.StatusServiceUnavailable, decision: "error", rule: dec.Rule,
			reason: "the approval could not be obtained (approval store unavailable), so the request is refused", class: "approval"}
	}
	if !res.Approved() {
		reason := "the request was " + res.State + " by the approver"
		switch res.State {
		case "denied":
			if res.DecidedBy != "" {
				reason = "denied by " + res.DecidedBy
			}
			if res.Comment != "" {
				reason += ": " + res.Comment
			}
		case "expired":
			reason = "no approver decided in time; the request was not sent (ask again, or ask the operator)"
		}
		h := http.Header{"X-Airlock-Approval-Id": {res.ID}, "X-Airlock-Approval-State": {res.State}}
		return &refusal{status: http.StatusForbidden, decision: "deny", rule: dec.Rule, reason: reason, class: "approval", extra: h}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Del("Expect")
	if body == nil {
		r.Body = http.NoBody
	}
	return nil
}
