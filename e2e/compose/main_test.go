//go:build compose

// Package compose_test brings docker-compose.yml up as shipped, with every image built on
// this machine (deploy/build-images.sh, deploy/build-companions.sh: airlock, the sample
// sandbox, Vault, our OpenTelemetry Collector, Jaeger v2, Debian's Prometheus), sends traffic
// through airlock from the sandbox network, and finds it where an operator would: the trace
// in Jaeger's query API, the counters in Prometheus's API. Grafana cannot run here (its image
// is pulled); its provisioning is checked against the compose file and every dashboard query
// is evaluated against the stack's Prometheus.
//
//	go test -tags compose -count=1 -timeout 40m ./e2e/compose/
//
// Needs a Docker engine and docker-compose (1.29). The stack runs under a project name of its
// own (airlocke2e<pid>) on host ports chosen at run time, and everything the project made
// (containers, networks, volumes) is removed after the run, failed or not. Its networks
// have the fixed subnets docker-compose.yml names (172.30.1.0/24, 172.30.2.0/24): another
// stack from the same file cannot be up at the same time. The first run builds Vault and
// Jaeger from their Go modules (cached by version in /var/cache/airlock-compose).
// AIRLOCK_COMPOSE_KEEP=1 leaves the stack up (docker-compose -p <project> down -v removes it).
package compose_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stack is the compose project under test.
var stack struct {
	repo, project      string
	env                []string // the environment docker-compose runs with (host ports)
	jaeger, prometheus string   // base URLs through the published ports
}

func TestMain(m *testing.M) { os.Exit(setup(m)) }

func setup(m *testing.M) int {
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Printf("e2e/compose: skipped: %s is not installed\n", tool)
			return 0
		}
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Printf("e2e/compose: skipped: no Docker engine: %v %s\n", err, out)
		return 0
	}
	wd, _ := os.Getwd()
	stack.repo = filepath.Clean(filepath.Join(wd, "../.."))
	stack.project = fmt.Sprintf("airlocke2e%d", os.Getpid())
	start := time.Now()
	for _, s := range []string{"deploy/build-images.sh", "deploy/build-companions.sh"} {
		cmd := exec.Command("sh", s)
		cmd.Dir = stack.repo
		out, err := cmd.CombinedOutput()
		fmt.Printf("e2e/compose: %s (%s since start)\n%s", s, time.Since(start).Round(time.Second), out)
		if err != nil {
			fmt.Printf("e2e/compose: %s: %v\n", s, err)
			return 1
		}
	}
	ports := map[string]int{}
	for _, name := range []string{"VAULT", "JAEGER", "PROMETHEUS", "GRAFANA"} {
		p, err := freePort()
		if err != nil {
			fmt.Println("e2e/compose:", err)
			return 1
		}
		ports[name] = p
		stack.env = append(stack.env, fmt.Sprintf("AIRLOCK_%s_PORT=%d", name, p))
	}
	stack.jaeger = fmt.Sprintf("http://127.0.0.1:%d", ports["JAEGER"])
	stack.prometheus = fmt.Sprintf("http://127.0.0.1:%d", ports["PROMETHEUS"])

	if os.Getenv("AIRLOCK_COMPOSE_KEEP") == "" {
		defer down()
	}
	if out, err := compose("up", "-d", "--no-build"); err != nil {
		fmt.Printf("e2e/compose: up: %v\n%s", err, out)
		logs()
		return 1
	}
	if err := waitReady(); err != nil {
		fmt.Printf("e2e/compose: %v\n", err)
		logs()
		return 1
	}
	fmt.Printf("e2e/compose: stack %s up, %s since start\n", stack.project, time.Since(start).Round(time.Second))
	code := m.Run()
	if code != 0 {
		logs()
	}
	return code
}

