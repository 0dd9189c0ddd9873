//go:build e2e

// Package bypass_test is airlock's bypass suite: each case is a named attack sent over raw
// TCP or TLS to a real airlock proxy (real OPA policy, real TLS upstreams with their own CA,
// a real approval service on SQLite), and must fail with the right status, leave an audit
// event, and get nothing it should not to an upstream. Run as root or not:
//
//	go test -tags e2e -count=1 ./e2e/bypass/
//
// A loopback "internal" service listens on 127.0.0.1 on the same port as the allowed
// upstream on 127.0.0.2: any destination trick that got past the dial guard would reach it,
// and every case fails if it did.
package bypass_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
)

// attack is one bypass attempt.
type attack struct {
	name string
	send func(t *testing.T, e *env) result
	// status is what the attacker must get (0: the connection is closed without an answer).
	status int
	// rule, host, path: the audit event of the refusal (rule "" and no event wanted when
	// noAudit is set). host and path are what the policy saw, after normalisation.
	rule, host, path string
	port             int
	noAudit          string // why this case leaves no audit event
	// reason is what the refusal's body must say ("": not checked).
	reason string
	// upstream checks what the upstreams received; nil means: nothing at all.
	upstream func(t *testing.T, e *env, got []seen)
}

func TestBypass(t *testing.T) {
	e := newEnv(t)
	var cases []attack
	cases = append(cases, smugglingCases(e)...)
	cases = append(cases, destinationCases(e)...)
	cases = append(cases, protocolCases(e)...)
	cases = append(cases, targetCases(e)...)
	cases = append(cases, bodyCases(e)...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nev, nseen := e.audit.Len(), e.seenLen()
			got := tc.send(t, e)
			if got.status != tc.status {
				t.Errorf("status: got %s, want %d", got, tc.status)
			}
			if tc.status >= 400 && got.status == tc.status && tc.rule != "" {
				if r := got.header.Get("X-Airlock-Rule"); r != "" && r != tc.rule {
					t.Errorf("X-Airlock-Rule: got %q, want %q", r, tc.rule)
				}
			}
			if tc.reason != "" && !strings.Contains(got.body, tc.reason) {
				t.Errorf("the refusal %q does not say %q", got.body, tc.reason)
			}
			if tc.noAudit == "" {
				checkAudit(t, e, nev, tc)
			}
			ups := e.seenSince(nseen)
			for _, s := range ups {
				if s.Server == "internal" {
					t.Errorf("the internal loopback service was reached: %s %s", s.Method, s.URI)
				}
			}
			switch {
			case tc.upstream != nil:
				tc.upstream(t, e, ups)
			case len(ups) > 0:
				t.Errorf("upstream received %d requests, want none: first %s %s", len(ups), ups[0].Method, ups[0].URI)
			}
		})
	}
}

// checkAudit waits for the case's audit event: some are written when the connection closes.
func checkAudit(t *testing.T, e *env, from int, tc attack) {
	t.Helper()
	match := func(ev audit.Event) bool {
		return (tc.status == 0 || ev.Status == tc.status || tc.status == 101 && ev.Status == 101) &&
			(tc.rule == "" || ev.Rule == tc.rule) &&
			(tc.host == "" || ev.Host == tc.host) &&
			(tc.path == "" || ev.Path == tc.path) &&
			(tc.port == 0 || ev.Port == tc.port)
	}
	var evs []audit.Event
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		evs = e.audit.Since(from)
		if slices.ContainsFunc(evs, match) {
			return
		}
	}
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n  %s %s status=%d decision=%s rule=%s host=%s port=%d path=%s reason=%q",
			ev.Kind, ev.Method, ev.Status, ev.Decision, ev.Rule, ev.Host, ev.Port, ev.Path, ev.Reason)
	}
	t.Errorf("no audit event with status %d rule %q host %q path %q; got:%s", tc.status, tc.rule, tc.host, tc.path, b.String())
}

// one wants exactly one upstream request with this RequestURI and returns it.
func one(uri string) func(t *testing.T, e *env, got []seen) {
	return func(t *testing.T, e *env, got []seen) {
		t.Helper()
		if len(got) != 1 || got[0].URI != uri || got[0].Server != "upstream" {
			t.Errorf("upstream received %v, want exactly one request for %s", uris(got), uri)
		}
	}
}

func uris(got []seen) []string {
	var out []string
	for _, s := range got {
		out = append(out, s.Server+" "+s.Method+" "+s.URI)
	}
	return out
}
