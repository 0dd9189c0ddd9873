package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/airlock-proxy/airlock/secrets"

	"github.com/airlock-proxy/airlock/proxy"
)

// parentProxy builds the parent proxy from upstream_proxy (or airlock's own HTTPS_PROXY and
// NO_PROXY) and upstream_proxy_auth.
func parentProxy(cfg *Config, creds proxy.CredentialSource) (proxy.ParentProxy, error) {
	var pp proxy.ParentProxy
	switch cfg.UpstreamProxy {
	case "none":
		return pp, nil
	case "":
		var err error
		if pp, err = proxy.ParentProxyFromEnv(); err != nil {
			return pp, err
		}
	default:
		u, err := proxy.ParseParentURL(cfg.UpstreamProxy)
		if err != nil {
			return pp, fmt.Errorf("upstream_proxy: %w", err)
		}
		pp = proxy.ParentProxy{URL: u, NoProxy: os.Getenv("NO_PROXY")}
		if pp.NoProxy == "" {
			pp.NoProxy = os.Getenv("no_proxy")
		}
	}
	if cfg.UpstreamNoProxy != "" {
		pp.NoProxy = cfg.UpstreamNoProxy
	}
	a := cfg.UpstreamProxyAuth
	if a.Credential != "" {
		if creds == nil {
			return pp, fmt.Errorf("upstream_proxy_auth.credential: %q: no credentials are configured", a.Credential)
		}
		pp.Auth = credentialAuth(creds, a.Credential)
		return pp, nil
	}
	if a.Env == "" && a.File == "" {
		return pp, nil
	}
	// Read at each new connection to the parent, so a rotated secret is picked up.
	pp.Auth = func(context.Context) (string, error) {
		var v string
		if a.Env != "" {
			v = os.Getenv(a.Env)
			if v == "" {
				return "", fmt.Errorf("upstream_proxy_auth.env: $%s is empty", a.Env)
			}
		} else {
			b, err := os.ReadFile(a.File)
			if err != nil {
				return "", fmt.Errorf("upstream_proxy_auth.file: %w", err)
			}
			v = strings.TrimSpace(string(b))
		}
		if !strings.Contains(v, ":") {
			return "", fmt.Errorf("upstream_proxy_auth: want user:password")
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(v)), nil
	}
	return pp, nil
}

// parentSandbox is the sandbox id under which airlock's own parent-proxy credential is
// issued and cached (its leases are airlock's, not any sandbox's).
const parentSandbox = "airlock-parent-proxy"

// credentialAuth takes the parent's Proxy-Authorization from a configured credential (Vault,
// env or file, as for any request): the header its injection sets, Proxy-Authorization or
// Authorization (a basic injection sets the latter).
func credentialAuth(creds proxy.CredentialSource, name string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		out, _ := http.NewRequestWithContext(ctx, http.MethodConnect, "http://parent.invalid/", nil)
		if _, err := creds.Attach(ctx, secrets.AttachRequest{SandboxID: parentSandbox, Names: []string{name}, Out: out}); err != nil {
			return "", fmt.Errorf("upstream_proxy_auth.credential %q: %w", name, err)
		}
		for _, h := range []string{"Proxy-Authorization", "Authorization"} {
			if v := out.Header.Get(h); v != "" {
				return v, nil
			}
		}
		return "", fmt.Errorf("upstream_proxy_auth.credential %q: its injection sets neither Proxy-Authorization nor Authorization (use inject: {basic: ...} or {header: Proxy-Authorization, ...})", name)
	}
}
