#!/bin/sh
# Stand-in for an agent: some requests the shipped policy allows, some it denies, and a
# direct connection that must fail because the network has no route out.
i=0
while :; do
  i=$((i + 1))
  wget -q -T 10 -O /dev/null http://deb.debian.org/debian/dists/stable/Release && echo "allowed: deb.debian.org ok"
  wget -q -T 10 -O /dev/null http://example.com/ || echo "denied as expected: example.com"
  wget -q -T 10 -O /dev/null "http://pypi.org/simple/requests/?token=not-logged" || echo "pypi via proxy failed"
  if [ $((i % 10)) -eq 1 ]; then
    # No proxy: there is no route, so this must fail.
    env -u http_proxy -u HTTP_PROXY wget -q -T 5 -O /dev/null http://1.1.1.1/ \
      && echo "LEAK: direct connection worked" || echo "direct connection blocked as expected"
  fi
  sleep "${AGENT_INTERVAL:-5}"
done
