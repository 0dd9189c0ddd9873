package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestDockerInternalRunErrors: `sandbox run --backend docker` in internal mode (the proxy in
// a container of its own) says plainly what is missing before it touches Docker. The run
// itself is e2e/docker TestCLIInternalModeWithTheProxyInAContainer.
func TestDockerInternalRunErrors(t *testing.T) {
	home := sharedSetup(t)
	must(t, os.MkdirAll(filepath.Join(home, "ca"), 0o700))
	must(t, os.WriteFile(filepath.Join(home, "ca", "ca.pem"), []byte("-----BEGIN CERTIFICATE-----\n"), 0o600))
	tokenFile := filepath.Join(home, "issuer.token")
	empty := filepath.Join(home, "empty.token")
	must(t, os.WriteFile(empty, []byte("\n"), 0o600))
	base := "sandbox:\n  image: i\n  docker: {mode: internal, proxy_container: p, proxy_admin: http://a:9090"
	tests := []struct{ name, yaml, want string }{
		{"no image", "sandbox:\n  docker: {mode: internal, proxy_container: p, proxy_admin: http://a:9090, token_file: " + tokenFile + "}\n", "needs --image"},
		{"no proxy container", "sandbox:\n  image: i\n  docker: {mode: internal, proxy_admin: http://a:9090, token_file: " + tokenFile + "}\n", "sandbox.docker.proxy_container"},
		{"no admin", "sandbox:\n  image: i\n  docker: {mode: internal, proxy_container: p, token_file: " + tokenFile + "}\n", "sandbox.docker.proxy_admin"},
		{"no token file", base + "}\n", "sandbox.docker.token_file"},
		{"empty token file", base + ", token_file: " + empty + "}\n", "is empty"},
		{"no ca", base + ", token_file: " + tokenFile + ", ca_file: /nonexistent/ca.pem}\n", "sandbox.docker.ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := kubeConfig(t, home, tt.yaml)
			var out bytes.Buffer
			err := runDockerInternal(context.Background(), cfg, sandbox.Options{ID: "sbx-err"}, []string{"true"}, nil, nil, nil, &out, &out, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("runDockerInternal: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	for body, want := range map[string]string{
		"sandbox:\n  docker: {mode: bridge}\n":                           "sandbox.docker.mode",
		"sandbox:\n  docker: {proxy_admin: \"http://u:p@x:9090\"}\n":     "sandbox.docker.token_file, not in the URL",
		"sandbox:\n  docker: {mode: internal, proxy_admin: ftp://x:1}\n": "sandbox.docker.proxy_admin",
		"sandbox:\n  docker: {proxy_port: -1}\n":                         "sandbox.docker.proxy_port",
	} {
		p := writeConfig(t, "home: "+home+"\n"+body)
		if _, _, err := loadWithFlags(t, "--config", p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: %v, want an error naming %s", body, err, want)
		}
	}
}
