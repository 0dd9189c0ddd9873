package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/redact"
	"github.com/airlock-proxy/airlock/rego"
)

// tunnel is what a CONNECT established; goproxy hands it to every request read inside it.
type tunnel struct {
	conn net.Conn // the client connection the tunnel runs on
	id   identity.Identity
	host string // normalised CONNECT host: what is dialled
	port int
	rule string
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if ic, ok := r.Context().Value(connKey).(*idleConn); ok {
		ic.watch.served.Store(true)
	}
	id, err := p.identify(r)
	if err != nil {
		st := p.begin(r.Context(), r, identity.Identity{ID: "unknown"}, "identity")
		f := refusal{status: http.StatusProxyAuthRequired, decision: event.DecisionDeny, rule: "identity",
			reason: "this listener needs a valid proxy credential (Proxy-Authorization) issued by airlock; a missing, unknown, expired or revoked one is refused",
			class:  "identity"}
		if errors.Is(err, errCredentialUnchecked) {
			// The error may describe the store; it is logged, never sent to the sandbox.
			p.log.Error("proxy credential refused: revocation list unavailable", "err", err)
			f = refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: "identity",
				reason: "airlock could not check the proxy credential against its revocation list (approval store unavailable); retry later",
				class:  "identity_unavailable"}
		}
		st.refuse(r.Context(), f)
		p.writeRefusal(w, r, f)
		return
	}
	p.gp.ServeHTTP(w, r.WithContext(withIdentity(r.Context(), id)))
}

func (p *Proxy) decide(st *reqState, in *rego.Input) (rego.Decision, error) {
	ctx, done := p.opts.Telemetry.Step(st.ctx, "policy", string(in.Phase), nil)
	d, err := p.opts.Decider.Decide(ctx, in)
	if err != nil {
		done("policy_error")
		return rego.Decision{}, err
	}
	done("")
	return d, nil
}

// decideCalls asks the policy once for a request, or, for a body-aware request, once per
// call its body holds (each call's input has that call's body and view): the strictest
// decision wins (deny, then approve, then allow; the first of equals). A batch's winning
// decision says which call it is about; its response may reflect credentials if any call's
// may, and it may upgrade only if every call's may. The calls are kept (with their
// decisions) for the approval page.
//
// The batch is decided in a function of its own: its copies of the input and decisions
// would otherwise sit in every request's frame (see handleRequest on stack depth).
func (p *Proxy) decideCalls(st *reqState, in *rego.Input, calls []bodyCall) (rego.Decision, error) {
	if len(calls) == 0 {
		return p.decide(st, in)
	}
	return p.decideBatch(st, in, calls)
}

//go:noinline
func (p *Proxy) decideBatch(st *reqState, in *rego.Input, calls []bodyCall) (rego.Decision, error) {
	var win rego.Decision
	won := -1
	reflects, upgrade := false, true
	st.calls = make([]approval.Call, len(calls))
	for i, c := range calls {
		ci := *in
		ci.Request.Body, ci.Request.MCP, ci.Request.GraphQL = c.body, c.mcp, c.graphql
		d, err := p.decide(st, &ci)
		if err != nil {
			return rego.Decision{}, err
		}
		st.calls[i] = approvalCall(c, d)
		reflects = reflects || d.MayReflect()
		upgrade = upgrade && d.Upgrade
		if won < 0 || strictness(d) > strictness(win) {
			win, won = d, i
		}
	}
	if len(calls) > 1 {
		win.Reason = "batch call " + strconv.Itoa(won) + " (" + st.calls[won].Summary() + "): " + win.Reason
		win.Reflects = &reflects
		win.Upgrade = upgrade
	}
	return win, nil
}

// strictness orders decisions: deny (or anything that is not allow or approve) beats
// approve, which beats allow.
func strictness(d rego.Decision) int {
	switch {
	case d.Allows():
		return 0
	case d.NeedsApproval():
		return 1
	}
	return 2
}

