#!/bin/sh
# Stand-in for an agent: some requests the shipped policy allows, some it denies, and a
# direct connection that must fail because the network has no route out. HTTP goes through
# the proxy in http_proxy with busybox's wget (the image carries the NSS modules its static
# glibc loads).

# req METHOD HOST PATH: prints the proxy's status line.
req() {
  data=""
  [ "$1" = POST ] && data="--post-data=x"
  timeout 20 wget -S -O /dev/null -U airlock-sample-agent $data "http://$2$3" 2>&1 |
    sed -n 's/^ *\(HTTP\/[0-9.]* [0-9][0-9][0-9].*\)$/\1/p' | head -n 1
}

i=0
while :; do
  i=$((i + 1))
  echo "GET http://deb.debian.org (Debian, allowed by the shipped policy): $(req GET deb.debian.org /debian/dists/stable/Release)"
  echo "GET http://pypi.org: $(req GET pypi.org '/simple/requests/?token=never-logged')"
  echo "GET http://example.com (not on any allowlist): $(req GET example.com /)"
  echo "POST http://paste.example (not on any allowlist): $(req POST paste.example /upload)"
  if [ $((i % 10)) -eq 1 ]; then
    if nc -w 3 1.1.1.1 80 </dev/null >/dev/null 2>&1; then
      echo "LEAK: a direct connection worked"
    else
      echo "direct connection blocked as expected"
    fi
  fi
  sleep "${AGENT_INTERVAL:-5}"
done
