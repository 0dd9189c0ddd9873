//go:build compose

package compose_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var client = &http.Client{Timeout: 15 * time.Second}

func getJSON(u string, v any) error {
	resp, err := client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.300s", u, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// throughProxy sends one plain-HTTP request through airlock's listener (172.30.2.10:3128)
// from a throwaway container on the project's internal sandbox network, the way the sample
// sandbox does (busybox nc), and returns the proxy's status line.
func throughProxy(t *testing.T, method, target string) string {
	t.Helper()
	if _, err := url.Parse(target); err != nil {
		t.Fatal(err)
	}
	// busybox wget, as the sample agent sends them: a client that keeps its connection open
	// until the answer (one that closes its sending half first is taken for gone, as by
	// Go's HTTP server and squid).
	data := ""
	if method == "POST" {
		data = "--post-data=x"
	}
	script := fmt.Sprintf(`timeout 30 wget -S -O /dev/null -U airlock-e2e-compose %s '%s' 2>&1 | sed -n 's/^ *\(HTTP\/[0-9.]* [0-9][0-9][0-9].*\)$/\1/p' | head -n 1`, data, target)
	out, err := exec.Command("docker", "run", "--rm", "--network", stack.project+"_sandbox",
		"--label", "airlock-e2e-compose="+stack.project, "--user", "1000:1000",
		"-e", "http_proxy=http://172.30.2.10:3128",
		"airlock/busybox-rootfs:local", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s through the proxy: %v %s", method, target, err, out)
	}
	return strings.TrimSpace(string(out))
}

func token(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// jaegerTrace is the part of Jaeger's /api/traces answer the tests read.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		References    []struct {
			RefType string `json:"refType"`
		} `json:"references"`
		Tags []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// findTrace polls Jaeger's query API for airlock's trace of the request to path.
func findTrace(t *testing.T, path string) jaegerTrace {
	t.Helper()
	tags, _ := json.Marshal(map[string]string{"url.path": path})
	q := url.Values{"service": {"airlock"}, "tags": {string(tags)}, "lookback": {"1h"}, "limit": {"5"}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var resp struct{ Data []jaegerTrace }
		err := getJSON(stack.jaeger+"/api/traces?"+q.Encode(), &resp)
		if err == nil && len(resp.Data) == 1 {
			return resp.Data[0]
		}
		if err == nil && len(resp.Data) > 1 {
			t.Fatalf("%d traces for the one request to %s", len(resp.Data), path)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trace for %s in Jaeger after 90 s (last error %v)", path, err)
		}
		time.Sleep(3 * time.Second)
	}
}

// tag returns a span tag's value as a string ("" when absent).
func (tr jaegerTrace) tag(spanIndex int, key string) string {
	for _, tg := range tr.Spans[spanIndex].Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

// serverSpan is the index of airlock's request span (the root), or -1.
func (tr jaegerTrace) serverSpan() int {
	for i, s := range tr.Spans {
		if len(s.References) == 0 && tr.tag(i, "span.kind") == "server" {
			return i
		}
	}
	return -1
}

func TestDeniedRequestTraceInJaeger(t *testing.T) {
	path := "/airlock-compose-e2e-" + token(t)
	status := throughProxy(t, "GET", "http://example.com"+path)
	if !strings.Contains(status, " 403 ") {
		t.Fatalf("a request the shipped policy denies: status %q, want 403", status)
	}
	tr := findTrace(t, path)
	i := tr.serverSpan()
	if i < 0 {
		t.Fatalf("trace %s has no server root span: %+v", tr.TraceID, tr.Spans)
	}
	if got := tr.Processes[tr.Spans[i].ProcessID].ServiceName; got != "airlock" {
		t.Errorf("service %q, want airlock (OTEL_SERVICE_NAME)", got)
	}
	for key, want := range map[string]string{"airlock.decision": "deny", "server.address": "example.com", "http.request.method": "GET", "http.response.status_code": "403"} {
		if got := tr.tag(i, key); got != want {
			t.Errorf("span tag %s = %q, want %q", key, got, want)
		}
	}
	if tr.tag(i, "airlock.rule") == "" {
		t.Error("the denied request's span names no rule")
	}
}

func TestAllowedRequestTraceInJaeger(t *testing.T) {
	// deb.debian.org is on the shipped registries allowlist; the path does not exist there,
	// so the mirror answers 404 through the proxy: an allowed request that went upstream.
	path := "/debian/airlock-compose-e2e-" + token(t)
	status := throughProxy(t, "GET", "http://deb.debian.org"+path)
	if !strings.Contains(status, " 404 ") {
		t.Fatalf("an allowed request to deb.debian.org: status %q, want the mirror's 404", status)
	}
	tr := findTrace(t, path)
	i := tr.serverSpan()
	if i < 0 {
		t.Fatalf("trace %s has no server root span", tr.TraceID)
	}
	if got := tr.tag(i, "airlock.decision"); got != "allow" {
		t.Errorf("airlock.decision = %q, want allow", got)
	}
	upstream := false
	for j := range tr.Spans {
		if tr.tag(j, "span.kind") == "client" && tr.tag(j, "http.response.status_code") == "404" {
			upstream = true
		}
	}
	if !upstream {
		t.Errorf("trace %s has no client span for the upstream call that answered 404: %d spans", tr.TraceID, len(tr.Spans))
	}
}

// promQuery evaluates an instant query; an error answer is an error.
func promQuery(q string) ([]promSample, error) {
	var resp struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []promSample
		}
	}
	if err := getJSON(stack.prometheus+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), &resp); err != nil {
		return nil, err
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("%s: %s", q, resp.Error)
	}
	if len(resp.Data.Result) == 0 {
		return nil, fmt.Errorf("%s: empty result", q)
	}
	return resp.Data.Result, nil
}

