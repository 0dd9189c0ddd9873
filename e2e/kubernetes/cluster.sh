#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for airlock's Kubernetes e2e suite.
#
#   e2e/kubernetes/cluster.sh build     build (or reuse) the binaries and the pause image
#   e2e/kubernetes/cluster.sh up        build if needed, start the cluster, print KUBECONFIG=...
#   e2e/kubernetes/cluster.sh down      stop what `up` started and remove its state
#   e2e/kubernetes/cluster.sh status    is it up?
#
# What runs: etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager,
# kube-scheduler and kubelet (built from the k8s.io/kubernetes Go module at $K8S_VERSION),
# a containerd instance of its own (Debian's containerd and runc; its own socket, root and
# state, so a Docker daemon's containerd is untouched), the bridge CNI plugin, and
# kube-router in firewall-only mode to enforce NetworkPolicy. Nothing is pulled: pods use
# images imported with `ctr` and imagePullPolicy Never; the pause image is a static binary
# built here.
#
# Binaries are cached by version in $AIRLOCK_K8S_CACHE (default /var/cache/airlock-k8s):
# the first build takes ~15-25 min on 2 cores, later runs reuse it. Runtime state lives in
# $AIRLOCK_K8S_STATE (default /run/airlock-k8s); `down` stops every process by the pid it
# recorded, removes the iptables chains kube-router and the CNI plugins made, unmounts what
# the kubelet and containerd mounted under the state directory, removes their cgroups and
# the state. Needs root.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
CACHE_ROOT=${AIRLOCK_K8S_CACHE:-/var/cache/airlock-k8s}
CACHE=$CACHE_ROOT/$K8S_VERSION
BIN=$CACHE/bin
STATE=${AIRLOCK_K8S_STATE:-/run/airlock-k8s}
POD_CIDR=${AIRLOCK_K8S_POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${AIRLOCK_K8S_SERVICE_CIDR:-10.96.0.0/24}
SECURE_PORT=${AIRLOCK_K8S_PORT:-6443}
CGROUP_PARENT=airlock-k8s

say() { printf '[cluster] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (it runs a kubelet and containerd)"; }

debian_packages=(etcd-server containerd runc containernetworking-plugins iptables ipset conntrack socat openssl iproute2 kmod)

install_packages() {
	local missing=()
	for p in "${debian_packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
		# Debian starts the etcd it just installed; this cluster runs its own instance. A
		# containerd service is left alone: Docker may be using it, and this cluster's
		# containerd has a socket, root and state of its own.
		if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
			systemctl disable --now etcd >/dev/null 2>&1 || true
		fi
	fi
}

# ---------------------------------------------------------------------------------------
# build

k8s_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

built() {
	for b in "${k8s_binaries[@]}" kube-router pause; do
		[ -x "$BIN/$b" ] || return 1
	done
	[ -f "$CACHE/pause.tar" ]
}

build() {
	if built; then
		say "binaries for $K8S_VERSION cached in $BIN"
		return 0
	fi
	mkdir -p "$BIN" "$CACHE/src"
	local src=$CACHE/src
	local kmod
	kmod=$(cd "$src" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
	[ -f "$kmod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
	local staging=${K8S_VERSION/v1./v0.}
	{
		echo "module airlock.local/k8s-build"
		echo
		echo "go 1.26"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		# k8s.io/kubernetes replaces its staging modules with ./staging paths, which mean
		# nothing outside its repository: pin each to its published version.
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' "$kmod"
	} >"$src/go.mod"
	[ "$(grep -c '^replace' "$src/go.mod")" -gt 20 ] || die "found no staging modules in $kmod"

	local major minor date ld=()
	major=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
	minor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
	date=2026-01-01T00:00:00Z # fixed, so that a rebuild reuses the link cache
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		ld+=("-X $pkg.gitVersion=$K8S_VERSION" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor"
			"-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=$date")
	done
	local pkgs=()
	for b in "${k8s_binaries[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	say "building ${k8s_binaries[*]} $K8S_VERSION (cold: ~15-25 min on 2 cores)"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w ${ld[*]}" -o "$BIN/" "${pkgs[@]}")

	say "building kube-router $KUBE_ROUTER_VERSION"
	CGO_ENABLED=0 GOBIN=$BIN go install -trimpath -ldflags "-s -w" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"

	say "building the pause image"
	mkdir -p "$src/pause"
	cat >"$src/pause/main.go" <<'EOF'
// pause holds a pod's namespaces: it sleeps until SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/pause" ./pause)
	make_image "$CACHE/pause.tar" "airlock.local/pause:1" "$BIN/pause" /pause
}

# make_image TAR REF FILE PATH: a docker-archive holding one layer with FILE at PATH, run
# as PATH: what `ctr images import` takes.
make_image() {
	local out=$1 ref=$2 file=$3 path=$4 tmp
	tmp=$(mktemp -d)
	mkdir -p "$tmp/rootfs$(dirname "$path")"
	cp "$file" "$tmp/rootfs$path"
	tar -C "$tmp/rootfs" --numeric-owner --owner=0 --group=0 -cf "$tmp/layer.tar" .
	local diff cfg
	diff=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
	cat >"$tmp/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["$path"]},"rootfs":{"type":"layers","diff_ids":["sha256:$diff"]}}
EOF
	cfg=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
	mv "$tmp/config.json" "$tmp/$cfg.json"
	mkdir "$tmp/$diff" && mv "$tmp/layer.tar" "$tmp/$diff/layer.tar"
	echo "[{\"Config\":\"$cfg.json\",\"RepoTags\":[\"$ref\"],\"Layers\":[\"$diff/layer.tar\"]}]" >"$tmp/manifest.json"
	tar -C "$tmp" -cf "$out" manifest.json "$cfg.json" "$diff"
	rm -rf "$tmp"
}

# ---------------------------------------------------------------------------------------
# up

NODE=airlock-e2e
ETCD_PORT=12379
CTRD_SOCK=$STATE/containerd/containerd.sock
BRIDGE=airlock-k8s0
KUBECONFIG_ADMIN=$STATE/pki/admin.kubeconfig
REPO=$(cd "$(dirname "$0")/../.." && pwd)

node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1; }

# cert NAME CN O [SAN]: a key and a certificate signed by the cluster's CA.
cert() {
	local name=$1 cn=$2 o=$3 san=${4:-} d=$STATE/pki
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/$name.key" \
		-out "$d/$name.csr" -subj "/CN=$cn${o:+/O=$o}" 2>/dev/null
	{
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[ -n "$san" ] && echo "subjectAltName=$san"
	} >"$d/$name.ext"
	openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
		-days 7 -extfile "$d/$name.ext" -out "$d/$name.crt" 2>/dev/null
	rm -f "$d/$name.csr" "$d/$name.ext"
}

kubeconfig() {
	local name=$1 d=$STATE/pki
	cat >"$d/$name.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: airlock-e2e
  cluster:
    server: https://$(node_ip):$SECURE_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$d/$name.crt")
    client-key-data: $(base64 -w0 "$d/$name.key")
contexts:
- name: airlock-e2e
  context: {cluster: airlock-e2e, user: $name}
current-context: airlock-e2e
EOK
}

pki() {
	local d=$STATE/pki ip
	ip=$(node_ip)
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
		-keyout "$d/ca.key" -out "$d/ca.crt" -subj "/CN=airlock-e2e-ca" 2>/dev/null
	local svcip
	svcip=$(echo "$SERVICE_CIDR" | sed 's#\.0/[0-9]*$#.1#')
	cert apiserver kube-apiserver "" "IP:$ip,IP:127.0.0.1,IP:$svcip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin airlock-e2e-admin system:masters
	cert controller-manager system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kubelet "system:node:$NODE" system:nodes
	cert kube-proxy system:kube-proxy ""
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	for k in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$k"; done
}

# start NAME CMD...: runs CMD in its own session, logging to log/NAME.log, pid in pids/NAME.
start() {
	local name=$1
	shift
	setsid nohup "$@" >"$STATE/log/$name.log" 2>&1 </dev/null &
	echo $! >"$STATE/pids/$name"
}

running() { [ -f "$STATE/pids/$1" ] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

# wait_for WHAT SECONDS CMD...
wait_for() {
	local what=$1 secs=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ $SECONDS -ge $end ]; then
			say "timed out waiting for $what; logs in $STATE/log"
			for f in "$STATE"/log/*.log; do echo "--- $f" >&2; tail -n 15 "$f" >&2; done
			return 1
		fi
		sleep 1
	done
}

kctl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

node_ready() { [ "$(kctl get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }

cgroup_dirs() {
	for c in /sys/fs/cgroup/*/; do
		[ -d "$c" ] && [ ! -L "${c%/}" ] && echo "${c}$CGROUP_PARENT"
	done
}

up() {
	need_root
	if running kube-apiserver; then
		say "already up"
		echo "KUBECONFIG=$KUBECONFIG_ADMIN"
		return 0
	fi
	install_packages
	build
	[ -e "$STATE" ] && down
	local ip
	ip=$(node_ip)
	[ -n "$ip" ] || die "no node IP: the kubelet needs a non-loopback address"
	mkdir -p "$STATE"/{log,pids,etcd,containerd,cni/net.d,cni/ipam,kubelet,pod-logs}
	date +%s >"$STATE/started"
	pki

	for d in $(cgroup_dirs); do
		mkdir -p "$d"
		if [ -f "$d/../cpuset.cpus" ]; then
			cat "$d/../cpuset.cpus" >"$d/cpuset.cpus"
			cat "$d/../cpuset.mems" >"$d/cpuset.mems"
		fi
	done
	# Pod traffic is bridged: NetworkPolicy (kube-router's iptables rules) sees it only with
	# br_netfilter's hooks on.
	# `down` puts back what was there.
	sysctl -e net.bridge.bridge-nf-call-iptables net.ipv4.ip_forward | tr -d ' ' >"$STATE/sysctl"
	sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1 || die "cannot enable bridge netfilter hooks"

	say "etcd"
	start etcd etcd --name airlock-e2e --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
		--initial-cluster "airlock-e2e=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync
	wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

	say "kube-apiserver"
	local p=$STATE/pki
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 0.0.0.0 --secure-port "$SECURE_PORT" --advertise-address "$ip" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--kubelet-preferred-address-types InternalIP \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--profiling=false
	wait_for kube-apiserver 120 curl -fsS --cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key" "https://127.0.0.1:$SECURE_PORT/readyz"

	say "kube-controller-manager, kube-scheduler"
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$p/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$p/controller-manager.kubeconfig" --authorization-kubeconfig "$p/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
		--allocate-node-cidrs --cluster-cidr "${POD_CIDR%.*}.0/16" --node-cidr-mask-size 24 \
		--service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$p/scheduler.kubeconfig" \
		--authentication-kubeconfig "$p/scheduler.kubeconfig" --authorization-kubeconfig "$p/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false

	say "containerd"
	cat >"$STATE/containerd/config.toml" <<EOC
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "airlock.local/pause:1"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
EOC
	cat >"$STATE/cni/net.d/10-airlock-e2e.conflist" <<EOC
{
  "cniVersion": "0.4.0",
  "name": "airlock-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOC
	# containerd 1.6 keeps its shims' sockets and runc's state under /run/containerd (so do
	# Docker's containerd's shims) and the CNI plugins their cache under /var/lib/cni
	# whatever the config says: `down` removes the empty directories left there when up made
	# them.
	for d in /run/containerd /var/lib/cni; do
		[ -e "$d" ] || echo "$d" >>"$STATE/made-dirs"
	done
	start containerd containerd --config "$STATE/containerd/config.toml"
	wait_for containerd 30 ctr --address "$CTRD_SOCK" version
	ctr --address "$CTRD_SOCK" -n k8s.io images import "$CACHE/pause.tar" >/dev/null

	# Forwarded pod traffic is accepted here unless a NetworkPolicy (kube-router's chains,
	# first in FORWARD) dropped it; Docker's FORWARD policy is DROP.
	iptables -N AIRLOCK-K8S-FORWARD 2>/dev/null || iptables -F AIRLOCK-K8S-FORWARD
	iptables -D FORWARD -j AIRLOCK-K8S-FORWARD 2>/dev/null || true
	iptables -A AIRLOCK-K8S-FORWARD -s "${POD_CIDR%.*}.0/16" -j ACCEPT
	iptables -A AIRLOCK-K8S-FORWARD -d "${POD_CIDR%.*}.0/16" -j ACCEPT
	iptables -A FORWARD -j AIRLOCK-K8S-FORWARD

	say "kubelet"
	cat >"$STATE/kubelet/config.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_PARENT
containerRuntimeEndpoint: unix://$CTRD_SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $p/ca.crt}
authorization: {mode: AlwaysAllow}
address: $ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
clusterDomain: cluster.local
clusterDNS: [$ip]
resolvConf: ""
podLogsDir: $STATE/pod-logs
podPidsLimit: 4096
maxPods: 60
failSwapOn: false
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOC
	start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" --kubeconfig "$p/kubelet.kubeconfig" \
		--root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" --hostname-override "$NODE" --node-ip "$ip"
	wait_for "node $NODE Ready" 180 node_ready

	say "kube-proxy, kube-router (NetworkPolicy), cluster DNS"
	start kube-proxy "$BIN/kube-proxy" --kubeconfig "$p/kube-proxy.kubeconfig" --hostname-override "$NODE" \
		--proxy-mode iptables --cluster-cidr "${POD_CIDR%.*}.0/16" --conntrack-max-per-core 0 \
		--metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
	start kube-router "$BIN/kube-router" --kubeconfig "$KUBECONFIG_ADMIN" --hostname-override "$NODE" \
		--run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
		--metrics-port 0 --health-port 20244
	(cd "$REPO" && CGO_ENABLED=0 go build -o "$STATE/clusterdns" ./e2e/kubernetes/clusterdns)
	start clusterdns "$STATE/clusterdns" -listen "$ip:53" -kubeconfig "$KUBECONFIG_ADMIN"
	wait_for kube-proxy 60 curl -fsS http://127.0.0.1:10256/healthz
	wait_for kube-router 60 curl -fsS http://127.0.0.1:20244/healthz
	wait_for "the default service account" 60 kctl -n default get serviceaccount default
	say "up: KUBECONFIG=$KUBECONFIG_ADMIN"
	echo "KUBECONFIG=$KUBECONFIG_ADMIN"
}

# ---------------------------------------------------------------------------------------
# down

stop() {
	local name=$1 pid
	[ -f "$STATE/pids/$name" ] || return 0
	pid=$(cat "$STATE/pids/$name")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$STATE/pids/$name"
}

# The pids of the containerd shims this cluster's containerd started (their command line
# names its socket), and of every process in its pods' cgroups.
leftover_pids() {
	grep -alsF -- "$CTRD_SOCK" /proc/[0-9]*/cmdline 2>/dev/null | sed -n 's#^/proc/\([0-9]*\)/cmdline$#\1#p' | grep -vx "$$" || true
	for d in $(cgroup_dirs); do
		if [ -d "$d" ]; then find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
	done
}

ipt_clean() {
	local ipt=$1 t
	for t in filter nat mangle raw; do
		"$ipt-save" -t "$t" >/dev/null 2>&1 || continue
		local rules
		rules=$("$ipt-save" -t "$t")
		echo "$rules" | grep -qE '(KUBE-|CNI-|AIRLOCK-K8S)' || continue
		# The table without the chains Kubernetes, kube-router and the CNI plugins made,
		# nor any rule jumping to them; everything else (Docker's rules) is kept as it is.
		echo "$rules" | grep -vE '^:(KUBE-|CNI-|AIRLOCK-K8S)' | grep -vE '^-A (KUBE-|CNI-|AIRLOCK-K8S)' |
			grep -vE -- '-[jg] (KUBE-|CNI-|AIRLOCK-K8S)' | "$ipt-restore" -w
	done
}

down() {
	need_root
	[ -e "$STATE" ] || { say "nothing to take down"; return 0; }
	say "stopping the cluster in $STATE"
	# No new pods, then the kubelet removes the running ones (their networks too).
	stop kube-controller-manager
	stop kube-scheduler
	if running kube-apiserver && running kubelet; then
		kctl delete pods --all-namespaces --all --grace-period 0 --force --wait=false >/dev/null 2>&1 || true
		local end=$((SECONDS + 60))
		while [ $SECONDS -lt $end ] && [ -n "$(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null)" ]; do
			sleep 1
		done
	fi
	for s in clusterdns kube-router kube-proxy kubelet kube-apiserver etcd containerd; do
		stop "$s"
	done
	local pids
	pids=$(leftover_pids | sort -u)
	if [ -n "$pids" ]; then
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		sleep 1
	fi
	# Mounts under the state directory (pod volumes, rootfs, snapshots) and the pods'
	# network namespaces, deepest first.
	awk -v s="$STATE" '$5 == s || index($5, s "/") == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	local started
	started=$(cat "$STATE/started" 2>/dev/null || echo 0)
	for ns in /run/netns/cni-*; do
		[ -e "$ns" ] || continue
		if [ "$(stat -c %Y "$ns")" -ge "$started" ]; then
			umount -l "$ns" 2>/dev/null || true
			rm -f "$ns"
		fi
	done
	rm -rf /var/lib/cni/results/airlock-e2e-* 2>/dev/null || true
	ip link del "$BRIDGE" 2>/dev/null || true
	ipt_clean iptables
	ipt_clean ip6tables
	{ ipset list -n 2>/dev/null || true; } | { grep -E '^(KUBE-|kube-router-|inet6:KUBE-|inet6:kube-router-)' || true; } | while read -r s; do
		ipset destroy "$s" 2>/dev/null || true
	done
	for d in $(cgroup_dirs); do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	if [ -s "$STATE/sysctl" ]; then
		# shellcheck disable=SC2046
		sysctl -qw $(cat "$STATE/sysctl") || true
	fi
	if [ -f "$STATE/made-dirs" ]; then
		while read -r d; do
			[ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null || true
		done <"$STATE/made-dirs"
	fi
	rm -rf "$STATE"
	say "down"
}

status() {
	if running kube-apiserver && node_ready; then
		echo "up: KUBECONFIG=$KUBECONFIG_ADMIN"
	else
		echo "down"
		return 1
	fi
}

# load-docker IMAGE...: copies images from the local Docker engine into the cluster's
# containerd (pods use imagePullPolicy Never or IfNotPresent).
load_docker() {
	for img in "$@"; do
		docker save "$img" | ctr --address "$CTRD_SOCK" -n k8s.io images import - >/dev/null
	done
}

case "${1:-}" in
build) build ;;
up) up ;;
down) down ;;
status) status ;;
load-docker) shift; load_docker "$@" ;;
*) echo "usage: $0 build|up|down|status|load-docker IMAGE..." >&2; exit 2 ;;
esac
