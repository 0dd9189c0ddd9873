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
			headers[strings.ToLower(k)] = v
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