// policyUnavailable is the answer when the policy could not decide: fail closed.
//
//go:noinline
func policyUnavailable(err error) refusal {
	return refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: "policy.error",
		reason: "the policy could not be evaluated, so the request is refused; retry later or tell the operator", class: "policy"}
}

// clientClosed is recorded for a request whose client went away (closed its connection, or
// only its sending half, which net/http cannot tell apart) before the policy decided: nobody
// reads the answer, the audit event does. Not a policy failure: nothing is logged as an
// error for it.
//
//go:noinline
func clientClosed() refusal {
	return refusal{status: statusClientClosed, decision: event.DecisionError, rule: "client",
		reason: "the client closed its connection before the policy decided; nothing was sent", class: "client_closed"}
}

// clientClosedUpstream is clientClosed once the request was forwarded: the upstream may have
// received all of it and acted on it (red team: the record said "nothing was sent" of a
// write the upstream had whole), only its answer was not read.
func clientClosedUpstream() refusal {
	f := clientClosed()
	f.reason = "the client closed its connection before the upstream answered; the request was forwarded (the upstream may have received and acted on it), its answer was discarded"
	return f
}

// canceledByClient reports whether err is r's context ending because its client went away.
func canceledByClient(r *http.Request, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(r.Context().Err(), context.Canceled)
}

//go:noinline
func denied(d rego.Decision) refusal {
	reason := d.Reason
	if reason == "" {
		reason = "the policy denies this request"
	}
	return refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: d.Rule, reason: reason, class: "policy"}
}

func (p *Proxy) handleConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := ctx.Req
	id, _ := identityFrom(r.Context())
	st := p.begin(r.Context(), r, id, string(rego.PhaseConnect))
	reject := func(f refusal) (*goproxy.ConnectAction, string) {
		st.refuse(r.Context(), f)
		ctx.Resp = f.response(r)
		return goproxy.RejectConnect, host
	}
	h, port, err := splitHostPort(host, 443)
	if err != nil {
		return reject(refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol",
			reason: "CONNECT target is not a valid host:port: " + err.Error(), class: "bad_request"})
	}
	st.ev.Host, st.ev.Port = h, port
	if !st.acquire() {
		return reject(tooMany())
	}
	defer st.release() // a tunnel holds no slot once it is decided
	dec, err := p.decide(st, connectInput(id, h, port))
	if err != nil && canceledByClient(r, err) {
		return reject(clientClosed())
	}
	if err != nil {
		p.log.Error("policy evaluation failed", "phase", "connect", "sandbox", id.ID, "host", h, "err", err)
		return reject(policyUnavailable(err))
	}
	st.ev.Rule, st.ev.Reason = dec.Rule, dec.Reason
	if dec.Denies() {
		if !p.opts.ReportOnly {
			return reject(denied(dec))
		}
		st.ev.Decision = event.DecisionWouldDeny
		p.log.Warn("report-only: letting a denied CONNECT through", "sandbox", id.ID, "host", h, "port", port, "rule", dec.Rule)
	} else {
		st.ev.Decision = event.Decision(dec.Action)
	}
	target := joinHostPort(h, port)
	if !(dec.Tunnel && !dec.Denies()) {
		if f := p.transparentClassify(r.Context()); f != nil {
			return reject(*f)
		}
	}
	if dec.Tunnel && !dec.Denies() {
		// dialTunnel writes the decision record before dialling, the completion at the end.
		st.ev.Decision = event.DecisionTunnel
		ctx.Req = r.WithContext(context.WithValue(r.Context(), tunnelStateKey{}, st))
		return &goproxy.ConnectAction{Action: goproxy.ConnectAccept}, target
	}
	// Intercepted: the CONNECT's one record is written before the tunnel is accepted.
	if err := st.finish(r.Context()); err != nil {
		f := auditUnavailable()
		ctx.Resp = f.response(r)
		return goproxy.RejectConnect, host
	}
	conn, _ := r.Context().Value(connKey).(net.Conn)
	ctx.UserData = &tunnel{conn: conn, id: id, host: h, port: port, rule: dec.Rule}
	return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: p.mitmTLS(h)}, target
}

