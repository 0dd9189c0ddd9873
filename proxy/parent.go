package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// A parent proxy: airlock's own outbound connections (requests it forwards, tunnels it
// opens) go through a corporate HTTP proxy with CONNECT. The dial guard still resolves
// each name itself and checks every address before anything is sent to the parent; the
// parent then resolves the name again, and what it connects to is beyond airlock's
// sight (see docs/transparent.md).

// ParentProxy configures the parent proxy.
type ParentProxy struct {
	URL     *url.URL // http://[user:password@]host:port; nil: none
	NoProxy string   // NO_PROXY syntax: hosts, domains, CIDRs dialled directly
	// Auth, when set, returns the Proxy-Authorization value for the parent (for example
	// from a credential source); otherwise the URL's user and password are sent as Basic.
	Auth func(ctx context.Context) (string, error)
}

// ParentProxyFromEnv reads HTTPS_PROXY (or https_proxy, then HTTP_PROXY/http_proxy) and
// NO_PROXY/no_proxy of airlock's own environment. A nil URL means none is set.
func ParentProxyFromEnv() (ParentProxy, error) {
	c := httpproxy.FromEnvironment()
	raw := c.HTTPSProxy
	if raw == "" {
		raw = c.HTTPProxy
	}
	if raw == "" {
		return ParentProxy{}, nil
	}
	u, err := ParseParentURL(raw)
	if err != nil {
		return ParentProxy{}, fmt.Errorf("HTTPS_PROXY: %w", err)
	}
	return ParentProxy{URL: u, NoProxy: c.NoProxy}, nil
}

// ParseParentURL checks a parent proxy URL: scheme http, a host and port, nothing else.
func ParseParentURL(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%q: only http:// parent proxies are supported (CONNECT is sent in clear text to the parent)", u.Redacted())
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%q: want http://[user:password@]host:port", u.Redacted())
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "3128")
	}
	return u, nil
}

// parentFor returns the parent proxy for a dial of host:port, or nil to dial directly.
func (pp *ParentProxy) parentFor(hostport string) *url.URL {
	if pp == nil || pp.URL == nil {
		return nil
	}
	cfg := httpproxy.Config{HTTPSProxy: pp.URL.String(), NoProxy: pp.NoProxy}
	u, err := cfg.ProxyFunc()(&url.URL{Scheme: "https", Host: hostport})
	if err != nil {
		return nil
	}
	return u
}

// dialParent opens a tunnel to target (host:port, the name: the parent resolves it)
// through the parent proxy at pu.
func (pp *ParentProxy) dialParent(ctx context.Context, d *net.Dialer, pu *url.URL, target string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", pu.Host)
	if err != nil {
		return nil, fmt.Errorf("dial parent proxy %s: %w", pu.Host, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target,
		Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if pp.Auth != nil {
		v, err := pp.Auth(ctx)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("parent proxy credential: %w", err)
		}
		req.Header.Set("Proxy-Authorization", v)
	} else if pu.User != nil {
		pw, _ := pu.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(pu.User.Username()+":"+pw)))
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("parent proxy %s: %w", pu.Host, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("parent proxy %s: %w", pu.Host, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("parent proxy %s refused CONNECT %s: %s", pu.Host, target, resp.Status)
	}
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufferedConn replays what was read past the parent's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *bufferedConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}
