package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/telemetry"
)

// hopHeaders are removed before a request goes upstream (RFC 9110 §7.6.1). They are in
// canonical form, as net/http keys a parsed header: removeHopHeaders deletes them from the
// map directly, as Header.Del would after canonicalizing each (twice per request).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding"}

func removeHopHeaders(h http.Header) {
	var upgrade string
	if v := h["Upgrade"]; len(v) > 0 {
		upgrade = v[0]
	}
	for _, f := range h["Connection"] {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" && !strings.EqualFold(name, "Upgrade") {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if upgrade != "" {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{upgrade}
	} else {
		delete(h, "Upgrade")
	}
}

// upstream sends one allowed request: credentials, dial guard, round trip, scrubbing, record.
type upstream struct {
	p  *Proxy
	st *reqState
}

func (u *upstream) RoundTrip(req *http.Request, ctx *goproxy.ProxyCtx) (outResp *http.Response, outErr error) {
	p, st := u.p, u.st
	defer func() {
		// As in handleRequest: inside an intercepted tunnel a panic would end the process.
		if v := recover(); v != nil {
			p.logPanic(v)
			outResp, outErr = failUpstream(st, req, internalFailureForwarding())
		}
	}()
	fail := func(f refusal) (*http.Response, error) { return failUpstream(st, req, f) }
	if err := st.recordDecision(); err != nil {
		return fail(auditUnavailable()) // nothing is sent unless its decision is on record
	}
	removeHopHeaders(req.Header)
	if st.approved != nil {
		if f := st.verifyApproved(req); f != nil {
			return fail(*f)
		}
	}
	var scrub secrets.Scrubber
	if len(st.creds) > 0 {
		var f *refusal
		if scrub, f = st.attachCredentials(req); f != nil {
			return fail(*f)
		}
	}
	var in *countingReader
	if req.Body != nil && req.Body != http.NoBody {
		in = &countingReader{ReadCloser: req.Body}
		req.Body = in
	}
	uctx, done := p.opts.Telemetry.Step(st.ctx, "upstream", "", req)
	resp, err := p.roundTrip(req, st.approved != nil)
	if in != nil {
		st.ev.BytesIn = in.n.Load()
	}
	if err != nil {
		return roundTripFailed(st, req, err, scrub, done)
	}
	telemetry.UpstreamAnswered(uctx, resp.StatusCode)
	done("")
	st.ev.Status = resp.StatusCode
	if client, _ := req.Context().Value(connKey).(*idleConn); client != nil && resp.Body != nil &&
		resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols {
		// Beneath the scrubber, which may read a small body whole before the client gets a
		// byte (red team: a body trickled past the idle timeout cancelled the request).
		st.up = upstreamBody{ReadCloser: resp.Body, client: client}
		resp.Body = &st.up
	}
	if scrub != nil {
		if f := st.guardResponse(req, resp, scrub); f != nil {
			return fail(*f)
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return st.switched(req, resp, fail)
	}
	resp.Body = &recordingBody{ReadCloser: resp.Body, onPanic: p.logPanic, onClose: func(n int64, cut string) {
		st.ev.BytesOut = n
		if cut != "" {
			// The status line went out: the stream is cut instead, which the client sees as a
			// broken response.
			st.ev.ErrorClass = "uninspectable"
			st.ev.Reason = "the response was cut: the upstream sent " + cut + ", which airlock cannot check for the credentials it attached"
		}
		st.finish(context.Background())
	}}
	return resp, nil
}

// The functions below are RoundTrip's rare ways out, out of line (go:noinline): their
// locals (refusals, log arguments) would otherwise sit in RoundTrip's frame, which is on
// every request's stack beneath the audit record's encoding, its deepest point. An idle
// keep-alive connection keeps the stack its request grew.

// internalFailureForwarding is internalFailure once the request may have been sent.
//
//go:noinline
func internalFailureForwarding() refusal {
	f := internalFailure()
	f.reason = "airlock failed while forwarding this request (the operator's log says why); it may have reached the upstream, its answer was discarded"
	return f
}

// failUpstream records f and answers req with it.
//
//go:noinline
func failUpstream(st *reqState, req *http.Request, f refusal) (*http.Response, error) {
	st.refuse(req.Context(), f)
	return f.response(req), nil
}

// verifyApproved refuses an approved request that changed before sending.
//
//go:noinline
func (st *reqState) verifyApproved(req *http.Request) *refusal {
	f := st.approved.verify(req)
	if f != nil {
		st.p.log.Error("approved request changed before sending; refused", "sandbox", st.id.ID, "approval", st.approved.id)
	}
	return f
}

// attachCredentials puts the request's credentials on req and returns the scrubber for its
// response, or why the request is refused.
//
//go:noinline
func (st *reqState) attachCredentials(req *http.Request) (secrets.Scrubber, *refusal) {
	p := st.p
	if f := st.withCredentials(req); f != nil {
		return nil, f
	}
	if f := p.redactionLimit(st); f != nil {
		return nil, f
	}
	if p.opts.Credentials == nil {
		return nil, &refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: st.ev.Rule,
			reason: "the policy names credentials " + strings.Join(st.creds, ", ") + " but no credential source is configured", class: "credential"}
	}
	cctx, done := p.opts.Telemetry.Step(st.ctx, "credentials", "", nil)
	scrub, err := p.opts.Credentials.Attach(cctx, secrets.AttachRequest{SandboxID: st.id.ID, Names: st.creds, Out: req})
	if err != nil {
		done("credential")
		status := http.StatusServiceUnavailable
		var hs interface{ HTTPStatus() int }
		if errors.As(err, &hs) {
			status = hs.HTTPStatus()
		}
		p.log.Error("credential attach failed", "sandbox", st.id.ID, "credentials", st.creds, "err", err)
		return nil, &refusal{status: status, decision: event.DecisionError, rule: st.ev.Rule, reason: err.Error(), class: "credential"}
	}
	done("")
	st.scrub = scrub
	st.afterAttach(req)
	return scrub, nil
}

