package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// testBundle is an OPA bundle with one allow-all policy.
func testBundle(t *testing.T) []byte {
	t.Helper()
	src := "package airlock\n\ndecision := {\"action\": \"allow\", \"rule\": \"b.all\"}\n"
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: "rev-1", Roots: &[]string{"airlock"}},
		Data:     map[string]any{},
		Modules:  []bundle.ModuleFile{{URL: "/p.rego", Path: "/p.rego", Raw: []byte(src), Parsed: ast.MustParseModule(src)}},
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestConfigSecretsNeverShown: a bundle URL with a user, a password and an access token in
// it is used for fetching, but none of them appears in /v1/policy (which needs no
// authentication), in any log line, in `proxy --check` output or in an error printed,
// whether the fetch succeeds or fails.
func TestConfigSecretsNeverShown(t *testing.T) {
	canaries := []string{"CANARYUSER", "CANARYPASS", "CANARYTOKEN", "CANARYSIG"}
	var failing atomic.Bool
	var sawAuth atomic.Bool
	body := testBundle(t)
	bundles := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == "CANARYUSER" && p == "CANARYPASS" && r.URL.Query().Get("access_token") == "CANARYTOKEN" {
			sawAuth.Store(true)
		}
		if failing.Load() {
			panic(http.ErrAbortHandler) // the client gets a *url.Error, which quotes the URL
		}
		_, _ = w.Write(body)
	}))
	bundles.Config.ErrorLog = nil
	t.Cleanup(bundles.Close)
	secretURL := strings.Replace(bundles.URL, "http://", "http://CANARYUSER:CANARYPASS@", 1) + "/b.tar.gz?access_token=CANARYTOKEN&sig=CANARYSIG"
	home := t.TempDir()
	cfgPath := writeConfig(t, "home: "+home+"\naudit_log: \"-\"\npolicy: \""+secretURL+"\"\npolicy_options:\n  allow_insecure_http: true\n")
	cfg, _, err := loadWithFlags(t, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := newLogger(cfg, &logs)
	shown := map[string]string{}

	// proxy --check, while the bundle server works.
	out := runCheck(t, cfgPath)
	shown["proxy --check output"] = out
	if !strings.Contains(out, "config OK") {
		t.Errorf("proxy --check: %q, want config OK", out)
	}

	s, err := build(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(context.Background()) })
	if !sawAuth.Load() {
		t.Errorf("the bundle server never saw the URL's credentials: the redaction must not change what is fetched")
	}
	adminSrv := httptest.NewServer(s.adminHandler())
	t.Cleanup(adminSrv.Close)
	shown["/v1/policy"] = get(t, adminSrv.URL+"/v1/policy")
	if !strings.Contains(shown["/v1/policy"], bundles.Listener.Addr().String()) {
		t.Errorf("/v1/policy %s: want the bundle's host still named", shown["/v1/policy"])
	}

	// A failing fetch: the reload error, the status, the log.
	failing.Store(true)
	reloadErr := s.engine.Reload(context.Background())
	if reloadErr == nil {
		t.Fatal("reload from a failing bundle server succeeded")
	}
	shown["reload error"] = reloadErr.Error()
	shown["/v1/policy after a failed reload"] = get(t, adminSrv.URL+"/v1/policy")
	if !strings.Contains(shown["/v1/policy after a failed reload"], "last_error") {
		t.Errorf("/v1/policy %s: want the reload error shown", shown["/v1/policy after a failed reload"])
	}
	// What main prints when the first fetch fails.
	_, checkErr := runCheckErr(cfgPath)
	if checkErr == nil {
		t.Fatal("proxy --check with a failing bundle server succeeded")
	}
	shown["proxy --check error"] = checkErr.Error()
	// Anything else that logs the URL or an error quoting it goes through the redacting
	// handler.
	log.Info("fetching "+secretURL, "url", secretURL, "err", reloadErr)
	shown["log"] = logs.String()
	if !strings.Contains(shown["log"], "allow_insecure_http") {
		t.Errorf("no warning about the plain-http bundle in the log:\n%s", shown["log"])
	}
	for what, text := range shown {
		for _, c := range canaries {
			if strings.Contains(text, c) {
				t.Errorf("%s holds %s:\n%s", what, c, text)
			}
		}
	}
}

func runCheckErr(cfgPath string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"proxy", "--config", cfgPath, "--check"})
	err := root.Execute()
	return out.String(), err
}

