package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/panicinfo"
	"github.com/airlock-proxy/airlock/internal/redact"
)

// refusal is every answer the proxy gives instead of the upstream's, mapped to a status in
// one place. The text is written for the agent that reads it: what was refused, by which
// rule, why, and what to do.
type refusal struct {
	status   int
	decision event.Decision // deny or error
	rule     string
	reason   string
	class    string // error class for audit and metrics: policy, identity, dial_guard, upstream...
	extra    http.Header
}

// Statuses: 403 policy or dial guard, 407 identity, 400 malformed, 413 body too large,
// 421 host confusion, 429 too many requests, 502/504 upstream, 503 policy or a dependency
// (Vault, approval store, audit sink) unavailable.

type refusalBody struct {
	Error    string         `json:"error"`
	Status   int            `json:"status"`
	Decision event.Decision `json:"decision"`
	Rule     string         `json:"rule,omitempty"`
	Reason   string         `json:"reason"`
	Method   string         `json:"method,omitempty"`
	URL      string         `json:"url,omitempty"`
}

func (f refusal) body(r *http.Request) (contentType string, b []byte) {
	target := ""
	if r != nil {
		if r.Method == http.MethodConnect {
			target = "CONNECT " + r.Host
		} else if r.URL != nil {
			target = r.Method + " " + redactedURL(r)
		}
	}
	if r != nil && strings.Contains(r.Header.Get("Accept"), "application/json") {
		rb := refusalBody{Error: "airlock refused the request", Status: f.status, Decision: f.decision,
			Rule: f.rule, Reason: f.reason}
		if r.URL != nil {
			rb.Method = r.Method
			rb.URL = redactedURL(r)
		}
		b, _ := json.Marshal(rb)
		return "application/json", append(b, '\n')
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "airlock refused %s (%d %s)\n", target, f.status, http.StatusText(f.status))
	fmt.Fprintf(&buf, "decision: %s\n", f.decision)
	if f.rule != "" {
		fmt.Fprintf(&buf, "rule: %s\n", f.rule)
	}
	fmt.Fprintf(&buf, "reason: %s\n", f.reason)
	return "text/plain; charset=utf-8", buf.Bytes()
}

func (f refusal) header() http.Header {
	h := http.Header{}
	for k, v := range f.extra {
		h[k] = v
	}
	h.Set("X-Airlock-Decision", string(f.decision))
	if f.rule != "" {
		h.Set("X-Airlock-Rule", headerSafe(f.rule))
	}
	h.Set("X-Airlock-Reason", headerSafe(f.reason))
	h.Set("Cache-Control", "no-store")
	if f.status == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Basic realm="airlock"`)
	}
	return h
}

// response builds the refusal as an *http.Response for goproxy to write.
func (f refusal) response(r *http.Request) *http.Response {
	ct, b := f.body(r)
	h := f.header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	return &http.Response{
		StatusCode:    f.status,
		Status:        fmt.Sprintf("%d %s", f.status, http.StatusText(f.status)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       r,
		Close:         f.status == http.StatusBadRequest || f.status == http.StatusMisdirectedRequest,
	}
}

func (p *Proxy) writeRefusal(w http.ResponseWriter, r *http.Request, f refusal) {
	ct, b := f.body(r)
	for k, v := range f.header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(f.status)
	_, _ = w.Write(b)
}

// writeRawRefusal writes the refusal on a hijacked connection (a CONNECT that failed).
func writeRawRefusal(w io.Writer, r *http.Request, f refusal) {
	resp := f.response(r)
	resp.Close = true
	_ = resp.Write(w)
}

// headerSafe keeps a header value on one line of printable ASCII.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = ' '
		}
	}
	if len(b) > 300 {
		b = append(b[:297], "..."...)
	}
	return string(b)
}

// redactedURL is the request URL with query values replaced, for texts and logs.
func redactedURL(r *http.Request) string {
	u := *r.URL
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = redact.Query(u.RawQuery)
	}
	return u.String()
}

//go:noinline
func headersTooLarge(max int) refusal {
	return refusal{status: http.StatusRequestHeaderFieldsTooLarge, decision: event.DecisionDeny, rule: "limits.header",
		reason: "the request headers exceed the proxy's limit of " + strconv.Itoa(max) + " bytes", class: "limit"}
}

// badHeaderName refuses a request with a header name that is not an HTTP field name (a
// token, RFC 9110 §5.1: no space before the colon, no control or separator bytes), as
// net/http's server refuses one outside a tunnel; nil when every name is valid.
//
//go:noinline
func badHeaderName(h http.Header) *refusal {
	for k := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			if len(k) > 64 {
				k = k[:64] + "..."
			}
			return &refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol", class: "bad_request",
				reason: fmt.Sprintf("the header name %q is not a valid HTTP field name (RFC 9110 section 5.1: a token, no space before the colon)", k)}
		}
	}
	return nil
}

// internalFailure answers a request whose handling failed inside airlock (a recovered
// panic): nothing was sent.
//
//go:noinline
func internalFailure() refusal {
	return refusal{status: http.StatusInternalServerError, decision: event.DecisionError, rule: "internal",
		reason: "airlock failed while handling this request (the operator's log says why); nothing was sent", class: "internal"}
}

// logPanic logs a recovered panic: its value (bounded) and where it happened.
//
//go:noinline
func (p *Proxy) logPanic(v any) {
	p.log.Error("panic while handling a request; refused", "panic", panicinfo.Describe(v), "stack", string(debug.Stack()))
}

// refuseRequest records f and answers r with it (out of line, as the constructors above).
//
//go:noinline
func refuseRequest(st *reqState, r *http.Request, f refusal) (*http.Request, *http.Response) {
	st.refuse(r.Context(), f)
	return r, f.response(r)
}

// logPolicyFailure and logReportOnly are out of line: a log call's arguments take a slot of
// handleRequest's frame each, and that frame is on every request's stack.
//
//go:noinline
func (p *Proxy) logPolicyFailure(sandbox, host string, err error) {
	p.log.Error("policy evaluation failed", "phase", "request", "sandbox", sandbox, "host", host, "err", err)
}

//go:noinline
func (p *Proxy) logReportOnly(sandbox, method string, t *target, rule string) {
	p.log.Warn("report-only: letting a denied request through", "sandbox", sandbox, "method", method, "host", t.host, "path", t.path, "rule", rule)
}
