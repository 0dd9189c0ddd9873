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
	etcd-server containerd runc containernetworking-plugins iptables ipset conntrack socat kmod
	# the compose stack (e2e/compose): docker-compose, and Prometheus for its image
	docker-compose prometheus)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
	# Debian starts the Prometheus it installs (on :9090); the compose stack runs its own.
	if [[ " ${missing[*]} " == *" prometheus "* ]]; then
		$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
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
for tags in "" e2e browser e2e,scale k8s compose; do
	go vet -tags "$tags" ./...
done
(cd e2e/vault && go vet -mod=mod ./...)
# staticcheck, pinned, fetched through the Go module proxy like any module.
staticcheck=(go run honnef.co/go/tools/cmd/staticcheck@v0.8.2)
"${staticcheck[@]}" -tags e2e,browser,scale,k8s,compose ./...
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

say "the compose stack: docker-compose.yml with every image built here (e2e/compose)"
# Builds airlock's images and the companions (Vault from e2e/vault's module, our collector,
# Jaeger v2, Debian's Prometheus), cached by version in /var/cache/airlock-compose; brings
# the stack up under a project of its own, and removes it after.
go test -count=1 -tags compose -timeout 40m ./e2e/compose/

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
	"FuzzNormalize ./internal/hostname"
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

say "escape and client suites on an image root (AIRLOCK_E2E_ROOTFS: the host's /usr hard-linked into a root of its own)"
img_root=$(mktemp -d /var/tmp/airlock-e2e-rootfs.XXXXXX)
mkdir -p "$img_root/usr" "$img_root/etc"
cp -al /usr/bin /usr/sbin /usr/lib /usr/lib64 /usr/libexec /usr/share "$img_root/usr/" 2>/dev/null || true
for l in bin sbin lib lib64; do ln -s "usr/$l" "$img_root/$l"; done
cp -a /etc/alternatives /etc/ld.so.cache /etc/nsswitch.conf /etc/protocols /etc/services "$img_root/etc/"
AIRLOCK_E2E_ROOTFS=$img_root go test -count=1 -tags e2e \
	-run 'TestEscapes|TestSyscallBoundary|TestInstalledFilterKillsForeignABIs|TestSetIDFilesNeverReachTheHost|TestHostToolsFilesAreReadOnly' ./e2e/sandbox/
# The real clients on it (TestParentProxy starts no sandbox; TestCurlInAnImage makes a
# docker save image of curl from this root and runs it with --image, through the cache).
AIRLOCK_E2E_ROOTFS=$img_root go test -count=1 -tags e2e -skip TestParentProxy ./e2e/clients/
# The same rootless (airlock-test must read the root: mktemp made it 0700).
chmod 755 "$img_root"
AIRLOCK_E2E_ROOTLESS=1 AIRLOCK_E2E_ROOTFS=$img_root go test -count=1 -tags e2e \
	-run 'TestEscapes|TestSyscallBoundary|TestSetIDFilesNeverReachTheHost|TestHostToolsFilesAreReadOnly' ./e2e/sandbox/
AIRLOCK_E2E_ROOTLESS=1 AIRLOCK_E2E_ROOTFS=$img_root go test -count=1 -tags e2e -skip 'TestParentProxy|TestMCPClientInSandbox' ./e2e/clients/
rm -rf "$img_root"

say "rootless: the escape suite and the real clients again, as the unprivileged user airlock-test (made if missing)"
# One package at a time (both make a sandbox named sbx-clients in that user's state directory);
# the MCP client's build needs the module cache, which that user cannot read.
AIRLOCK_E2E_ROOTLESS=1 go test -p 1 -count=1 -tags e2e -skip TestMCPClientInSandbox ./e2e/sandbox/ ./e2e/clients/
# A root of its own, rootless (its overlay is mounted in a user namespace); sessions served by a rootless proxy.
AIRLOCK_E2E_ROOTLESS=1 go test -count=1 -tags e2e -run 'TestRootlessImageRootMounts|TestRootlessSession' ./e2e/image/

say "all suites passed"