// mitmTLS serves a leaf for the CONNECT host, whatever name the client puts in SNI: the
// policy decided on the CONNECT host, which is what is dialled, so a client that asks for
// another name fails its own certificate check.
func (p *Proxy) mitmTLS(host string) func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
	return func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
		return &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return p.opts.CA.Leaf(host)
			},
		}, nil
	}
}

// The refusals' constructors are out of line (go:noinline): inlined, each one's value
// would take a slot of its caller's frame, and handleRequest's frame is on every
// request's stack.
//
//go:noinline
func tooMany() refusal {
	return refusal{status: http.StatusTooManyRequests, decision: event.DecisionDeny, rule: "limits.inflight",
		reason: "too many concurrent requests from this sandbox; wait for some to finish", class: "limit"}
}

func auditUnavailable() refusal {
	return refusal{status: http.StatusServiceUnavailable, decision: event.DecisionError, rule: "audit.unavailable",
		reason: "the audit log cannot be written, so nothing is let through; tell the operator", class: "audit"}
}

func (p *Proxy) handleRequest(r *http.Request, ctx *goproxy.ProxyCtx) (outReq *http.Request, outResp *http.Response) {
	var id identity.Identity
	tun, inTunnel := ctx.UserData.(*tunnel)
	if inTunnel {
		id = tun.id
	} else {
		id, _ = identityFrom(r.Context())
	}
	st := p.begin(r.Context(), r, id, string(rego.PhaseRequest))
	defer func() {
		// A request inside an intercepted tunnel is served in goproxy's goroutine, which
		// recovers nothing: a panic here would end the process, and every sandbox's egress
		// with it (red team). It refuses the request instead.
		if v := recover(); v != nil {
			ctx.RoundTripper = nil
			p.logPanic(v)
			outReq, outResp = refuseRequest(st, r, internalFailure())
		}
	}()
	refuse := func(f refusal) (*http.Request, *http.Response) { return refuseRequest(st, r, f) }
	if inTunnel && headerBytes(r) > p.opts.Limits.MaxHeaderBytes {
		// Requests inside a tunnel are read by goproxy, not by http.Server: its header limit
		// does not apply there, so it is enforced here.
		return refuse(headersTooLarge(p.opts.Limits.MaxHeaderBytes))
	}
	if inTunnel {
		// Nor does its check of header names (http.ReadRequest keeps "Authorization :" as a
		// header named "Authorization "): a name that is not a field name would reach the
		// policy input under a name hiddenHeaders does not know (red team).
		if f := badHeaderName(r.Header); f != nil {
			return refuse(*f)
		}
	}
	t, f := p.resolveTarget(r, tun)
	st.ev.Scheme, st.ev.Host, st.ev.Port, st.ev.Path = t.scheme, t.host, t.port, t.path
	if r.URL != nil && r.URL.RawQuery != "" {
		st.ev.Query = redact.Query(r.URL.RawQuery)
	}
	if f != nil {
		return refuse(*f)
	}
	if !st.acquire() {
		return refuse(tooMany())
	}
	defer func() {
		if ctx.RoundTripper == nil {
			st.release() // not forwarded: every way here refused it already, which released it
		}
	}()

	// The header set that is forwarded is computed once, here, and is what the policy sees,
	// what an approval binds and what goes upstream: headers named in Connection (and the
	// other hop-by-hop headers) are gone before the policy input is built, so a rule can never
	// decide on a header that is not sent, nor miss one that is.
	forwardForm(r.Header, p.gp.KeepAcceptEncoding)
	var calls []bodyCall
	if p.opts.BodyAware != nil && p.opts.BodyAware.BodyAware(t.host, t.path) {
		var f *refusal
		if calls, f = p.readPolicyBody(r, t); f != nil {
			p.discardBody(r)
			return refuse(*f)
		}
	}
	dec, err := p.decideCalls(st, requestInput(id, r, t), calls)
	if err != nil && canceledByClient(r, err) {
		return refuse(clientClosed())
	}
	if err != nil {
		p.logPolicyFailure(id.ID, t.host, err)
		return refuse(policyUnavailable(err))
	}
	st.ev.Rule, st.ev.Reason, st.ev.Decision = dec.Rule, dec.Reason, event.Decision(dec.Action)
	var creds []string
	switch {
	case dec.Denies():
		if !p.opts.ReportOnly {
			return refuse(denied(dec))
		}
		st.ev.Decision = event.DecisionWouldDeny
		p.logReportOnly(id.ID, r.Method, &t, dec.Rule)
	case dec.NeedsApproval():
		var conn net.Conn
		if inTunnel {
			conn = tun.conn
		}
		if f := p.hold(r, st, dec, conn); f != nil {
			return refuse(*f)
		}
		creds = dec.Credentials
	default:
		creds = dec.Credentials
	}
	if dec.CredentialOptional {
		creds = p.configuredCredentials(creds)
	}
	st.creds = creds
	st.reflects, st.upgrade = dec.MayReflect(), dec.Upgrade
	st.ev.Creds = creds
	ctx.RoundTripper = &upstream{p: p, st: st}
	return r, nil
}

