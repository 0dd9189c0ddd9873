#!/bin/sh
# Runs airlock with the demo policy against a local upstream, drives load through it for a
# few minutes, scrapes /metrics every 5 s, and renders the dashboard's panels from those
# samples into dashboard.png (Grafana cannot run here; render.py draws the same queries).
# Needs python3 and python3-matplotlib. Usage: sh deploy/demo/run.sh [SECONDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-240}
work=$(mktemp -d)
bin=${AIRLOCK_BIN:-$work/airlock}
[ -x "$bin" ] || (cd "$root" && go build -o "$bin" ./cmd/airlock)
python3 -m http.server 18081 --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
up=$!
AIRLOCK_HOME=$work/home AIRLOCK_DEMO_TOKEN=demo-token-not-secret "$bin" proxy --config "$here/airlock.yaml" --policy "$here/policy" \
  --audit-log "$work/audit.jsonl" 2>"$work/airlock.log" &
ap=$!
trap 'kill $up $ap 2>/dev/null || true' EXIT
for _ in $(seq 50); do ${py:-python3} -c "import urllib.request;urllib.request.urlopen('http://127.0.0.1:19090/healthz')" 2>/dev/null && break; sleep 0.2; done
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py "$here/load.py" http://127.0.0.1:13128 http://127.0.0.1:19090/metrics 18081 "$secs" "$work/samples.json"
$py "$here/render.py" "$work/samples.json" "$root/deploy/grafana/dashboards/airlock.json" "$here/dashboard.png"
"$bin" audit verify "$work/audit.jsonl" | tail -3
echo "work dir: $work"
