#!/bin/sh
# Builds the two images of docker-compose.yml on a machine that cannot pull base images:
#   airlock:dev                 from a host-built static binary (deploy/Dockerfile.prebuilt;
#                               the root Dockerfile does the same build inside golang:1.26)
#   airlock-sample-sandbox:dev  from a busybox rootfs imported from the host's busybox-static
# Needs: go, docker, busybox-static (apt-get install busybox-static).
# Usage: sh deploy/build-images.sh   (from the repository root)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/deploy/out"
rm -rf "$out/ctx" "$out/rootfs"
mkdir -p "$out/ctx/state" "$out/rootfs/bin" "$out/rootfs/tmp" "$out/rootfs/etc"

# airlock image
version=$(git -C "$root" describe --always --dirty 2>/dev/null || echo dev)
[ -n "${AIRLOCK_BIN:-}" ] && cp "$AIRLOCK_BIN" "$out/ctx/airlock" || (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out/ctx/airlock" ./cmd/airlock)
cp /etc/ssl/certs/ca-certificates.crt "$out/ctx/"
echo 'airlock:x:65532:65532:airlock:/var/lib/airlock:/airlock' > "$out/ctx/passwd"
echo 'airlock:x:65532:' > "$out/ctx/group"
docker build -q -t airlock:dev -f "$root/deploy/Dockerfile.prebuilt" "$out/ctx"

# busybox base, then the sample sandbox on it
bb=$(command -v busybox)
file "$bb" 2>/dev/null | grep -q 'dynamically' && { echo "need a static busybox (busybox-static)"; exit 1; }
cp "$bb" "$out/rootfs/bin/busybox"
for app in $("$bb" --list); do [ "$app" = busybox ] || ln -sf busybox "$out/rootfs/bin/$app"; done
# A static glibc busybox still loads NSS modules (for getservbyname, getaddrinfo): add
# them with the matching libc so that wget does not crash.
for lib in /lib64/ld-linux-x86-64.so.2 /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libnss_files.so.2 \
           /lib/x86_64-linux-gnu/libnss_dns.so.2 /lib/x86_64-linux-gnu/libresolv.so.2; do
  mkdir -p "$out/rootfs$(dirname "$lib")"
  cp -L "$lib" "$out/rootfs$lib"
done
printf 'hosts: files dns\nservices: files\npasswd: files\ngroup: files\n' > "$out/rootfs/etc/nsswitch.conf"
[ -f /etc/services ] && cp /etc/services "$out/rootfs/etc/services"
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/tmp:/bin/sh\n' > "$out/rootfs/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\n' > "$out/rootfs/etc/group"
chmod 1777 "$out/rootfs/tmp"
tar -C "$out/rootfs" -c . | docker import - airlock/busybox-rootfs:local >/dev/null
docker build -q -t airlock-sample-sandbox:dev --build-arg BASE=airlock/busybox-rootfs:local "$root/deploy/sandbox"
echo "built airlock:dev and airlock-sample-sandbox:dev"
