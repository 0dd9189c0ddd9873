package proxy

import (
	"net/http"
	"strings"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/rego"
)

// hiddenHeaders never reach the policy input (the policy contract: values of Authorization, Cookie,
// Proxy-Authorization are never in the input).
var hiddenHeaders = map[string]bool{
	"Authorization":       true,
	"Cookie":              true,
	"Proxy-Authorization": true,
	"Proxy-Connection":    true,
}

// lowerHeader is a header name in lower case, as the policy input keys it, without
// allocating for the names most requests carry (strings.ToLower allocates for every
// canonical name, each request's every header).
func lowerHeader(k string) string {
	if l, ok := lowerNames[k]; ok {
		return l
	}
	return strings.ToLower(k)
}

var lowerNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Baggage",
		"Cache-Control", "Connection", "Content-Encoding", "Content-Length", "Content-Type", "Dnt", "Expect",
		"Forwarded", "From", "Host", "If-Match", "If-Modified-Since", "If-None-Match", "If-Range",
		"If-Unmodified-Since", "Keep-Alive", "Origin", "Pragma", "Priority", "Range", "Referer",
		"Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Websocket-Extensions", "Sec-Websocket-Key",
		"Sec-Websocket-Protocol", "Sec-Websocket-Version", "Te", "Traceparent", "Tracestate", "Trailer",
		"Transfer-Encoding", "Upgrade", "User-Agent", "Via", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Request-Id", "X-Requested-With"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// target is a request's destination after normalisation: what the policy sees and what is
// dialled.
type target struct {
	scheme string
	host   string // normalised
	port   int
	path   string // normalised, escaped form
	query  []queryPair
}

func sandboxInput(id identity.Identity) rego.SandboxInput {
	return rego.SandboxInput{ID: id.ID, Labels: id.Labels}
}

func connectInput(id identity.Identity, host string, port int) *rego.Input {
	return &rego.Input{
		Version: rego.InputVersion,
		Phase:   rego.PhaseConnect,
		Sandbox: sandboxInput(id),
		Request: rego.RequestInput{Method: http.MethodConnect, Host: host, Port: port},
	}
}

func requestInput(id identity.Identity, r *http.Request, t target) *rego.Input {
	var headers map[string][]string
	if len(r.Header) > 0 {
		headers = make(map[string][]string, len(r.Header))
		for k, v := range r.Header {
			if hiddenHeaders[k] {
				continue
			}
			headers[lowerHeader(k)] = v
		}
	}
	return &rego.Input{
		Version: rego.InputVersion,
		Phase:   rego.PhaseRequest,
		Sandbox: sandboxInput(id),
		Request: rego.RequestInput{
			Method:  r.Method,
			Scheme:  t.scheme,
			Host:    t.host,
			Port:    t.port,
			Path:    t.path,
			Query:   queryMap(t.query),
			Headers: headers,
		},
	}
}