func runCheck(t *testing.T, cfgPath string) string {
	t.Helper()
	out, err := runCheckErr(cfgPath)
	if err != nil {
		t.Fatalf("proxy --check: %v", err)
	}
	return out
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestPolicyAndAdminConfigValidated: the new keys are checked and errors name them; an
// unsigned plain-http bundle needs the opt-in, and the error does not quote its token.
func TestPolicyAndAdminConfigValidated(t *testing.T) {
	for _, tt := range []struct{ name, body, want string }{
		{"plain http bundle", "policy: \"http://bundles.example/b.tar.gz?access_token=CANARY\"\n", "policy_options.allow_insecure_http"},
		{"plain HTTP bundle", "policy: \"HTTP://bundles.example/b.tar.gz\"\n", "policy_options.allow_insecure_http"},
		{"negative bundle bytes", "policy_options:\n  max_bundle_bytes: -1\n", "policy_options.max_bundle_bytes"},
		{"negative bundle files", "policy_options:\n  max_bundle_files: -1\n", "policy_options.max_bundle_files"},
		{"admin host with a scheme", "admin:\n  hosts: [\"http://airlock\"]\n", "admin.hosts[0]"},
		{"admin host with a port", "admin:\n  hosts: [airlock, \"airlock:9090\"]\n", "admin.hosts[1]"},
		{"admin host wildcard", "admin:\n  hosts: [\"*.svc\"]\n", "admin.hosts[0]"},
		{"negative admin body", "admin:\n  max_body_bytes: -5\n", "admin.max_body_bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := loadWithFlags(t, "--config", writeConfig(t, "home: "+t.TempDir()+"\n"+tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "CANARY") {
				t.Errorf("error %v, want one naming %s without the token", err, tt.want)
			}
		})
	}
	for _, body := range []string{
		"policy: \"http://bundles.example/b.tar.gz\"\npolicy_options:\n  allow_insecure_http: true\n",
		"policy: \"http://bundles.example/b.tar.gz\"\npolicy_options:\n  bundle_public_key: /etc/airlock/bundle.pem\n",
		"policy: \"https://bundles.example/b.tar.gz\"\n",
		"admin:\n  hosts: [airlock, airlock-admin.airlock.svc.cluster.local, \"airlock.\"]\n  max_body_bytes: 65536\n",
	} {
		if _, _, err := loadWithFlags(t, "--config", writeConfig(t, "home: "+t.TempDir()+"\n"+body)); err != nil {
			t.Errorf("config %q: %v", body, err)
		}
	}
}

// TestAdminAnswersItsNames: the admin handler airlock wires answers the names of
// admin.hosts and of admin_listen, and refuses others (DNS rebinding).
func TestAdminAnswersItsNames(t *testing.T) {
	home := t.TempDir()
	cfg, _, err := loadWithFlags(t, "--config", writeConfig(t, "home: "+home+"\naudit_log: \"-\"\nadmin_listen: \"airlock-box:9090\"\nadmin:\n  hosts: [airlock-admin.airlock.svc]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := build(context.Background(), cfg, newLogger(cfg, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(context.Background()) })
	srv := httptest.NewServer(s.adminHandler())
	t.Cleanup(srv.Close)
	for host, want := range map[string]int{
		"airlock-admin.airlock.svc:9090": 200, "airlock-box:9090": 200, "localhost:9090": 200, srv.Listener.Addr().String(): 200,
		"rebound.evil.example:9090": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/policy", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestPrintedErrorsRedacted: a credential source or store whose URL carries a user, a
// password or a token fails at start, and what airlock prints names the key and the host
// but none of them.
func TestPrintedErrorsRedacted(t *testing.T) {
	home := t.TempDir()
	sid := filepath.Join(home, "secret-id")
	if err := os.WriteFile(sid, []byte("CANARYSECRETID"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"vault address": "vault: {address: \"http://CANARYUSER:CANARYPASS@127.0.0.1:1/?token=CANARYTOKEN\", auth: {method: approle, role_id: r, secret_id_file: " + sid + "}}\n" +
			"credentials:\n  c: {vault: {path: secret/data/x}, inject: {header: X-K, value: \"{{ .data.data.k }}\"}}\n",
		"approvals store": "approvals: {store: \"postgres://CANARYUSER:CANARYPASS@127.0.0.1:1/db?sslmode=disable&password=CANARYTOKEN\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, _, err := loadWithFlags(t, "--config", writeConfig(t, "home: "+home+"\naudit_log: \"-\"\n"+body))
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			_, err = build(context.Background(), cfg, newLogger(cfg, &logs))
			if err == nil {
				t.Fatal("build succeeded against an unreachable service")
			}
			out := errorText(err)
			if !strings.Contains(out, "127.0.0.1:1") {
				t.Errorf("printed error %q: want the address still named", out)
			}
			for _, c := range []string{"CANARYUSER", "CANARYPASS", "CANARYTOKEN", "CANARYSECRETID"} {
				if strings.Contains(out, c) || strings.Contains(logs.String(), c) {
					t.Errorf("%s shown: error %q, log %s", c, out, logs.String())
				}
			}
		})
	}
}
