//go:build compose

package compose_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// composeConfig is docker-compose's resolved view of the file (`docker-compose config`).
type composeConfig struct {
	Services map[string]struct {
		Image       string
		Profiles    []string
		Environment map[string]string
		Volumes     []string // source:target[:mode], as docker-compose config prints them
	}
}

func resolvedCompose(t *testing.T) composeConfig {
	t.Helper()
	out, err := compose("config")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var c composeConfig
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatalf("docker-compose config output: %v", err)
	}
	return c
}

// hostPath maps a path inside the grafana container to the repository file mounted there.
func hostPath(t *testing.T, c composeConfig, inContainer string) string {
	t.Helper()
	for _, v := range c.Services["grafana"].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		if rel, err := filepath.Rel(parts[1], inContainer); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(parts[0], rel)
		}
	}
	t.Fatalf("%s is on no volume of the grafana service", inContainer)
	return ""
}

// TestGrafanaProvisioning checks what Grafana would read, as far as it can be without
// Grafana: the provisioning files are where the service mounts them, each datasource URL
// names a compose service and port that answers with that datasource's API on the backend
// network, and the provisioned dashboards path holds the dashboard, whose panels use
// provisioned datasources.
func TestGrafanaProvisioning(t *testing.T) {
	c := resolvedCompose(t)
	g, ok := c.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yml has no grafana service")
	}
	// Datasources.
	var ds struct {
		Datasources []struct{ Name, UID, Type, URL string }
	}
	readYAML(t, hostPath(t, c, "/etc/grafana/provisioning/datasources/datasources.yaml"), &ds)
	uids := map[string]string{}
	probes := map[string]string{"prometheus": "/api/v1/query?query=up", "jaeger": "/api/services"}
	for _, d := range ds.Datasources {
		uids[d.UID] = d.Type
		u, err := url.Parse(d.URL)
		if err != nil {
			t.Fatalf("datasource %s: %v", d.Name, err)
		}
		if _, ok := c.Services[u.Hostname()]; !ok {
			t.Errorf("datasource %s points at %s, which is no compose service", d.Name, u.Host)
			continue
		}
		probe, ok := probes[d.Type]
		if !ok {
			t.Errorf("datasource %s has type %s, which this test cannot check", d.Name, d.Type)
			continue
		}
		// Grafana would reach it by service name on the backend network: the container's
		// address there, on the URL's port, must answer with the datasource's API.
		ip, err := containerIP(u.Hostname(), "backend")
		if err != nil || ip == "" {
			t.Errorf("datasource %s: %s has no backend address: %v", d.Name, u.Hostname(), err)
			continue
		}
		var answer struct{ Status string }
		if err := getJSON("http://"+net.JoinHostPort(ip, u.Port())+probe, &answer); err != nil {
			t.Errorf("datasource %s (%s, %s:%s): %v", d.Name, d.URL, ip, u.Port(), err)
		}
	}
	// Dashboards.
	var dp struct {
		Providers []struct {
			Name, Type string
			Options    struct{ Path string }
		}
	}
	readYAML(t, hostPath(t, c, "/etc/grafana/provisioning/dashboards/dashboards.yaml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers %+v, want one of type file", dp.Providers)
	}
	home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if path.Dir(home) != dp.Providers[0].Options.Path {
		t.Errorf("home dashboard %s is not in the provisioned path %s", home, dp.Providers[0].Options.Path)
	}
	d := readDashboard(t, hostPath(t, c, home))
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard has title %q and uid %q", d.Title, d.UID)
	}
	for _, p := range d.panels() {
		if ref := p.Datasource; ref != nil && ref.UID != "" && !strings.HasPrefix(ref.UID, "$") {
			if typ, ok := uids[ref.UID]; !ok || typ != ref.Type {
				t.Errorf("panel %q uses datasource %+v; provisioned: %v", p.Title, *ref, uids)
			}
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

type dsRef struct{ Type, UID string }

type panel struct {
	Title      string
	Type       string
	Datasource *dsRef
	Targets    []struct {
		Expr       string
		RefID      string `json:"refId"`
		Datasource *dsRef
	}
	Panels []panel // a row's panels
}

type dashboard struct {
	Title  string
	UID    string
	Panels []panel
}

// panels returns every panel, rows' panels included.
func (d dashboard) panels() []panel {
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

func readDashboard(t *testing.T, file string) dashboard {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not a dashboard: %v", file, err)
	}
	return d
}

// Grafana's built-in variables, as Grafana would set them for a 15 s scrape interval and
// the last 15 minutes.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "15m")

// mustHaveData are the dashboard's metrics that the stack's own traffic produces (the
// sample sandbox's allowed and denied requests); the others (approvals, Vault fetches,
// audit errors) stay absent until such an event happens, and their panels' queries are
// only required to evaluate.
var mustHaveData = []string{
	"airlock_requests_total", "airlock_requests_denied_total",
	"airlock_request_duration_seconds_bucket", "airlock_policy_eval_duration_seconds_bucket",
	"airlock_connections_active",
}

// TestDashboardQueries evaluates every query of every panel of deploy/grafana's dashboard
// against the stack's Prometheus, over the last 15 minutes as Grafana would: any error
// fails, and a query over metrics the traffic produces must return series.
func TestDashboardQueries(t *testing.T) {
	c := resolvedCompose(t)
	d := readDashboard(t, hostPath(t, c, c.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]))
	// Wait for the traffic's first scrape: the request counter is there.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := promQuery(`airlock_request_duration_seconds_bucket{job="airlock"}`); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("airlock's request histogram not in Prometheus after 90 s")
		}
		time.Sleep(3 * time.Second)
	}
	// The rate windows need two scrapes inside them.
	time.Sleep(20 * time.Second)
	metricName := regexp.MustCompile(`\bairlock_[a-z_]+`)
	n := 0
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				continue
			}
			n++
			q := grafanaVars.Replace(tg.Expr)
			if strings.Contains(q, "$") {
				t.Errorf("panel %q query %s: a variable this test does not know", p.Title, tg.RefID)
				continue
			}
			series, err := promRange(q, 15*time.Minute, 15*time.Second)
			if err != nil {
				t.Errorf("panel %q query %s: %v", p.Title, tg.RefID, err)
				continue
			}
			for _, m := range metricName.FindAllString(q, -1) {
				for _, want := range mustHaveData {
					if m == want && series == 0 {
						t.Errorf("panel %q query %s (%s): no series, though the traffic produces %s", p.Title, tg.RefID, q, m)
					}
				}
			}
			t.Logf("panel %q %s: %d series", p.Title, tg.RefID, series)
		}
	}
	if n == 0 {
		t.Fatal("the dashboard has no queries")
	}
}

// promRange evaluates a range query and returns how many series it has; an error answer
// (a bad expression, an unknown function) is an error.
func promRange(q string, window, step time.Duration) (int, error) {
	end := time.Now()
	v := url.Values{
		"query": {q},
		"start": {strconv.FormatInt(end.Add(-window).Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.Itoa(int(step.Seconds()))},
	}
	var resp struct {
		Status, Error, ErrorType string
		Warnings                 []string
		Data                     struct{ Result []json.RawMessage }
	}
	if err := getJSON(stack.prometheus+"/api/v1/query_range?"+v.Encode(), &resp); err != nil {
		return 0, err
	}
	if resp.Status != "success" {
		return 0, fmt.Errorf("%s: %s", resp.ErrorType, resp.Error)
	}
	if len(resp.Warnings) > 0 {
		return 0, fmt.Errorf("warnings: %v", resp.Warnings)
	}
	return len(resp.Data.Result), nil
}
