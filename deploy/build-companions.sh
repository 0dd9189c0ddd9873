#!/bin/sh
# Builds the images of docker-compose.yml's companions on a machine that cannot pull images:
#   airlock/vault:local       vault-dev (e2e/vault/cmd/vault-dev: the Vault of the real-Vault
#                             suite as an in-memory dev server, and the stack's vault-init) on the
#                             busybox rootfs
#   airlock/otelcol:local     our OpenTelemetry Collector distribution (deploy/otelcol)
#   airlock/jaeger:local      Jaeger v2 all-in-one (github.com/jaegertracing/jaeger/cmd/jaeger,
#                             module deploy/images/jaeger), in-memory storage by default
#   airlock/prometheus:local  Debian's prometheus binary with the libc it links
# Run deploy/build-images.sh first (it makes airlock/busybox-rootfs:local). Needs go, docker,
# and Debian's prometheus package.
#
# The Go binaries are static (CGO_ENABLED=0) and cached in $AIRLOCK_COMPOSE_CACHE (default
# /var/cache/airlock-compose) as <name>-<version>-<hash>/<name>, the hash covering the module's
# go.mod, go.sum and Go files and the Go version: a second run only makes the images.
# Usage: sh deploy/build-companions.sh   (from anywhere)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${AIRLOCK_COMPOSE_CACHE:-/var/cache/airlock-compose}
out="$root/deploy/out/companions"
rm -rf "$out"
mkdir -p "$cache" "$out"

docker image inspect airlock/busybox-rootfs:local >/dev/null 2>&1 ||
	{ echo "airlock/busybox-rootfs:local is missing: run deploy/build-images.sh first" >&2; exit 1; }

# gobuild NAME MODULE_DIR VERSION PACKAGE [LDFLAGS]: prints the cached binary's path, building it
# when the cache has none for this version and these module files (go.mod, go.sum and the Go
# files of MODULE_DIR and of PACKAGE when it is a directory in it). Static (CGO_ENABLED=0,
# -trimpath) unless GOBUILD_SHARED=1, which builds as `go test` does in that module so that
# the packages compiled for its tests are reused (the binary then needs the rootfs's libc).
gobuild() {
	name=$1 dir=$2 version=$3 pkg=$4 ldflags=${5:-}
	hash=$( (go env GOVERSION; echo "${GOBUILD_SHARED:-0}"; cd "$dir" && cat go.mod go.sum $(ls ./*.go 2>/dev/null) $(ls "$pkg"/*.go 2>/dev/null)) | sha256sum | cut -c1-12)
	bin="$cache/$name-$version-$hash/$name"
	if [ ! -x "$bin" ]; then
		echo "building $name $version (cold: minutes)" >&2
		start=$(date +%s)
		mkdir -p "$(dirname "$bin")"
		if [ "${GOBUILD_SHARED:-0}" = 1 ]; then
			(cd "$dir" && go build -mod=mod -ldflags "-s -w $ldflags" -o "$bin.tmp" "$pkg")
		else
			(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$bin.tmp" "$pkg")
		fi
		mv "$bin.tmp" "$bin"
		echo "built $name in $(($(date +%s) - start)) s" >&2
	fi
	echo "$bin"
}

# modversion DIR MODULE: the version of MODULE that DIR's go.mod requires.
modversion() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# image TAG BASE BINARY [DOCKERFILE LINES...]: an image of BINARY at /bin/NAME on BASE.
image() {
	tag=$1 base=$2 bin=$3
	shift 3
	ctx="$out/$(basename "$bin")"
	mkdir -p "$ctx"
	cp "$bin" "$ctx/"
	{
		echo "FROM $base"
		echo "COPY $(basename "$bin") /bin/$(basename "$bin")"
		for line in "$@"; do echo "$line"; done
	} >"$ctx/Dockerfile"
	docker build -q -t "$tag" "$ctx" >/dev/null
	echo "built $tag" >&2
}

# Vault: `vault-dev server` (in memory, unsealed, root token from VAULT_DEV_ROOT_TOKEN_ID) and
# `vault-dev init` (the stack's vault-init). Built in e2e/vault's module, as its tests are,
# so a machine that ran them compiles none of Vault again; the rootfs has the libc it links.
vdir="$root/e2e/vault"
vault=$(GOBUILD_SHARED=1 gobuild vault-dev "$vdir" "$(modversion "$vdir" github.com/hashicorp/vault)" ./cmd/vault-dev)
image airlock/vault:local airlock/busybox-rootfs:local "$vault" \
	'ENV HOME=/tmp VAULT_ADDR=http://127.0.0.1:8200' 'EXPOSE 8200' 'ENTRYPOINT ["/bin/vault-dev"]' 'CMD ["server"]'

# The OpenTelemetry Collector: as nobody, on scratch.
odir="$root/deploy/otelcol"
oversion=$(modversion "$odir" go.opentelemetry.io/collector/otelcol)
otelcol=$(gobuild otelcol "$odir" "$oversion" . "-X main.version=$oversion")
image airlock/otelcol:local scratch "$otelcol" 'USER 65534:65534' 'EXPOSE 4317 4318 8888' \
	'ENTRYPOINT ["/bin/otelcol"]' 'CMD ["--config=/etc/otelcol/config.yaml"]'

# Jaeger v2: with no --config it runs its all-in-one configuration (OTLP in on 4317/4318,
# memory storage, query API and UI on 16686).
jdir="$root/deploy/images/jaeger"
jversion=$(modversion "$jdir" github.com/jaegertracing/jaeger)
jaeger=$(gobuild jaeger "$jdir" "$jversion" github.com/jaegertracing/jaeger/cmd/jaeger)
image airlock/jaeger:local scratch "$jaeger" 'USER 65534:65534' 'EXPOSE 4317 4318 16686' \
	'ENTRYPOINT ["/bin/jaeger"]'

# Prometheus: Debian's binary is dynamically linked against libc only; the rootfs has it, its
# loader, a passwd for nobody and the data directory nobody owns.
prom=$(command -v prometheus || true)
[ -n "$prom" ] || { echo "prometheus is missing: apt-get install prometheus" >&2; exit 1; }
rootfs="$out/prometheus-rootfs"
mkdir -p "$rootfs/bin" "$rootfs/etc/prometheus" "$rootfs/prometheus"
cp "$prom" "$rootfs/bin/prometheus"
for lib in $(ldd "$prom" | awk '/=>/ { print $3 } /^\t\/lib/ { print $1 }'); do
	mkdir -p "$rootfs$(dirname "$lib")"
	cp -L "$lib" "$rootfs$lib"
done
echo 'nobody:x:65534:65534:nobody:/prometheus:/bin/prometheus' >"$rootfs/etc/passwd"
echo 'nogroup:x:65534:' >"$rootfs/etc/group"
chown 65534:65534 "$rootfs/prometheus"
tar -C "$rootfs" -c . | docker import \
	-c 'USER 65534:65534' -c 'WORKDIR /prometheus' -c 'EXPOSE 9090' \
	-c 'ENTRYPOINT ["/bin/prometheus"]' \
	-c 'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]' \
	- airlock/prometheus:local >/dev/null
echo "built airlock/prometheus:local ($(dpkg-query -W -f '${Version}' prometheus 2>/dev/null || echo unknown))" >&2
rm -rf "$out"
