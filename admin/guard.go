package admin

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
)

// Bounds of the admin listener. The admin API answers operators and orchestrators with
// small JSON bodies; nothing on it needs more, and an unauthenticated route (the login
// form, /healthz) must not let anyone hold memory or connections.
const (
	DefaultMaxBodyBytes      = 1 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included (net/http lifts it
	// once the body is read, so a long response is bounded only by the write timeout,
	// which the approvals event stream lifts for itself).
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 60 * time.Second
	DefaultIdleTimeout  = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's header block.
	DefaultMaxHeaderBytes = 64 << 10
)

// ServerLimits bound the admin listener's connections; a zero field takes its default.
type ServerLimits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
}

// NewServer returns the http.Server for the admin handler h, with every connection bounded:
// header and whole-request read time, response write time, idle keep-alive time and header
// size. Bodies are bounded by the handler New returns (Options.MaxBodyBytes).
func NewServer(h http.Handler, l ServerLimits) *http.Server {
	def := func(d, v time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return v
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: def(l.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       def(l.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      def(l.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       def(l.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// hostGuard answers only requests whose Host names this server: an IP address (the
// listener's, or any other: an IP literal cannot be rebound), localhost, or one of the
// configured names. A web page that rebinds its own DNS name to the admin listener's
// address makes the operator's browser send that name as Host, and is refused here: this
// is what keeps a malicious page from reading /v1/policy or /metrics, or posting to the
// approvals login form, through the browser. The port is not compared (a port mapping
// changes it, and the name is what a rebinding page cannot forge).
type hostGuard struct {
	names map[string]bool
}

func newHostGuard(names []string) *hostGuard {
	g := &hostGuard{names: map[string]bool{"localhost": true}}
	for _, n := range names {
		if n = normalizeHostName(n); n != "" {
			g.names[n] = true
		}
	}
	return g
}

// normalizeHostName lower-cases a name and drops a port, IPv6 brackets and a trailing dot.
func normalizeHostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func (g *hostGuard) allowed(hostport string) bool {
	h := normalizeHostName(hostport)
	if h == "" {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return g.names[h]
}

func (g *hostGuard) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allowed(r.Host) {
			host := r.Host
			if len(host) > 100 {
				host = host[:100] + "..."
			}
			jsonapi.Error(w, http.StatusMisdirectedRequest, fmt.Sprintf("the admin API does not answer to Host %q: only to IP addresses, localhost and the names in admin.hosts "+
				"(this refuses web pages that rebind a DNS name to this address); if the name is yours, add it to admin.hosts", host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody refuses a request body over limit with 413 before any handler reads it: at
// once when Content-Length says so, after reading limit+1 bytes when the length is not
// known (chunked), so every route (the login form included) is bounded the same way.
func limitBody(limit int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tooLarge := func() {
				w.Header().Set("Connection", "close")
				jsonapi.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes (admin.max_body_bytes)", limit))
			}
			switch {
			case r.ContentLength > limit:
				tooLarge()
				return
			case r.ContentLength < 0:
				b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
				if err != nil {
					w.Header().Set("Connection", "close")
					jsonapi.Error(w, http.StatusBadRequest, "reading the request body failed")
					return
				}
				if int64(len(b)) > limit {
					tooLarge()
					return
				}
				r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			default:
				r.Body = http.MaxBytesReader(w, r.Body, limit)
			}
			next.ServeHTTP(w, r)
		})
	}
}
