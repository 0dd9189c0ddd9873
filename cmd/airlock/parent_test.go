package main

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/secrets"
)

// basicSource injects Basic credentials as a credential with inject: {basic: ...} does.
type basicSource struct{ names []string }

func (b *basicSource) Attach(_ context.Context, r secrets.AttachRequest) (secrets.Scrubber, error) {
	b.names = append(b.names, r.Names...)
	if r.SandboxID != parentSandbox {
		return nil, nil
	}
	r.Out.SetBasicAuth("corp-user", "corp-pass")
	return nil, nil
}

func TestParentProxyCredential(t *testing.T) {
	cfg := &Config{UpstreamProxy: "http://proxy.corp:8080", UpstreamProxyAuth: UpstreamProxyAuth{Credential: "corp-proxy"}}
	src := &basicSource{}
	pp, err := parentProxy(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	if pp.URL.Host != "proxy.corp:8080" || pp.Auth == nil {
		t.Fatalf("parent %+v", pp)
	}
	v, err := pp.Auth(context.Background())
	if err != nil || v != "Basic Y29ycC11c2VyOmNvcnAtcGFzcw==" {
		t.Errorf("Proxy-Authorization %q, %v", v, err)
	}
	if len(src.names) != 1 || src.names[0] != "corp-proxy" {
		t.Errorf("asked for %v", src.names)
	}
	if _, err := parentProxy(cfg, nil); err == nil {
		t.Error("a credential without credentials configured was accepted")
	}

	bad := &Config{UpstreamProxy: "http://proxy.corp:8080", UpstreamProxyAuth: UpstreamProxyAuth{Credential: "missing"}}
	bad.defaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "upstream_proxy_auth.credential") {
		t.Errorf("unknown credential: %v", err)
	}
	both := &Config{UpstreamProxyAuth: UpstreamProxyAuth{Env: "A", File: "/f"}}
	both.defaults()
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "upstream_proxy_auth") {
		t.Errorf("env and file together: %v", err)
	}
	scheme := &Config{UpstreamProxy: "socks5://p:1080"}
	scheme.defaults()
	if err := scheme.Validate(); err == nil || !strings.Contains(err.Error(), "upstream_proxy") {
		t.Errorf("socks5 parent: %v", err)
	}
	if pp, _ := parentProxy(&Config{UpstreamProxy: "none"}, nil); pp.URL != nil {
		t.Error(`upstream_proxy: none still set a parent`)
	}
}
