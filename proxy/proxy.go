// Package proxy is airlock's forward proxy: every request a sandbox makes is identified,
// checked against the policy, held for approval when the policy says so, given its
// credentials on the way out, sent through the dial guard, scrubbed on the way back and
// recorded.
package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// Options configure a Proxy. Decider and CA are required; a nil hook means "none", and the
// proxy then fails closed where the hook would be needed (a decision naming credentials with
// no CredentialSource, an approve decision with no Approver).
type Options struct {
	Decider Decider
	// BodyAware names the destinations whose JSON bodies the policy reads (body, mcp and
	// graphql in the input). nil: the Decider's, if it implements BodyAwareness (as
	// *rego.Engine does); otherwise no destination is body-aware.
	BodyAware   BodyAwareness
	CA          *ca.CA
	Credentials CredentialSource
	Approver    Approver
	// Execs attributes requests to sandbox session commands; nil means none are.
	Execs     ExecCredentials
	Auditor   Auditor
	Telemetry Telemetry

	AllowPrivate []netip.Prefix // destinations in these ranges may be dialled
	UpstreamCAs  *x509.CertPool // extra roots for upstream servers; system roots always apply
	Resolver     Resolver       // nil: the system resolver
	// Parent sends airlock's own outbound connections through a parent HTTP proxy with
	// CONNECT (upstream_proxy, or HTTPS_PROXY/NO_PROXY of airlock's environment).
	Parent         ParentProxy
	RequireAuth    bool          // requests on a shared listener without a proxy credential get 407
	Tokens         TokenOptions  // per-sandbox proxy credentials: in memory unless keys are set
	ReportOnly     bool          // rollout mode: denied requests pass, recorded as would_deny
	PolicyRevision func() string // for audit events; may be nil
	Logger         *slog.Logger
	Limits         Limits
}

// Limits bound what one client can make the proxy hold.
type Limits struct {
	MaxHeaderBytes int   // request header bytes; default 64 KiB
	MaxBodyBytes   int64 // bodies buffered for approval; default 1 MiB (larger: 413)
	// MaxPolicyBodyBytes bounds the body of a request to a body-aware destination, read
	// whole before the policy is asked; default 1 MiB (larger: 413).
	MaxPolicyBodyBytes    int64
	ReadHeaderTimeout     time.Duration // default 10s
	IdleTimeout           time.Duration // a connection silent this long is closed; default 5m
	UpstreamHeaderTimeout time.Duration // wait for upstream response headers; default 60s
	MaxInFlightPerSandbox int           // concurrent requests per sandbox; default 512 (more: 429)
	MaxConnsPerListener   int           // accepted connections per listener; default 20000
	// Requests waiting for approval, per sandbox: how many at once (more: 429) and their
	// buffered bodies together (more: 413); and all sandboxes' held bodies together (more:
	// 413). Defaults: approval.DefaultMaxPendingPerSandbox, DefaultMaxHeldBytesPerSandbox,
	// DefaultMaxHeldBytes (approvals.max_pending_per_sandbox, max_held_bytes_per_sandbox,
	// max_held_bytes in the config file).
	MaxHeldPerSandbox      int
	MaxHeldBytesPerSandbox int64
	MaxHeldBytes           int64
	// MaxRedactionsPerCredential: once the scrubber has redacted a credential this many
	// times in one sandbox's responses, that sandbox may no longer use it (403): an upstream
	// that keeps echoing it is being used to test guesses. Default DefaultMaxRedactions.
	MaxRedactionsPerCredential int
}

// DefaultMaxRedactions is the default of Limits.MaxRedactionsPerCredential.
const DefaultMaxRedactions = 10

func (l *Limits) setDefaults() {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 1 << 20
	}
	if l.MaxPolicyBodyBytes <= 0 {
		l.MaxPolicyBodyBytes = 1 << 20
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	if l.UpstreamHeaderTimeout <= 0 {
		l.UpstreamHeaderTimeout = 60 * time.Second
	}
	if l.MaxInFlightPerSandbox <= 0 {
		l.MaxInFlightPerSandbox = 512
	}
	if l.MaxConnsPerListener <= 0 {
		l.MaxConnsPerListener = 20000
	}
	if l.MaxRedactionsPerCredential <= 0 {
		l.MaxRedactionsPerCredential = DefaultMaxRedactions
	}
	if l.MaxHeldPerSandbox <= 0 {
		l.MaxHeldPerSandbox = approval.DefaultMaxPendingPerSandbox
	}
	if l.MaxHeldBytesPerSandbox <= 0 {
		l.MaxHeldBytesPerSandbox = max(int64(approval.DefaultMaxHeldBytesPerSandbox), l.MaxBodyBytes)
	}
	if l.MaxHeldBytes <= 0 {
		l.MaxHeldBytes = max(int64(approval.DefaultMaxHeldBytes), l.MaxHeldBytesPerSandbox)
	}
}

// Proxy is a running airlock proxy. It serves any number of listeners.
type Proxy struct {
	opts   Options
	log    *slog.Logger
	gp     *goproxy.ProxyHttpServer
	guard  *Guard
	tr     *http.Transport
	h1     *h1Transport // GETs and HEADs to plain-HTTP upstreams (h1.go)
	tokens tokens
	flight inflight
	held   *heldBudget
	// redacted counts redactions per sandbox and credential (Limits.MaxRedactionsPerCredential).
	redacted redactions

	mu      sync.Mutex
	servers map[*http.Server]struct{}
	closed  bool
}