// roundTripFailed answers a request whose round trip failed.
//
//go:noinline
func roundTripFailed(st *reqState, req *http.Request, err error, scrub secrets.Scrubber, done func(string)) (*http.Response, error) {
	f := upstreamError(err)
	if canceledByClient(req, err) {
		f = clientClosedUpstream()
	}
	if scrub != nil {
		f.reason = scrub.ScrubString(f.reason) // the transport may quote the upstream's bytes
	}
	done(f.class)
	return failUpstream(st, req, f)
}

// upstreamError maps a round-trip error to what the agent is told.
func upstreamError(err error) refusal {
	var de *DialDeniedError
	if errors.As(err, &de) {
		return refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: "dial_guard",
			reason: de.Error() + "; airlock never dials such addresses (an operator can allow a range with --allow-private)", class: "dial_guard"}
	}
	var re *ResolveError
	if errors.As(err, &re) {
		return refusal{status: http.StatusBadGateway, decision: event.DecisionError, rule: "upstream",
			reason: "could not resolve " + re.Host, class: "dns"}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return refusal{status: http.StatusGatewayTimeout, decision: event.DecisionError, rule: "upstream",
			reason: "the upstream did not answer in time", class: "upstream_timeout"}
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	return refusal{status: http.StatusBadGateway, decision: event.DecisionError, rule: "upstream",
		reason: "the upstream could not be reached: " + msg, class: "upstream"}
}

