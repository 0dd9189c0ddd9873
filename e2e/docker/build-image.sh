#!/bin/sh
# Builds the sandbox image the Docker backend's e2e tests run, on a machine that cannot pull:
# a rootfs with Debian's static busybox and the host's curl (with the shared libraries ldd
# names), imported with `docker import`. Idempotent: an existing image is kept unless
# REBUILD=1. Needs: docker, busybox-static, curl (apt-get install busybox-static curl).
# Usage: sh e2e/docker/build-image.sh [TAG]   (default airlock-sandbox-test:latest)
set -eu
tag=${1:-airlock-sandbox-test:latest}
if [ "${REBUILD:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
	echo "$tag exists"
	exit 0
fi
bb=$(command -v busybox || true)
[ -n "$bb" ] || { echo "need busybox (apt-get install busybox-static)" >&2; exit 1; }
if ! "$bb" --list | grep -qx wget || ldd "$bb" >/dev/null 2>&1; then
	echo "need a static busybox (apt-get install busybox-static)" >&2
	exit 1
fi
curl=$(command -v curl || true)
[ -n "$curl" ] || { echo "need curl (apt-get install curl)" >&2; exit 1; }

root=$(mktemp -d /tmp/airlock-sandbox-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/usr/bin" "$root/etc" "$root/tmp" "$root/home/sandbox" \
	"$root/workspace" "$root/run/airlock" "$root/proc" "$root/dev" "$root/sys"
cp "$bb" "$root/bin/busybox"
for app in $("$bb" --list); do
	[ "$app" = busybox ] || ln -sf busybox "$root/bin/$app"
done
cp "$curl" "$root/usr/bin/curl"
# curl's shared libraries and the dynamic loader, at the paths ldd reports.
ldd "$curl" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"
chown 1000:1000 "$root/home/sandbox"
tar -C "$root" -c . | docker import \
	-c 'USER 1000:1000' -c 'WORKDIR /home/sandbox' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	-c 'LABEL org.airlock.test=sandbox' - "$tag" >/dev/null
echo "built $tag"