type promSample struct {
	Metric map[string]string
	Value  [2]any
}

func TestMetricsInPrometheus(t *testing.T) {
	path := "/airlock-compose-e2e-" + token(t)
	if status := throughProxy(t, "POST", "http://paste.example"+path); !strings.Contains(status, " 403 ") {
		t.Fatalf("POST to a host on no allowlist: status %q, want 403", status)
	}
	// Every target of deploy/prometheus.yml is up: airlock's admin listener, the
	// collector's own telemetry, Prometheus itself.
	for _, job := range []string{"airlock", "otel-collector", "prometheus"} {
		if _, err := promQuery(fmt.Sprintf(`up{job=%q} == 1`, job)); err != nil {
			t.Errorf("scrape target %s is not up: %v", job, err)
		}
	}
	// The POST's denial reaches Prometheus at its next scrape (15 s).
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := promQuery(`sum(airlock_requests_denied_total{job="airlock",server_address=~"paste\\.example(:80)?"})`)
		if err == nil && fmt.Sprint(s[0].Value[1]) != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no denial of paste.example in Prometheus after 90 s: %v %v", s, err)
		}
		time.Sleep(3 * time.Second)
	}
	byDecision, err := promQuery(`sum by (decision) (airlock_requests_total{job="airlock"})`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range byDecision {
		seen[s.Metric["decision"]] = true
	}
	if !seen["deny"] || !seen["allow"] {
		t.Errorf("airlock_requests_total by decision %v: want allow (the sample sandbox's Debian requests) and deny", byDecision)
	}
}

// TestSampleSandboxConfined reads the sample sandbox's own log: its allowed requests were
// answered, its denied ones refused, and its direct connection out failed.
func TestSampleSandboxConfined(t *testing.T) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := compose("logs", "--no-color", "sandbox")
		log := string(out)
		done := strings.Contains(log, "direct connection") && strings.Contains(log, "not on any allowlist")
		if done {
			if strings.Contains(log, "LEAK") {
				t.Fatalf("the sample sandbox reached the internet directly:\n%s", log)
			}
			if !strings.Contains(log, "direct connection blocked as expected") {
				t.Fatalf("no blocked direct connection in the sandbox's log:\n%s", log)
			}
			if !strings.Contains(log, "(not on any allowlist): HTTP/1.1 403") {
				t.Fatalf("the sandbox's request to a host on no allowlist was not refused:\n%s", log)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sample sandbox logged no full round in 60 s:\n%s", log)
		}
		time.Sleep(3 * time.Second)
	}
}