// compose runs docker-compose on the repository's file under the test's project name and
// returns its standard output (its standard error too when it fails).
func compose(args ...string) ([]byte, error) {
	args = append([]string{"-p", stack.project, "-f", filepath.Join(stack.repo, "docker-compose.yml"), "--ansi", "never"}, args...)
	cmd := exec.Command("docker-compose", args...)
	cmd.Dir = stack.repo
	cmd.Env = append(os.Environ(), stack.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return append(out.Bytes(), errOut.Bytes()...), err
	}
	return out.Bytes(), nil
}

// down removes everything the project made: its containers (and those the tests started on
// its networks, labelled with the project), networks and volumes.
func down() {
	if ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label=airlock-e2e-compose="+stack.project).Output(); err == nil {
		for _, id := range strings.Fields(string(ids)) {
			exec.Command("docker", "rm", "-f", id).Run()
		}
	}
	if out, err := compose("down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
		fmt.Printf("e2e/compose: down: %v\n%s", err, out)
	}
	left, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=com.docker.compose.project="+stack.project).Output()
	nets, _ := exec.Command("docker", "network", "ls", "-q", "--filter", "label=com.docker.compose.project="+stack.project).Output()
	vols, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project="+stack.project).Output()
	if s := strings.TrimSpace(string(left) + string(nets) + string(vols)); s != "" {
		fmt.Printf("e2e/compose: left after down: %s\n", s)
	}
}

// logs prints the tail of every service's log, for a failed run.
func logs() {
	out, _ := compose("ps", "-a")
	fmt.Printf("e2e/compose: docker-compose ps:\n%s", out)
	out, _ = compose("logs", "--no-color", "--tail", "40")
	fmt.Printf("e2e/compose: logs:\n%s", out)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until vault-init has finished, airlock answers on its admin listener
// (through Prometheus's view of it), and Jaeger and Prometheus answer.
func waitReady() error {
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		last = ready()
		if last == nil {
			return nil
		}
		time.Sleep(2 * time.Second)
	}
	return fmt.Errorf("stack not ready after 3 minutes: %v", last)
}

func ready() error {
	code, err := exitCode("vault-init")
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("vault-init exited %d", code)
	}
	for _, svc := range []string{"vault", "airlock", "otel-collector", "jaeger", "prometheus", "sandbox"} {
		if state, err := containerState(svc); err != nil || state != "running" {
			return fmt.Errorf("%s: %q %v", svc, state, err)
		}
	}
	var services struct{ Data []string }
	if err := getJSON(stack.jaeger+"/api/services", &services); err != nil {
		return fmt.Errorf("jaeger: %v", err)
	}
	if _, err := promQuery(`up{job="airlock"} == 1`); err != nil {
		return fmt.Errorf("prometheus: %v", err)
	}
	return nil
}

// containerID returns the id of the (one) container of a compose service.
func containerID(svc string) (string, error) {
	out, err := compose("ps", "-q", svc)
	if err != nil {
		return "", fmt.Errorf("ps %s: %v %s", svc, err, out)
	}
	id := strings.TrimSpace(string(out))
	if id == "" || strings.Contains(id, "\n") {
		return "", fmt.Errorf("service %s has containers %q", svc, id)
	}
	return id, nil
}

func inspect(svc, format string) (string, error) {
	id, err := containerID(svc)
	if err != nil {
		return "", err
	}
	out, err := exec.Command("docker", "inspect", "-f", format, id).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("inspect %s: %v %s", svc, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func containerState(svc string) (string, error) { return inspect(svc, "{{.State.Status}}") }

func exitCode(svc string) (int, error) {
	s, err := inspect(svc, "{{.State.Status}} {{.State.ExitCode}}")
	if err != nil {
		return 0, err
	}
	status, code, _ := strings.Cut(s, " ")
	if status != "exited" {
		return 0, fmt.Errorf("%s is %s", svc, status)
	}
	return strconv.Atoi(code)
}

// containerIP is the address of a service's container on one of the project's networks.
func containerIP(svc, network string) (string, error) {
	return inspect(svc, fmt.Sprintf(`{{(index .NetworkSettings.Networks "%s_%s").IPAddress}}`, stack.project, network))
}
