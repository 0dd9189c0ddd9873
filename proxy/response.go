package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/secrets"
)

// A request that carries credentials is sent and answered under two extra rules, both here:
// withCredentials shapes the outbound request before the credentials are attached, and
// guardResponse is the one place every byte the upstream returns on it passes (status
// line, headers, trailers, body, a 101 and the upgraded stream; the transport keeps 1xx
// informational responses to itself and an HTTP/2 upstream's frames arrive as these same
// parts). Unless the rule declared "reflects": false, the destination is taken to echo
// what it receives: nothing that could carry a value past the scrubber is passed on.

// withCredentials refuses an Upgrade the rule did not allow (with "upgrade": true and
// "reflects": false: an upgraded stream is interactive, and the scrubber's fixed hold-back
// would keep back the end of every message the sandbox waits for) and, for a destination
// that may reflect, removes what would let the sandbox reassemble a value from pieces
// (Range).
func (st *reqState) withCredentials(req *http.Request) *refusal {
	if up := req.Header.Get("Upgrade"); up != "" && (!st.upgrade || st.reflects) {
		return &refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: st.ev.Rule, class: "policy",
			reason: fmt.Sprintf("this request asks to switch protocols (Upgrade: %s) and carries credentials (%s); "+
				"an upgraded connection is not an HTTP response airlock can check as a whole, so the rule %s must declare \"upgrade\": true and \"reflects\": false "+
				"(the destination never echoes the credentials) to allow it; ask the operator",
				up, strings.Join(st.creds, ", "), st.ev.Rule)}
	}
	if st.reflects {
		for _, h := range []string{"Range", "If-Range", "Request-Range", "Sec-WebSocket-Extensions"} {
			req.Header.Del(h)
		}
	}
	return nil
}

// afterAttach undoes the broker's Accept-Encoding: identity for a destination that does
// not reflect: its body is not read, so the transport may negotiate and decode gzip.
func (st *reqState) afterAttach(req *http.Request) {
	if !st.reflects {
		req.Header.Del("Accept-Encoding")
	}
}

// guardResponse scrubs resp, or says why it must not reach the sandbox (its body is then
// closed).
func (st *reqState) guardResponse(req *http.Request, resp *http.Response, scrub secrets.Scrubber) *refusal {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return st.guardUpgrade(req, resp, scrub)
	}
	if !st.reflects {
		scrub.ScrubHead(resp)
		return nil
	}
	err := scrub.ScrubResponse(resp)
	if err == nil {
		return nil
	}
	what := "a response it could not read"
	var ue *secrets.UninspectableError
	if errors.As(err, &ue) {
		what = ue.What
	}
	return &refusal{status: http.StatusBadGateway, decision: event.DecisionError, rule: st.ev.Rule, class: "uninspectable",
		reason: fmt.Sprintf("the upstream answered with %s, which airlock cannot check for the credentials it attached (%s), so the response is withheld; "+
			"ask for it without that encoding, or, if this destination never echoes credentials, the rule %s must declare \"reflects\": false (ask the operator)",
			what, strings.Join(st.creds, ", "), st.ev.Rule)}
}

// guardUpgrade passes a 101 only when the request asked to upgrade and the rule allowed it
// for a destination that does not reflect; its headers are scrubbed, the stream is not.
func (st *reqState) guardUpgrade(req *http.Request, resp *http.Response, scrub secrets.Scrubber) *refusal {
	refuse := func(reason string) *refusal {
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		return &refusal{status: http.StatusBadGateway, decision: event.DecisionError, rule: st.ev.Rule, class: "uninspectable", reason: reason}
	}
	if !st.upgrade || st.reflects || req.Header.Get("Upgrade") == "" {
		return refuse("the upstream switched protocols (101) on a request that carries credentials and was not allowed to upgrade; the connection is closed")
	}
	scrub.ScrubHead(resp)
	return nil
}
