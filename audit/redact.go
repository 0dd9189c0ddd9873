package audit

import (
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/redact"
)

var errorClassRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// Sanitized returns a copy of ev that cannot carry a secret value: the query is redacted
// (redact.Query), an error class that is not a short token ([a-z0-9_.-], at most 64 bytes)
// becomes "invalid" (it must be a class such as "vault_unreachable", never an error text),
// free-text fields are bounded, and the labels map is copied. The sink applies it to every
// event it writes.
func (ev Event) Sanitized() Event {
	ev.scrub()
	if ev.Labels != nil {
		l := make(map[string]string, len(ev.Labels))
		for k, v := range ev.Labels {
			l[k] = v
		}
		ev.Labels = l
	}
	if ev.Creds != nil {
		ev.Creds = append([]string(nil), ev.Creds...)
	}
	return ev
}

// scrub is Sanitized in place without copying the labels and credentials, for an event
// that is encoded at once (the sink's Record). Every string a sandbox can choose or
// lengthen is bounded (see the Max* constants): a longer one is cut at a character
// boundary and ends in a marker saying how much was cut ("…[truncated 123 bytes]").
func (ev *Event) scrub() {
	ev.Query = bound(redact.Query(ev.Query), MaxQueryBytes)
	if ev.ErrorClass != "" && !errorClassRE.MatchString(ev.ErrorClass) {
		ev.ErrorClass = "invalid"
	}
	ev.Path = bound(ev.Path, MaxPathBytes)
	ev.Host = bound(ev.Host, MaxNameBytes)
	ev.Method = bound(ev.Method, MaxNameBytes)
	ev.Scheme = bound(ev.Scheme, MaxNameBytes)
	ev.Phase = bound(ev.Phase, MaxNameBytes)
	ev.SandboxID = bound(ev.SandboxID, MaxNameBytes)
	ev.Approver = bound(ev.Approver, MaxNameBytes)
	ev.ApprovalID = bound(ev.ApprovalID, MaxNameBytes)
	ev.Reason = bound(ev.Reason, MaxReasonBytes)
	ev.Rule = bound(ev.Rule, MaxNameBytes)
	if long(ev.Labels) {
		ev.Labels = boundLabels(ev.Labels)
	}
	for i, c := range ev.Creds {
		if len(c) > MaxNameBytes {
			ev.Creds = append([]string(nil), ev.Creds...)
			ev.Creds[i] = bound(c, MaxNameBytes)
		}
	}
}

// Bounds of an audit record's fields, in bytes, before the truncation marker.
const (
	MaxPathBytes   = 2048 // the request path
	MaxQueryBytes  = 2048 // the (redacted) query
	MaxReasonBytes = 1024 // the reason text
	MaxNameBytes   = 256  // host, method, rule, sandbox, labels, credential names and the like
)

func long(m map[string]string) bool {
	for k, v := range m {
		if len(k) > MaxNameBytes || len(v) > MaxNameBytes {
			return true
		}
	}
	return false
}

// boundLabels is labels with every key and value bounded. Long keys that share their first
// MaxNameBytes and their length would be cut to the same key, and all but one lost (red
// team): the second and later of them, in key order, get " #2", " #3"... after the cut.
// A cut key is longer than MaxNameBytes, so it cannot meet a key that was not cut.
func boundLabels(labels map[string]string) map[string]string {
	l := make(map[string]string, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b := bound(k, MaxNameBytes)
		for n := 2; ; n++ {
			if _, taken := l[b]; !taken {
				break
			}
			b = bound(k, MaxNameBytes) + " #" + strconv.Itoa(n)
		}
		l[b] = bound(labels[k], MaxNameBytes)
	}
	return l
}

// bound cuts s to at most n bytes at a character boundary and marks how much was cut.
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut > n-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[truncated " + strconv.Itoa(len(s)-cut) + " bytes]"
}

// NewRequestEvent fills the request fields of an event from what a sandbox sent: method,
// scheme, host (lower case, without port), port, path and the redacted query. It reads no
// header, no body and no user info, so none of them can reach the audit log. The caller adds
// sandbox, decision and the rest.
func NewRequestEvent(r *http.Request) Event {
	ev := Event{Time: time.Now().UTC(), Kind: event.KindRequest, Method: r.Method}
	u := r.URL
	if u == nil {
		u = &url.URL{}
	}
	ev.Scheme = strings.ToLower(u.Scheme)
	hostport := u.Host
	if hostport == "" {
		hostport = r.Host
	}
	host, port := splitHostPort(hostport)
	ev.Host = strings.TrimSuffix(strings.ToLower(host), ".")
	ev.Port = port
	if ev.Port == 0 {
		switch ev.Scheme {
		case "https":
			ev.Port = 443
		case "http":
			ev.Port = 80
		}
	}
	if r.Method == http.MethodConnect {
		ev.Kind = event.KindConnect
		if ev.Port == 0 {
			ev.Port = 443
		}
		return ev
	}
	ev.Path = u.EscapedPath()
	ev.Query = redact.Query(u.RawQuery)
	return ev
}

func splitHostPort(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return strings.Trim(hostport, "[]"), 0
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return host, 0
	}
	return host, port
}
