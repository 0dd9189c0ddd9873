package rego

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/jsondoc"
)

func connectInput(host string, port int) *Input {
	return &Input{
		Version: 1, Phase: PhaseConnect,
		Sandbox: SandboxInput{ID: "sbx-1", Labels: map[string]string{"tenant": "acme"}},
		Request: RequestInput{Method: "CONNECT", Host: host, Port: port},
	}
}

func requestInput(method, host, path string) *Input {
	return &Input{
		Version: 1, Phase: PhaseRequest,
		Sandbox: SandboxInput{ID: "sbx-1", Labels: map[string]string{"tenant": "acme"}},
		Request: RequestInput{Method: method, Scheme: "https", Host: host, Port: 443, Path: path},
	}
}

// newTestEngine writes files into a fresh directory and loads it.
func newTestEngine(t *testing.T, files map[string]string, o Options) *Engine {
	t.Helper()
	o.Dir = t.TempDir()
	if o.Timeout == 0 {
		o.Timeout = testEvalTimeout
	}
	writeFiles(t, o.Dir, files)
	e, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestDecideShippedPolicy(t *testing.T) {
	e, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	withQuery := requestInput("GET", "github.com", "/acme/app.git/info/refs")
	withQuery.Request.Query = map[string][]string{"service": {"git-receive-pack"}}
	for _, tc := range []struct {
		name    string
		in      *Input
		action  Action
		rule    string
		creds   []string
		timeout time.Duration
	}{
		{"registry connect", connectInput("proxy.golang.org", 443), ActionAllow, "registries.connect", nil, 0},
		{"registry read", requestInput("GET", "pypi.org", "/simple/requests/"), ActionAllow, "registries.read", nil, 0},
		{"registry publish", requestInput("PUT", "registry.npmjs.org", "/left-pad"), ActionDeny, "registries.read-only", nil, 0},
		{"github read", requestInput("GET", "api.github.com", "/repos/acme/app"), ActionAllow, "github.read", []string{"github-read"}, 0},
		{"github write", requestInput("POST", "api.github.com", "/repos/acme/app/issues"), ActionApprove, "github.write", []string{"github-write"}, 10 * time.Minute},
		{"git push discovery (query)", withQuery, ActionApprove, "github.write", []string{"github-write"}, 10 * time.Minute},
		{"internal api read", requestInput("GET", "api.internal.example", "/v1/x"), ActionAllow, "internal-api.read", []string{"internal-api"}, 0},
		{"unknown connect", connectInput("evil.example.com", 443), ActionDeny, "default.deny", nil, 0},
		{"unknown request", requestInput("GET", "evil.example.com", "/"), ActionDeny, "default.deny", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := e.Decide(context.Background(), tc.in)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if d.Action != tc.action || d.Rule != tc.rule {
				t.Errorf("got %s by %q, want %s by %q (reason %q)", d.Action, d.Rule, tc.action, tc.rule, d.Reason)
			}
			if strings.Join(d.Credentials, ",") != strings.Join(tc.creds, ",") {
				t.Errorf("credentials %q, want %q", d.Credentials, tc.creds)
			}
			if time.Duration(d.Approval.Timeout) != tc.timeout {
				t.Errorf("approval timeout %s, want %s", time.Duration(d.Approval.Timeout), tc.timeout)
			}
			if d.Reason == "" || d.Tunnel {
				t.Errorf("reason %q tunnel %v, want a reason and no tunnel", d.Reason, d.Tunnel)
			}
		})
	}
}

