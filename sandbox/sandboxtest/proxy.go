// Package sandboxtest has helpers for tests of code that runs sandboxes.
package sandboxtest

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Proxy is a minimal plain-HTTP forward proxy implementing sandbox.ProxyHost, for tests
// that need traffic out of a sandbox without airlock's proxy. It forwards requests for the
// allowed hosts (host:port as in the request URL) and answers 403 to anything else, CONNECT
// included. It records who asked for what.
type Proxy struct {
	allowed []string

	mu   sync.Mutex
	seen []Request
}

// Request is one request the proxy saw.
type Request struct {
	Sandbox string // identity id of the listener it arrived on
	Method  string
	URL     string
	Allowed bool
}

var _ sandbox.ProxyHost = (*Proxy)(nil)

// NewProxy returns a proxy forwarding to the given host:port destinations only.
func NewProxy(allowed ...string) *Proxy { return &Proxy{allowed: allowed} }

// Attach serves ln for id until detach is called.
func (p *Proxy) Attach(ln net.Listener, id sandbox.Identity) (detach func()) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(id, w, r)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}
}

// Requests returns what the proxy saw so far.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func (p *Proxy) serve(id sandbox.Identity, w http.ResponseWriter, r *http.Request) {
	ok := r.Method != http.MethodConnect && r.URL.IsAbs() && slices.Contains(p.allowed, r.URL.Host)
	p.mu.Lock()
	p.seen = append(p.seen, Request{Sandbox: id.ID, Method: r.Method, URL: r.URL.String(), Allowed: ok})
	p.mu.Unlock()
	if !ok {
		http.Error(w, "denied by test proxy", http.StatusForbidden)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.Header = r.Header.Clone()
	out.Header.Set("X-Sandbox-Id", id.ID)
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