// tunnelDialError answers a CONNECT whose (tunnel-mode) dial failed.
func (p *Proxy) tunnelDialError(w io.Writer, ctx *goproxy.ProxyCtx, err error) {
	f := upstreamError(err)
	if errors.Is(err, errAuditUnavailable) {
		f = auditUnavailable()
	}
	st, ok := ctx.Req.Context().Value(tunnelStateKey{}).(*reqState)
	if !ok {
		id, _ := identityFrom(ctx.Req.Context())
		st = p.begin(ctx.Req.Context(), ctx.Req, id, "connect")
		st.ev.Host = ctx.Req.URL.Hostname()
	}
	st.refuse(ctx.Req.Context(), f)
	writeRawRefusal(w, ctx.Req, f)
}

type countingReader struct {
	io.ReadCloser
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n.Add(int64(n))
	return n, err
}

type recordingBody struct {
	io.ReadCloser
	n       int64
	cut     string // what the scrubber refused in the middle of the body
	closed  bool
	onClose func(n int64, cut string)
	onPanic func(any) // logs a panic of the body's readers (the scrubber's, the transport's)
}

// upstreamBody is a response body as it comes from upstream: bytes arriving keep the
// client's connection open, as the client's own bytes do.
type upstreamBody struct {
	io.ReadCloser
	client *idleConn
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.client.touch()
	}
	return n, err
}

// errBodyFailed ends a response body whose reading panicked: the client sees a broken
// response, and the process goes on (red team: inside an intercepted tunnel the body is
// streamed from goproxy's goroutine, which recovers nothing).
var errBodyFailed = errors.New("airlock failed while streaming the response (logged)")

func (b *recordingBody) Read(p []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			b.onPanic(v)
			n, err = 0, errBodyFailed
		}
	}()
	n, err = b.ReadCloser.Read(p)
	b.n += int64(n)
	var ue *secrets.UninspectableError
	if err != nil && b.cut == "" && errors.As(err, &ue) {
		b.cut = ue.What
	}
	return n, err
}

func (b *recordingBody) Close() (err error) {
	defer func() {
		if v := recover(); v != nil {
			b.onPanic(v)
			err = errBodyFailed
		}
	}()
	err = b.ReadCloser.Close()
	if !b.closed {
		b.closed = true
		b.onClose(b.n, b.cut)
	}
	return err
}

func bracket(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

func splitHostPortRaw(hostport string) (string, string, error) {
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") || !strings.Contains(hostport, ":") {
		return hostport, "", nil
	}
	return net.SplitHostPort(hostport)
}

func setEscapedPath(r *http.Request, escaped string) error {
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		return err
	}
	r.URL.Path = dec
	r.URL.RawPath = escaped
	return nil
}

// switched passes a 101 on: the body is the upgraded connection and stays an io.ReadWriter.
// A 101 to a request that did not ask to switch protocols is refused (red team: a hostile
// upstream's unasked 101 opened a raw pipe past the policy, and held the connection with
// its slot already given back). The upgraded connection is closed when the sandbox's
// request ends, so a silent upstream cannot outlive the client.
func (st *reqState) switched(req *http.Request, resp *http.Response, fail func(refusal) (*http.Response, error)) (*http.Response, error) {
	if req.Header.Get("Upgrade") == "" {
		resp.Body.Close()
		return fail(refusal{status: http.StatusBadGateway, decision: event.DecisionError, rule: "upstream",
			reason: "the upstream answered 101 Switching Protocols to a request that did not ask to switch protocols", class: "upstream"})
	}
	st.finish(req.Context())
	body := resp.Body
	resp.Body = &upgradedBody{ReadCloser: body, stop: context.AfterFunc(req.Context(), func() { body.Close() })}
	return resp, nil
}

// upgradedBody is an upgraded connection that stops watching the request when closed.
type upgradedBody struct {
	io.ReadCloser
	stop func() bool
}

func (b *upgradedBody) Write(p []byte) (int, error) {
	w, ok := b.ReadCloser.(io.Writer)
	if !ok {
		return 0, errors.New("the upgraded connection is read-only")
	}
	return w.Write(p)
}

func (b *upgradedBody) Close() error {
	b.stop()
	return b.ReadCloser.Close()
}