func TestDecideTunnel(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow", "rule": "t.tunnel", "reason": "pinned", "tunnel": true} if input.phase == "connect"
`}, Options{})
	d, err := e.Decide(context.Background(), connectInput("pinned.example.com", 443))
	if err != nil || !d.Allows() || !d.Tunnel || d.Rule != "t.tunnel" {
		t.Errorf("got %+v, %v; want an allow with tunnel", d, err)
	}
}

// TestDecideReflectsAndUpgrade: "reflects" is true unless the decision says false, and
// "upgrade" false unless it says true; both survive the decision cache and JSON.
func TestDecideReflectsAndUpgrade(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow", "rule": "t.quiet", "credentials": ["c"], "reflects": false, "upgrade": true} if input.request.host == "quiet.example"

decision := {"action": "allow", "rule": "t.echo", "credentials": ["c"]} if input.request.host == "echo.example"

decision := {"action": "allow", "rule": "t.said", "credentials": ["c"], "reflects": true} if input.request.host == "said.example"

decision := {"action": "allow", "rule": "t.open", "upgrade": true} if input.request.host == "open.example"
`}, Options{})
	for _, tc := range []struct {
		host             string
		reflects, upgrde bool
		json             string
	}{
		{"quiet.example", false, true, `"reflects":false,"upgrade":true`},
		{"echo.example", true, false, ""},
		{"said.example", true, false, `"reflects":true`},
		{"open.example", true, true, `"upgrade":true`}, // no credentials: nothing to reflect
	} {
		for range 2 { // the second answer comes from the decision cache
			d, err := e.Decide(context.Background(), requestInput("GET", tc.host, "/"))
			if err != nil {
				t.Fatal(err)
			}
			if d.MayReflect() != tc.reflects || d.Upgrade != tc.upgrde {
				t.Errorf("%s: MayReflect %v Upgrade %v, want %v %v", tc.host, d.MayReflect(), d.Upgrade, tc.reflects, tc.upgrde)
			}
			j, _ := json.Marshal(d)
			if tc.json != "" && !strings.Contains(string(j), tc.json) || tc.json == "" && (strings.Contains(string(j), "reflects") || strings.Contains(string(j), "upgrade")) {
				t.Errorf("%s: JSON %s, want %q in it", tc.host, j, tc.json)
			}
		}
	}
}

func TestDecideMalformedDecisionDenies(t *testing.T) {
	for _, tc := range []struct {
		name, decision, want string
	}{
		{"unknown action", `{"action": "permit", "rule": "x.permit"}`, `action is "permit"`},
		{"action not a string", `{"action": true, "rule": "x.bool"}`, "action is boolean"},
		{"no action", `{"rule": "x.none", "reason": "r"}`, `no "action"`},
		{"not an object", `"allow"`, "decision is string"},
		{"credentials not strings", `{"action": "allow", "rule": "x.c", "credentials": [1]}`, "credentials holds number"},
		{"credentials not an array", `{"action": "allow", "rule": "x.c", "credentials": "github-read"}`, "credentials is string"},
		{"bad approval timeout", `{"action": "approve", "rule": "x.a", "approval": {"timeout": "soon"}}`, `approval.timeout is "soon"`},
		{"tunnel with credentials", `{"action": "allow", "rule": "x.t", "tunnel": true, "credentials": ["c"]}`, "tunnel: true cannot carry credentials"},
		{"tunnel not a bool", `{"action": "allow", "rule": "x.t", "tunnel": "yes"}`, "tunnel is string"},
		{"reflects not a bool", `{"action": "allow", "rule": "x.r", "credentials": ["c"], "reflects": "no"}`, "reflects is string"},
		{"upgrade with credentials that may reflect", `{"action": "allow", "rule": "x.u", "credentials": ["c"], "upgrade": true}`, `upgrade: true with credentials needs "reflects": false`},
		{"upgrade with credentials said to reflect", `{"action": "approve", "rule": "x.u", "credentials": ["c"], "upgrade": true, "reflects": true}`, `upgrade: true with credentials needs "reflects": false`},
		{"upgrade not a bool", `{"action": "allow", "rule": "x.u", "credentials": ["c"], "upgrade": 1}`, "upgrade is number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, map[string]string{"p.rego": "package airlock\n\ndecision := " + tc.decision + "\n"}, Options{})
			d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if d.Action != ActionDeny || !d.Denies() {
				t.Errorf("action %q, want deny", d.Action)
			}
			if !strings.Contains(d.Reason, tc.want) || !strings.Contains(d.Reason, "malformed") {
				t.Errorf("reason %q, want it to mention %q", d.Reason, tc.want)
			}
			if strings.HasPrefix(tc.decision, "{") && !strings.HasPrefix(d.Rule, "x.") {
				t.Errorf("rule %q, want the policy's rule kept", d.Rule)
			}
			if len(d.Credentials) != 0 {
				t.Errorf("credentials %q on a deny", d.Credentials)
			}
		})
	}
}

