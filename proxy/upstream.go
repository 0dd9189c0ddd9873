package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"golang.org/x/net/http/httpguts"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/telemetry"
)

func newTransport(g *Guard, ut *upstreamTLS, opts Options) (*http.Transport, error) {
	return &http.Transport{
		Proxy:       nil,
		DialContext: g.DialContext,
		// Every HTTPS connection is made by ut, which verifies the certificate for the
		// name that was dialled (TLSClientConfig and TLSHandshakeTimeout are unused).
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			raw, err := g.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if ctx.Value(onlyHTTP1{}) != nil {
				return ut.client(ctx, raw, host, "http/1.1")
			}
			return ut.client(ctx, raw, host, "h2", "http/1.1")
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          2048,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: opts.Limits.UpstreamHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}, nil
}

// onlyHTTP1 marks the context of a request that exists only in HTTP/1.1 (a WebSocket
// upgrade), so that a TLS connection dialled for it offers no h2. The Transport does this
// itself for the TLS it makes (its connections for such requests are a pool of their own,
// and its dials keep the request context's values); for a TLS dial of ours, the dialler
// has only the context to go by.
type onlyHTTP1 struct{}

// requiresHTTP1 is net/http's test for a request its Transport sends only over HTTP/1.1.
func requiresHTTP1(req *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") &&
		strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
}

// upstreamTLSTimeout bounds a TLS handshake with an upstream (the Transport's own
// TLSHandshakeTimeout, which a custom TLS dial does not get).
const upstreamTLSTimeout = 10 * time.Second

// upstreamTLS makes the TLS client side of every upstream connection, the Transport's and
// the direct path's alike.
type upstreamTLS struct {
	// extra roots beside the system's (--upstream-ca); nil: the system roots only.
	extra *x509.CertPool
}

// client completes a TLS handshake over raw with host (a name or an IP address, as
// dialled) as the name the certificate must be for, offering protos, within
// upstreamTLSTimeout. raw is closed on failure.
//
// The name is bound here, per connection, and not read back from the connection state:
// for an IP address crypto/tls sends no SNI and reports an empty ServerName, and a
// verification keyed on that checked no name at all, so that a certificate for any name
// chaining to a trusted root was taken for an IP upstream's.
func (u *upstreamTLS) client(ctx context.Context, raw net.Conn, host string, protos ...string) (*tls.Conn, error) {
	// RootCAs nil: the system roots, which crypto/x509 loads at the first verification,
	// not at start-up (parsing the system bundle is ~25 ms of a one-shot run, and a run
	// that makes no TLS request never needs it). A host without roots verifies nothing,
	// as an empty pool would.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, NextProtos: protos}
	if extra := u.extra; extra != nil {
		// x509.CertPool cannot be merged: the extra roots are tried beside the system's
		// in VerifyConnection (a nil pool there is the system roots).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyWithPools(cs, host, nil, extra)
		}
	}
	tc := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, upstreamTLSTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

// verifyWithPools verifies the server chain, for host, against the system roots or the
// extra roots.
func verifyWithPools(cs tls.ConnectionState, host string, pools ...*x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("upstream sent no certificate")
	}
	if host == "" {
		return errors.New("no upstream name to verify its certificate for")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	// The error said is the one of a pool the chain reached (a wrong name, an expired
	// certificate), not "unknown authority" from a pool it has nothing to do with.
	var why error
	for _, pool := range pools {
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: host, Roots: pool, Intermediates: inter})
		if err == nil {
			return nil
		}
		var unknown x509.UnknownAuthorityError
		if why == nil || !errors.As(err, &unknown) {
			why = err
		}
	}
	return why
}

// LoadCAFile reads PEM certificates for --upstream-ca.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New(path + ": no PEM certificates found")
	}
	return pool, nil
}

// hopHeaders are removed before a request goes upstream (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding"}

func removeHopHeaders(h http.Header) {
	upgrade := h.Get("Upgrade")
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" && !strings.EqualFold(name, "Upgrade") {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	if upgrade != "" {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	} else {
		h.Del("Upgrade")
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
