package rego

import (
	"context"
	"fmt"
	"strings"
)

// BodyAwareKey is the data document that names body-aware destinations: an object mapping a
// host (normalised: lower case, no trailing dot) to the path prefixes on it whose JSON
// bodies the policy reads, e.g. {"mcp.internal": ["/mcp"], "api.github.com": ["/graphql"]}.
const BodyAwareKey = "body_aware"

// bodyAware is a compiled data.body_aware: host → path prefixes.
type bodyAware map[string][]string

// bodyAwareOf reads data.body_aware. A document of another shape is an error naming what is
// wrong: a policy that means to read bodies but names them wrongly must not load and then
// decide without them.
func bodyAwareOf(data map[string]any) (bodyAware, error) {
	raw, ok := data[BodyAwareKey]
	if !ok || raw == nil {
		return nil, nil
	}
	hosts, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("data.%s is %T, want an object mapping hosts to lists of path prefixes", BodyAwareKey, raw)
	}
	out := make(bodyAware, len(hosts))
	for host, v := range hosts {
		if err := checkHostKey(host); err != nil {
			return nil, fmt.Errorf("data.%s: %w", BodyAwareKey, err)
		}
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("data.%s[%q] is %T, want a list of path prefixes such as [\"/mcp\"]", BodyAwareKey, host, v)
		}
		for i, p := range list {
			s, ok := p.(string)
			if !ok || !strings.HasPrefix(s, "/") {
				return nil, fmt.Errorf("data.%s[%q][%d] is %v, want a path prefix starting with /", BodyAwareKey, host, i, p)
			}
			out[host] = append(out[host], s)
		}
	}
	return out, nil
}

// match reports whether path on host is under one of the host's prefixes. A prefix matches
// whole segments: "/mcp" covers "/mcp", "/mcp/" and "/mcp/x", not "/mcpx" (a prefix ending
// in "/" covers everything below it).
func (b bodyAware) match(host, path string) bool {
	for _, p := range b[host] {
		if path == p || strings.HasPrefix(path, p) && (strings.HasSuffix(p, "/") || path[len(p)] == '/') {
			return true
		}
	}
	return false
}

// BodyAware reports whether the policy in force reads the bodies of requests to path on
// host (data.body_aware). The proxy parses a request's body only then.
func (e *Engine) BodyAware(host, path string) bool {
	snap, err := e.snapshot(context.Background())
	if err != nil {
		return false // nothing is decided without a policy
	}
	return snap.bodyAware.match(host, path)
}
