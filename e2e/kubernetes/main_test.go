//go:build k8s

// Package kubernetes_test runs airlock's Kubernetes side on a real single-node cluster
// built on this machine (e2e/kubernetes/cluster.sh): deploy/kubernetes/ applied as shipped
// with airlock's image built here, the proxy Deployment's replicas against a real
// PostgreSQL, sandbox pods made by the kubernetes backend (and by `airlock sandbox run
// --backend kubernetes`) with the proxy's service account, NetworkPolicy enforced by
// kube-router, Pod Security "restricted" enforced by the API server.
//
//	go test -tags k8s -count=1 -timeout 45m ./e2e/kubernetes/
//
// Needs root and a Docker engine (the images are built with it and copied into the
// cluster's containerd). The first run builds Kubernetes (~15-25 min on 2 cores), cached in
// /var/cache/airlock-k8s. AIRLOCK_K8S_KEEP=1 leaves the cluster up after the run (and
// reuses one that is up); `e2e/kubernetes/cluster.sh down` takes it down.
package kubernetes_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	proxyNS    = "airlock"
	sandboxNS  = "airlock-sandboxes"
	sandboxImg = "airlock-sandbox-test:latest"
	airlockImg = "airlock:dev" // deploy/build-images.sh's, the Deployment's and the sandboxes' init image
)

var (
	repo      string // the repository's root
	adminKube string // the cluster admin's kubeconfig
	kadmin    kubernetes.Interface
	adminREST *rest.Config
	nodeIP    string
	airlock   string // the airlock binary built for this run
	env       *deployment
)

func TestMain(m *testing.M) { os.Exit(setup(m)) }

func setup(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("e2e/kubernetes: skipped: needs root (it runs a kubelet, containerd and iptables rules)")
		return 0
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Printf("e2e/kubernetes: skipped: no Docker engine to build the images with: %v %s\n", err, out)
		return 0
	}
	wd, _ := os.Getwd()
	repo = filepath.Clean(filepath.Join(wd, "../.."))
	keep := os.Getenv("AIRLOCK_K8S_KEEP") != ""
	start := time.Now()
	out, err := script("e2e/kubernetes/cluster.sh", "up")
	if err != nil {
		fmt.Printf("e2e/kubernetes: cluster up: %v\n%s", err, out)
		script("e2e/kubernetes/cluster.sh", "down")
		return 1
	}
	if !keep {
		defer func() {
			if out, err := script("e2e/kubernetes/cluster.sh", "down"); err != nil {
				fmt.Printf("e2e/kubernetes: cluster down: %v\n%s", err, out)
			}
		}()
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "KUBECONFIG="); ok {
			adminKube = v
		}
	}
	fmt.Printf("e2e/kubernetes: cluster up in %s\n", time.Since(start).Round(time.Second))
	if adminREST, err = clientcmd.BuildConfigFromFlags("", adminKube); err != nil {
		fmt.Println(err)
		return 1
	}
	if kadmin, err = kubernetes.NewForConfig(adminREST); err != nil {
		fmt.Println(err)
		return 1
	}
	nodeIP = strings.Split(strings.TrimPrefix(adminREST.Host, "https://"), ":")[0]

	dir, err := os.MkdirTemp("", "airlock-e2e-k8s-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	airlock = filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-trimpath", "-o", airlock, "./cmd/airlock")
	build.Dir, build.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("e2e/kubernetes: build airlock: %v\n%s", err, out)
		return 1
	}
	// The images: airlock's (deploy/build-images.sh, the compose stack's too) and the
	// sandbox's (busybox and curl), copied from Docker into the cluster's containerd.
	for _, s := range [][]string{
		{"deploy/build-images.sh"},
		{"e2e/docker/build-image.sh", sandboxImg},
		{"e2e/kubernetes/cluster.sh", "load-docker", airlockImg, sandboxImg},
	} {
		cmd := exec.Command("sh", s...)
		if strings.HasSuffix(s[0], "cluster.sh") {
			cmd = exec.Command("bash", s...)
		}
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "AIRLOCK_BIN="+airlock)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Printf("e2e/kubernetes: %s: %v\n%s", s[0], err, out)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err = deploy(ctx, dir)
	if env != nil {
		defer env.close()
	}
	if err != nil {
		fmt.Printf("e2e/kubernetes: deploy: %v\n", err)
		if env != nil {
			env.dumpProxyLogs()
		}
		return 1
	}
	fmt.Printf("e2e/kubernetes: deployed, %d replicas ready, %s since start\n", len(env.replicas), time.Since(start).Round(time.Second))
	return m.Run()
}

// script runs a script of the repository and returns its output.
func script(name string, args ...string) ([]byte, error) {
	cmd := exec.Command("bash", append([]string{name}, args...)...)
	cmd.Dir = repo
	var out strings.Builder
	cmd.Stdout = &out
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		fmt.Println(sc.Text()) // progress, as it happens
	}
	err := cmd.Wait()
	return []byte(out.String()), err
}

// kubectl runs the cluster's kubectl as its admin.
func kubectl(stdin string, args ...string) (string, error) {
	bin := filepath.Join(cacheDir(), "bin", "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", adminKube}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func cacheDir() string {
	root := os.Getenv("AIRLOCK_K8S_CACHE")
	if root == "" {
		root = "/var/cache/airlock-k8s"
	}
	v := os.Getenv("K8S_VERSION")
	if v == "" {
		v = "v1.37.2"
	}
	return filepath.Join(root, v)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
