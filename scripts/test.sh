#!/usr/bin/env bash
# airlock's test command (README, and .ci/run): installs what the tests need on a fresh
# Debian machine with Go (Debian packages, Go modules), starts what they need (PostgreSQL),
# and runs every suite: vet and gofmt, unit tests with -race, the e2e suites (sandbox
# escapes, real clients, Chromium, Kubernetes on a real cluster), the real-Vault module,
# benchmarks once, short fuzzing.
# Needs root (or sudo) for apt-get and for the sandbox suites.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n=== %s\n' "$*"; }
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

say "Debian packages"
pkgs=(gcc libc6-dev ca-certificates curl wget git iproute2 python3 python3-requests python3-pip nodejs postgresql chromium busybox-static diffutils strace procps util-linux squid e2fsprogs tmux vim openssh-server openssh-client openssl bubblewrap
	# the Kubernetes suite's cluster (e2e/kubernetes/cluster.sh)
	etcd-server containerd runc containernetworking-plugins iptables ipset conntrack socat kmod)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

say "Go modules"
go mod download
(cd e2e/vault && go mod download)  # e2e/vault replaces the main module with ../..: -mod=mod below

say "PostgreSQL"
pgdir=$(mktemp -d /tmp/airlock-pg.XXXXXX)
# shellcheck disable=SC2064
trap "bash e2e/postgres.sh stop '$pgdir' || true" EXIT
eval "$(bash e2e/postgres.sh start "$pgdir")"
export AIRLOCK_TEST_POSTGRES

say "go vet and staticcheck (every module and build tag), gofmt"
for tags in "" e2e browser e2e,scale k8s; do
	go vet -tags "$tags" ./...
done
(cd e2e/vault && go vet -mod=mod ./...)
# staticcheck, pinned, fetched through the Go module proxy like any module.
staticcheck=(go run honnef.co/go/tools/cmd/staticcheck@v0.8.2)
"${staticcheck[@]}" -tags e2e,browser,scale,k8s ./...
(cd e2e/vault && GOFLAGS=-mod=mod "${staticcheck[@]}" ./...)
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi

say "unit tests (-race)"
# The Docker backend's own tests start containers of the e2e image (sandbox/docker,
# AIRLOCK_TEST_DOCKER_IMAGE); built here as e2e/docker's TestMain builds it.
sh e2e/docker/build-image.sh airlock-sandbox-test:latest
go test -race -count=1 ./...

say "native sandboxes with the Go holder (what a binary built without cgo runs)"
CGO_ENABLED=0 go test -count=1 ./sandbox/native/

say "e2e suites (sandbox escapes, real clients through the proxy, approvals end to end, terminals driven through tmux)"
go test -count=1 -tags e2e -timeout 20m ./e2e/...

say "Kubernetes: deploy/kubernetes on a real single-node cluster built here (e2e/kubernetes)"
# cluster.sh builds Kubernetes from its Go module once per version into
# /var/cache/airlock-k8s (cold ~20 min on 2 cores, then a relink), brings the cluster up
# for the suite and takes it down after it.
go test -count=1 -tags k8s -timeout 50m ./e2e/kubernetes/

say "approval page in headless Chromium"
go test -count=1 -tags browser -run TestBrowser ./approval/

say "real Vault (e2e/vault module)"
(cd e2e/vault && go test -mod=mod -count=1 -timeout 30m ./...)

say "benchmarks, one iteration each"
go test -count=1 -run '^$' -bench . -benchtime 1x ./...
go test -count=1 -tags e2e -run '^$' -bench CreateExecDestroy -benchtime 3x ./e2e/docker/

say "transparent egress against HTTPS_PROXY: the proxy's CPU per request (docs/performance.md)"
go test -count=1 -tags e2e -v -run TestTransparentCost ./bench/transparent/ | grep -E 'ratio|^(ok|FAIL|---)'

say "sandbox sessions beside bwrap, few iterations (docs/performance.md has the full run)"
go run ./bench/cmd/session-bench -n 20

say "load harness, tiny settings (the README's table comes from the full run)"
go test -count=1 -tags e2e -run TestHarnessSmoke ./bench/

say "fuzzing, briefly"
fuzz_targets=(
	"FuzzNormalizeHost ./proxy"
	"FuzzNormalizePath ./proxy"
	"FuzzRequestInput ./proxy"
	"FuzzRemoveHopHeaders ./proxy"
	"FuzzTargetDifferential ./proxy"
	"FuzzBodyDifferential ./proxy"
	"FuzzParse ./internal/jsondoc"
	"FuzzScrub ./secrets"
	"FuzzScrubResponse ./secrets"
	"FuzzQuery ./internal/redact"
	"FuzzVerifySigned ./audit"
	"FuzzEventJSON ./audit"
	"FuzzParseInputJSON ./rego"
	"FuzzCacheKey ./rego"
	"FuzzScanBundle ./rego"
	"FuzzPreview ./approval"
	"FuzzWarnings ./approval"
	"FuzzRequestHash ./approval"
	"FuzzText ./internal/redact"
	"FuzzWriter ./internal/termsafe"
	"FuzzLineDiff ./sandbox/native"
	"FuzzParseGitConfig ./sandbox"
)
for t in "${fuzz_targets[@]}"; do
	set -- $t
	# An execution count, not a duration: with a duration Go 1.26's fuzz coordinator can
	# report "context deadline exceeded" at the deadline without any failing input
	# (golang/go#75804, fixed in Go 1.27). A real finding still fails and is written to
	# testdata/fuzz.
	go test -run '^$' -fuzz "^$1\$" -fuzztime 20000x "$2"
done
# The bypass suite's body differential target goes through the real proxy and an upstream.
go test -tags e2e -run '^$' -fuzz '^FuzzBodyDifferential$' -fuzztime 20000x ./e2e/bypass/

say "all suites passed"