func TestDecideApprovalTimeoutForms(t *testing.T) {
	for _, tc := range []struct {
		timeout string
		want    time.Duration
	}{{`"90s"`, 90 * time.Second}, {`120`, 2 * time.Minute}, {`"1h"`, time.Hour}} {
		e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "approve", "rule": "x.a", "approval": {"timeout": ` + tc.timeout + `}}
`}, Options{})
		d, err := e.Decide(context.Background(), requestInput("POST", "a.example", "/"))
		if err != nil || d.Action != ActionApprove || time.Duration(d.Approval.Timeout) != tc.want {
			t.Errorf("timeout %s: got %+v, %v; want approve with %s", tc.timeout, d, err, tc.want)
		}
	}
}

func TestDecideErrorsDeny(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		want         error
	}{
		{"undefined", "package airlock\n\ndecision := {\"action\": \"allow\"} if input.request.host == \"other\"\n", ErrNoDecision},
		{"builtin error", "package airlock\n\ndecision := {\"action\": \"allow\", \"n\": to_number(input.request.host)}\n", nil},
		{"conflict", "package airlock\n\ndecision := {\"action\": \"allow\"} if input.phase\n\ndecision := {\"action\": \"deny\"} if input.version\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, map[string]string{"p.rego": tc.policy}, Options{})
			d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
			if err == nil {
				t.Fatalf("got %+v and no error, want an error", d)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if d.Action != "" || !d.Denies() {
				t.Errorf("decision %+v, want the zero (deny) decision", d)
			}
		})
	}
}

// A slow policy is cut off after Options.Timeout and denies.
func TestDecideTimeout(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow"} if {
	count([1 | some a in numbers.range(1, 2000); some b in numbers.range(1, 2000); some c in numbers.range(1, 2000); a + b + c < 0]) == 0
}
`}, Options{Timeout: 20 * time.Millisecond})
	d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
	if !errors.Is(err, ErrTimeout) || !d.Denies() {
		t.Errorf("got %+v, %v; want a deny and ErrTimeout", d, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Decide(ctx, requestInput("GET", "a.example", "/")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: error %v, want context.Canceled", err)
	}
}

func TestEvalExplain(t *testing.T) {
	e, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	d, trace, err := e.Eval(context.Background(), requestInput("GET", "pypi.org", "/simple/"), true)
	if err != nil || !d.Allows() {
		t.Fatalf("got %+v, %v", d, err)
	}
	for _, want := range []string{"data.airlock.decision", "registries.rego", "Exit"} {
		if !strings.Contains(trace, want) {
			t.Errorf("trace lacks %q:\n%s", want, trace)
		}
	}
	if _, trace, _ := e.Eval(context.Background(), requestInput("GET", "pypi.org", "/simple/"), false); trace != "" {
		t.Errorf("trace without explain: %q", trace)
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		o     Options
		want  string
	}{
		{"dir and bundle", nil, Options{Dir: "x", Bundle: "y.tar.gz"}, "not both"},
		{"parse error", map[string]string{"p.rego": "package airlock\n\ndecision := {\n"}, Options{}, "p.rego:4: rego_parse_error"},
		{"compile error", map[string]string{"p.rego": "package airlock\n\ndecision := x if { y := 1 }\n"}, Options{}, "p.rego:3"},
		{"no decision rule", map[string]string{"p.rego": "package airlock\n\nallow := true\n"}, Options{}, "no rule defines data.airlock.decision"},
		{"no rego files", map[string]string{"data.json": "{}"}, Options{}, "no .rego files"},
		{"failing test", map[string]string{
			"p.rego":      "package airlock\n\ndecision := {\"action\": \"deny\"}\n",
			"p_test.rego": "package airlock_test\n\nimport data.airlock\n\ntest_allows if airlock.decision.action == \"allow\"\n",
		}, Options{}, "p_test.rego:5: data.airlock_test.test_allows: FAIL"},
		{"data conflicts with rule", map[string]string{
			"p.rego":    "package airlock\n\ndecision := {\"action\": \"deny\"}\n",
			"data.json": `{"airlock": {"decision": 1}}`,
		}, Options{}, "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			if tc.files != nil {
				o.Dir = t.TempDir()
				writeFiles(t, o.Dir, tc.files)
			}
			_, err := New(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// Many goroutines decide while the policy is reloaded under them (run with -race).
func TestDecideConcurrentWithReload(t *testing.T) {
	dir := t.TempDir()
	policy := func(rule string) map[string]string {
		return map[string]string{"p.rego": "package airlock\n\ndecision := {\"action\": \"allow\", \"rule\": \"" + rule + "\"}\n"}
	}
	writeFiles(t, dir, policy("v.one"))
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
				if err != nil || !d.Allows() || (d.Rule != "v.one" && d.Rule != "v.two") {
					errs <- errors.New("bad decision during reload: " + d.Rule)
					return
				}
			}
		}()
	}
	for i := range 10 {
		rule := "v.one"
		if i%2 == 0 {
			rule = "v.two"
		}
		writeFiles(t, dir, policy(rule))
		if err := e.Reload(context.Background()); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestExecPhaseIsNotCached: two commands that differ only in their argv get their own
// decisions, and an exec input without argv is refused by Validate.
func TestExecPhaseIsNotCached(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(`package airlock
decision := {"action": "deny", "rule": "exec.rm", "reason": "no rm"} if {
	input.phase == "exec"
	input.exec.argv[0] == "rm"
} else := {"action": "allow", "rule": "exec.other"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := New(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		argv []string
		want Action
	}{{[]string{"ls"}, ActionAllow}, {[]string{"rm", "-rf", "/workspace"}, ActionDeny}, {[]string{"ls"}, ActionAllow}} {
		in := &Input{Version: 1, Phase: PhaseExec, Sandbox: SandboxInput{ID: "s"}, Exec: &ExecInput{Argv: c.argv, Cwd: "/workspace"}}
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
		d, err := eng.Decide(context.Background(), in)
		if err != nil || d.Action != c.want {
			t.Errorf("%v: got %+v, %v; want %s", c.argv, d, err, c.want)
		}
	}
	if err := (&Input{Version: 1, Phase: PhaseExec, Exec: &ExecInput{}}).Validate(); err == nil {
		t.Error("an exec input without argv passed Validate")
	}
}

// amountLimitEngine decides on a body's number: deny above 100 (no decision cache).
func amountLimitEngine(t *testing.T) *Engine {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock

decision := {"action": "deny", "rule": "amount.limit"} if input.request.body.amount > 100
else := {"action": "allow", "rule": "amount.ok"}
`})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout, NoDecisionCache: true})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A body number beyond float64's range is valid JSON that the upstream may read; the policy
// sees its literal and compares it as a number, so a limit written in the policy holds.
func TestHugeBodyNumbersCompareAsNumbers(t *testing.T) {
	e := amountLimitEngine(t)
	for _, tc := range []struct{ amount, rule string }{
		{"1e400", "amount.limit"},
		{strings.Repeat("8", 320), "amount.limit"},
		{"-" + strings.Repeat("8", 320), "amount.ok"},
		{"1e-400", "amount.ok"},
		{"100", "amount.ok"},
	} {
		in := requestInput("POST", "a.example", "/")
		in.Request.Body = mustJSON(t, `{"amount":`+tc.amount+`}`)
		d, err := e.Decide(context.Background(), in)
		if err != nil {
			t.Fatalf("amount %.20s: %v", tc.amount, err)
		}
		if d.Rule != tc.rule {
			t.Errorf("amount %.20s: rule %q, want %q", tc.amount, d.Rule, tc.rule)
		}
	}
}

// Red team: a number past math/big's exponent limit made OPA panic comparing it, and the
// panic killed airlock. jsondoc now refuses such numbers (MaxNumberScale); an input that
// holds one anyway (or anything else OPA panics on) fails the evaluation, closed.
func TestPanickingEvaluationFailsClosed(t *testing.T) {
	e := amountLimitEngine(t)
	if _, err := jsondoc.Parse([]byte(`{"amount":1e9999999}`), 0); !errors.Is(err, jsondoc.ErrNumberRange) {
		t.Fatalf("jsondoc.Parse(1e9999999): %v, want ErrNumberRange", err)
	}
	in := requestInput("POST", "a.example", "/")
	in.Request.Body = mustJSON(t, `{"amount":1}`)
	in.Request.Body.Elems[0].Str = "1e9999999" // past Parse's bound, as if it had let it in
	d, err := e.Decide(context.Background(), in)
	if !errors.Is(err, ErrPanicked) {
		t.Fatalf("Decide = %+v, %v; want ErrPanicked", d, err)
	}
	if d.Allows() {
		t.Error("a failed evaluation allows")
	}
	// The engine goes on deciding.
	in.Request.Body = mustJSON(t, `{"amount":1e4000}`)
	if d, err := e.Decide(context.Background(), in); err != nil || d.Rule != "amount.limit" {
		t.Errorf("after the panic, 1e4000: %+v, %v; want amount.limit", d, err)
	}
}