// resolveTarget normalises the destination, path and query (parseTarget), rewrites r.URL to
// exactly that, and refuses host confusion: inside a
// tunnel the Host header must name the CONNECT target; in absolute form the URL's host is
// the target and the Host header is replaced (RFC 9112 §3.2.2).
func (p *Proxy) resolveTarget(r *http.Request, tun *tunnel) (target, *refusal) {
	bad := func(reason string) (target, *refusal) {
		return target{}, &refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol", reason: reason, class: "bad_request"}
	}
	if r.URL == nil {
		return bad("request has no URL")
	}
	if r.URL.User != nil {
		return bad("URLs with user:password@ are not accepted; airlock attaches credentials itself")
	}
	t := target{scheme: r.URL.Scheme}
	if t.scheme != "http" && t.scheme != "https" {
		return bad("only http and https URLs can be proxied, not " + strconv.Quote(t.scheme))
	}
	defPort := 80
	if t.scheme == "https" {
		defPort = 443
	}
	if tun != nil {
		hostHeader := r.Host
		if hostHeader == "" {
			hostHeader = tun.host
		}
		h, port, err := splitHostPort(hostHeader, tun.port)
		if err != nil {
			return bad("Host header is not a valid host: " + err.Error())
		}
		if h != tun.host || port != tun.port && hasExplicitPort(hostHeader) {
			return target{scheme: t.scheme, host: h, port: port}, &refusal{status: http.StatusMisdirectedRequest, decision: event.DecisionDeny, rule: "protocol.host_mismatch",
				reason: "the Host header (" + h + ") does not name the CONNECT target (" + tun.host + "); send requests for another host through their own CONNECT", class: "bad_request"}
		}
		t.host, t.port = tun.host, tun.port
	} else {
		h, port, err := splitHostPort(r.URL.Host, defPort)
		if err != nil {
			return bad("request URL host is not valid: " + err.Error())
		}
		t.host, t.port = h, port
	}
	rt, err := parseTarget(r)
	if err != nil {
		return target{scheme: t.scheme, host: t.host, port: t.port}, &refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol", reason: err.Error(), class: "bad_request"}
	}
	t.path, t.query = rt.path, rt.query
	// What is dialled and sent is exactly what the policy sees.
	if t.port == defPort {
		r.URL.Host = bracket(t.host)
	} else {
		r.URL.Host = joinHostPort(t.host, t.port)
	}
	r.Host = ""
	if err := setEscapedPath(r, t.path); err != nil {
		return bad(err.Error())
	}
	r.URL.RawQuery = encodeQuery(t.query)
	r.URL.Opaque, r.URL.ForceQuery, r.URL.Fragment, r.URL.RawFragment = "", false, "", ""
	return t, nil
}

// headerBytes is the size of r's request line and headers as a client sent them.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func hasExplicitPort(hostport string) bool {
	_, p, err := splitHostPortRaw(hostport)
	return err == nil && p != ""
}
