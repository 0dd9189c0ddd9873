#!/usr/bin/env bash
# bench/startup.sh: the wall time of one-shot `airlock sandbox run -- true`, side by side in
# one run with bubblewrap (the floor: namespaces and mounts, no proxy), in each native form:
#   bwrap          bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp true
#   root           airlock sandbox run -- true (as root, the host's root read-only)
#   root-image     the same on a cached image root (--image, a docker save tarball of busybox)
#   rootless       airlock sandbox run -- true as the ordinary user airlock-test (made if missing)
#   rootless-image the same rootless on the cached image root
# The forms run in turn (one of each per round, N rounds) so that load on the machine falls
# on all of them alike; the table gives p50, p10 and p90 in ms and each p50 against bwrap and
# against its root-mode counterpart. Needs root, bwrap, busybox-static, and Go.
#
#	bash bench/startup.sh [N]      (default 31 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-31}
[ "$(id -u)" = 0 ] || { echo "startup.sh: run as root (root mode and the rootless user)" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "startup.sh: bwrap missing (apt-get install bubblewrap)" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "startup.sh: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }
id airlock-test >/dev/null 2>&1 || useradd --create-home --shell /bin/sh airlock-test

work=$(mktemp -d /var/tmp/airlock-startup.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
bin=$work/airlock
go build -o "$bin" ./cmd/airlock

# A one-layer docker save tarball of busybox: the image root.
img=$work/img
mkdir -p "$img/root/bin" "$img/root/etc" "$img/root/tmp"
cp /bin/busybox "$img/root/bin/busybox"
for a in sh true; do ln -s busybox "$img/root/bin/$a"; done
tar -C "$img/root" -cf "$img/layer.tar" .
digest=$(sha256sum "$img/layer.tar" | cut -d' ' -f1)
mkdir -p "$img/save"
mv "$img/layer.tar" "$img/save/$digest.tar"
cat >"$img/save/config.json" <<EOF
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:$digest"]}}
EOF
cfg=$(sha256sum "$img/save/config.json" | cut -d' ' -f1)
mv "$img/save/config.json" "$img/save/$cfg.json"
echo "[{\"Config\":\"$cfg.json\",\"RepoTags\":[\"startup:bench\"],\"Layers\":[\"$digest.tar\"]}]" >"$img/save/manifest.json"
tar -C "$img/save" -cf "$work/busybox.tar" .
chmod 644 "$work/busybox.tar"

roothome=$work/home-root
userhome=$work/home-user
mkdir -p "$roothome" "$userhome"
chown airlock-test "$userhome"
# The proxy listens on ports of its own per run; transparent egress is a cost of its own
# (docs/transparent.md), measured apart, so every airlock form runs as shipped.
run_bwrap() { bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp true; }
run_root() { AIRLOCK_HOME=$roothome "$bin" sandbox run -- true; }
run_root_image() { AIRLOCK_HOME=$roothome "$bin" sandbox run --image "$work/busybox.tar" -- true; }
run_rootless() { su -s /bin/sh airlock-test -c "cd /; AIRLOCK_HOME=$userhome XDG_RUNTIME_DIR= $bin sandbox run -- true"; }
run_rootless_image() { su -s /bin/sh airlock-test -c "cd /; AIRLOCK_HOME=$userhome XDG_RUNTIME_DIR= $bin sandbox run --image $work/busybox.tar -- true"; }
# su itself, measured so that the rootless figures can be read without it.
run_su() { su -s /bin/sh airlock-test -c true; }

forms=(bwrap root root_image rootless rootless_image su)
for f in "${forms[@]}"; do "run_$f" >/dev/null 2>&1 || { echo "startup.sh: $f fails:" >&2; "run_$f"; exit 1; }; done # warm: image unpacked, caches

declare -A times
for ((i = 0; i < n; i++)); do
	for f in "${forms[@]}"; do
		s=$(date +%s%N)
		"run_$f" >/dev/null 2>&1
		e=$(date +%s%N)
		times[$f]+="$(((e - s) / 1000)) "
	done
done

pct() { # pct P values...: the P-th percentile (nearest rank) in ms
	local p=$1
	shift
	printf '%s\n' "$@" | sort -n | awk -v p="$p" '{v[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; printf "%.1f", v[i]/1000}'
}
declare -A p50
for f in "${forms[@]}"; do p50[$f]=$(pct 50 ${times[$f]}); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f×", a/b}'; }
echo
echo "startup, $n rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| form | p50 ms | p10 ms | p90 ms | p50 vs bwrap | p50 vs root mode |"
echo "|---|---|---|---|---|---|"
for f in "${forms[@]}"; do
	v=${p50[$f]}
	base=-
	case $f in
	root_image) base=$(ratio "$v" "${p50[root]}") ;;
	rootless) base=$(ratio "$v" "${p50[root]}") ;;
	rootless_image) base=$(ratio "$v" "${p50[root_image]}") ;;
	esac
	vsb=$(ratio "$v" "${p50[bwrap]}")
	[ "$f" = bwrap ] && vsb=1.00×
	echo "| $f | $v | $(pct 10 ${times[$f]}) | $(pct 90 ${times[$f]}) | $vsb | $base |"
done
echo
echo "(the rootless rows include su's own start, the su row: how the script becomes the user, not airlock's)"