// New builds a proxy. It does not listen: call Serve or Attach.
func New(opts Options) (*Proxy, error) {
	if opts.Decider == nil {
		return nil, errors.New("proxy: Options.Decider is required")
	}
	if opts.CA == nil {
		return nil, errors.New("proxy: Options.CA is required")
	}
	opts.Limits.setDefaults()
	if opts.BodyAware == nil {
		opts.BodyAware, _ = opts.Decider.(BodyAwareness)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Telemetry == nil {
		opts.Telemetry = noTelemetry{}
	}
	p := &Proxy{
		opts:    opts,
		log:     opts.Logger.With("component", "proxy"),
		servers: map[*http.Server]struct{}{},
		held:    newHeldBudget(opts.Limits.MaxHeldPerSandbox, opts.Limits.MaxHeldBytesPerSandbox, opts.Limits.MaxHeldBytes),
	}
	if opts.ReportOnly {
		p.log.Warn("REPORT-ONLY MODE: requests the policy denies are let through and recorded as would_deny; nothing is enforced")
	}
	if err := p.tokens.init(opts.Tokens); err != nil {
		return nil, err
	}
	p.guard = &Guard{Allow: opts.AllowPrivate, Resolver: opts.Resolver}
	if opts.Parent.URL != nil {
		p.guard.Parent = &p.opts.Parent
		// The parent proxy is airlock's own way out: a sandbox may never reach it as a
		// destination (its own CONNECT through a tunnel would skip every check here).
		for _, a := range parentAddrs(opts.Parent.URL.Hostname(), opts.Parent.URL.Port()) {
			p.guard.AddSelf(a)
		}
	}
	ut := &upstreamTLS{extra: opts.UpstreamCAs}
	p.tr = newTransport(p.guard, ut, opts)
	p.h1 = &h1Transport{dial: p.guard.DialContext, tls: ut, headerTimeout: opts.Limits.UpstreamHeaderTimeout}
	p.gp = p.newGoproxy()
	return p, nil
}

// Serve accepts connections on ln until it is closed or the proxy shuts down. Requests on it
// are identified by their Proxy-Authorization, or are sandbox "default".
func (p *Proxy) Serve(ln net.Listener) error {
	return p.serve(ln, &listenerInfo{})
}

// Attach serves ln as sandbox id until detach is called: the listener is the identity.
// It implements sandbox.ProxyHost.
func (p *Proxy) Attach(ln net.Listener, id identity.Identity) (detach func()) {
	done := make(chan struct{})
	li := &listenerInfo{bound: &id}
	srv := p.newServer(li)
	go func() {
		defer close(done)
		_ = p.serveWith(srv, ln)
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		<-done
	}
}

func (p *Proxy) serve(ln net.Listener, li *listenerInfo) error {
	return p.serveWith(p.newServer(li), ln)
}

func (p *Proxy) serveWith(srv *http.Server, ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	p.servers[srv] = struct{}{}
	p.mu.Unlock()
	p.guard.AddSelf(ln.Addr())
	defer func() {
		p.mu.Lock()
		delete(p.servers, srv)
		p.mu.Unlock()
	}()
	err := srv.Serve(newIdleListener(ln, p.opts.Limits.IdleTimeout, p.opts.Limits.MaxConnsPerListener))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (p *Proxy) newServer(li *listenerInfo) *http.Server {
	return &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: p.opts.Limits.ReadHeaderTimeout,
		IdleTimeout:       p.opts.Limits.IdleTimeout,
		MaxHeaderBytes:    p.opts.Limits.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(context.WithValue(ctx, listenerKey, li), connKey, c)
		},
		ConnState: func(c net.Conn, s http.ConnState) {
			if ic, ok := c.(*idleConn); ok {
				p.connState(li, ic, s)
			}
			switch s {
			case http.StateNew:
				p.opts.Telemetry.ConnectionOpened()
			case http.StateClosed, http.StateHijacked:
				p.opts.Telemetry.ConnectionClosed()
			}
		},
	}
}

// AddSelf marks an address (such as the admin listener) that a sandbox must never reach
// through the proxy, whatever --allow-private says.
func (p *Proxy) AddSelf(addr net.Addr) { p.guard.AddSelf(addr) }

// Shutdown stops every listener, waiting for in-flight requests until ctx ends.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	srvs := make([]*http.Server, 0, len(p.servers))
	for s := range p.servers {
		srvs = append(srvs, s)
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range srvs {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, s.Close())
		}
	}
	p.tr.CloseIdleConnections()
	p.h1.CloseIdleConnections()
	return errors.Join(errs...)
}

func (p *Proxy) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = slogPrintf{p.log}
	gp.Tr = p.tr
	gp.ConnectDial = nil // a parent proxy is the dial guard's (Options.Parent), never goproxy's
	// The only dial of a tunnel CONNECT: it writes the decision record first (record.go).
	gp.ConnectDialWithReq = p.dialTunnel
	gp.CertStore = nil
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol",
			reason: "this is an HTTP proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port", class: "bad_request"}
		id, _ := identityFrom(r.Context())
		p.begin(r.Context(), r, id, "request").refuse(r.Context(), f)
		p.writeRefusal(w, r, f)
	})
	gp.ConnectionErrHandler = p.tunnelDialError
	gp.OnRequest().HandleConnectFunc(p.handleConnect)
	gp.OnRequest().DoFunc(p.handleRequest)
	return gp
}

type slogPrintf struct{ l *slog.Logger }

func (s slogPrintf) Printf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }

// parentAddrs resolves the parent proxy's host (at start) to the addresses to guard.
func parentAddrs(host, port string) []net.Addr {
	if port == "" {
		port = "80"
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return nil
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if found, err := net.LookupIP(host); err == nil {
		ips = found
	}
	addrs := make([]net.Addr, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, &net.TCPAddr{IP: ip, Port: n})
	}
	return addrs
}
