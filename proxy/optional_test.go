package proxy

import (
	"context"
	"testing"

	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
)

// deciderFunc is a Decider from a function.
type deciderFunc func(*rego.Input) rego.Decision

func (f deciderFunc) Decide(_ context.Context, in *rego.Input) (rego.Decision, error) {
	return f(in), nil
}

// TestOptionalCredential: a rule's credential marked optional (credential_optional) that the
// proxy's config does not define at all is left out and the request goes anonymously (a
// public read on a fresh install); a defined one is attached; a defined one that cannot be
// fetched still refuses the request (503), optional or not; and without the option an
// undefined credential refuses it as before.
func TestOptionalCredential(t *testing.T) {
	const canary = "CANARY-gh-token-0123456789"
	t.Setenv("AIRLOCK_TEST_GH_TOKEN", canary)
	inject := secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}
	broker := func(t *testing.T, creds map[string]secrets.CredentialConfig) *secrets.Broker {
		b, err := secrets.New(context.Background(), secrets.Options{Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(context.Background()) })
		return b
	}
	tests := []struct {
		name     string
		source   func(t *testing.T) CredentialSource
		optional bool
		status   int
		auth     string // the Authorization the upstream saw
	}{
		{"no credential source, optional", func(*testing.T) CredentialSource { return nil }, true, 200, ""},
		{"not configured, optional", func(t *testing.T) CredentialSource {
			return broker(t, map[string]secrets.CredentialConfig{"other": {Env: "AIRLOCK_TEST_GH_TOKEN", Inject: inject}})
		}, true, 200, ""},
		{"configured, optional", func(t *testing.T) CredentialSource {
			return broker(t, map[string]secrets.CredentialConfig{"gh": {Env: "AIRLOCK_TEST_GH_TOKEN", Inject: inject}})
		}, true, 200, "Bearer " + canary},
		{"configured but unavailable, optional", func(t *testing.T) CredentialSource {
			return broker(t, map[string]secrets.CredentialConfig{"gh": {Env: "AIRLOCK_TEST_UNSET_TOKEN", Inject: inject}})
		}, true, 503, ""},
		{"not configured, required", func(t *testing.T) CredentialSource {
			return broker(t, map[string]secrets.CredentialConfig{"other": {Env: "AIRLOCK_TEST_GH_TOKEN", Inject: inject}})
		}, false, 500, ""},
		{"no credential source, required", func(*testing.T) CredentialSource { return nil }, false, 503, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.source(t)
			e := newEnv(t, func(o *Options) {
				o.Decider = deciderFunc(func(*rego.Input) rego.Decision {
					return rego.Decision{Action: rego.ActionAllow, Rule: "test.public-read", Reason: "public read",
						Credentials: []string{"gh"}, CredentialOptional: tt.optional}
				})
				if src != nil {
					o.Credentials = src
				}
			})
			resp, body := get(t, e.client(nil), "GET", e.http.URL+"/repo", "")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.status != 200 {
				if resp.Header.Get("X-Airlock-Decision") != "error" || resp.Header.Get("X-Airlock-Rule") != "test.public-read" {
					t.Errorf("refusal headers %v: want decision error, rule test.public-read", resp.Header)
				}
				return
			}
			up := <-e.upstream
			if got := up.Header.Get("Authorization"); got != tt.auth {
				t.Errorf("upstream saw Authorization %q, want %q", got, tt.auth)
			}
			for _, ev := range e.audit.Events() {
				if (tt.auth != "") != (len(ev.Creds) > 0) {
					t.Errorf("audit %s event credentials %v; want them only when one was attached", ev.Stage, ev.Creds)
				}
			}
		})
	}
}
