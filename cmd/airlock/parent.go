package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-proxy/airlock/proxy"
)

// parentProxy builds the parent proxy from upstream_proxy (or airlock's own HTTPS_PROXY and
// NO_PROXY) and upstream_proxy_auth.
func parentProxy(cfg *Config) (proxy.ParentProxy, error) {
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
