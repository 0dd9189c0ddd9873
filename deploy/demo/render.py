"""Draws the airlock Grafana dashboard's panels from scraped /metrics samples.

usage: render.py SAMPLES.json DASHBOARD.json OUT.png
The queries are those of the dashboard JSON, evaluated here over consecutive scrapes
(rates over each 5 s step, quantiles interpolated in buckets as Prometheus does).
"""
import json, re, sys
from collections import defaultdict
from datetime import datetime
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

samples = json.load(open(sys.argv[1]))
titles = [p["title"] for p in json.load(open(sys.argv[2]))["panels"]]
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

def parse(text):
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(3) or "")), float(m.group(4))))
    return out

series = [(s["t"], parse(s["text"])) for s in samples]
t0 = series[0][0]
times = [datetime.fromtimestamp(t) for t, _ in series[1:]]

def summed(points, name, by, **match):
    acc = defaultdict(float)
    for n, labels, v in points:
        if n == name and all(labels.get(k) == want or (callable(want) and want(labels.get(k))) for k, want in match.items()):
            acc[tuple(labels.get(b, "") for b in by)] += v
    return acc

def rates(name, by, **match):
    out = defaultdict(list)
    keys = set()
    for _, pts in series:
        keys |= set(summed(pts, name, by, **match))
    for (ta, pa), (tb, pb) in zip(series, series[1:]):
        a, b = summed(pa, name, by, **match), summed(pb, name, by, **match)
        for k in keys:
            out[k].append(max(b.get(k, 0) - a.get(k, 0), 0) / (tb - ta))
    return out

def quantile(q, name, **match):
    vals = []
    for (ta, pa), (tb, pb) in zip(series, series[1:]):
        a, b = summed(pa, name, ("le",), **match), summed(pb, name, ("le",), **match)
        buckets = sorted(((float(k[0]), b.get(k, 0) - a.get(k, 0)) for k in b), key=lambda x: x[0])
        total = buckets[-1][1] if buckets else 0
        if total <= 0:
            vals.append(float("nan"))
            continue
        rank, prev_le, prev_c = q * total, 0.0, 0.0
        for le, c in buckets:
            if c >= rank:
                if le == float("inf"):
                    vals.append(prev_le)
                else:
                    vals.append(prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12))
                break
            prev_le, prev_c = le, c
    return vals

def gauge(name):
    return [sum(v for n, _, v in pts if n == name) for _, pts in series[1:]]

plt.style.use("dark_background")
fig, axes = plt.subplots(3, 3, figsize=(18, 11))
fig.suptitle("airlock — dashboard panels from %d scrapes of /metrics (%.0f s of demo load)" % (len(series), series[-1][0] - t0), fontsize=14)
ax = axes[0][0]
dec = rates("airlock_requests_total", ("decision",))
keys = sorted(dec)
ax.stackplot(times, [dec[k] for k in keys], labels=[k[0] for k in keys], alpha=0.8)
ax.set_title(titles[0]); ax.set_ylabel("req/s"); ax.legend(loc="upper left", fontsize=8)

ax = axes[0][1]
first, last = summed(series[0][1], "airlock_requests_denied_total", ("server_address",)), summed(series[-1][1], "airlock_requests_denied_total", ("server_address",))
top = sorted(((last[k] - first.get(k, 0), k[0]) for k in last), reverse=True)[:10]
ax.barh([h for _, h in reversed(top)], [v for v, _ in reversed(top)], color="#e05050")
ax.set_title(titles[1]); ax.set_xlabel("denied requests in range")

ax = axes[0][2]
for q in (0.5, 0.95, 0.99):
    ax.plot(times, [v * 1000 for v in quantile(q, "airlock_request_duration_seconds_bucket")], label=f"p{int(q*100)}")
ax.set_title(titles[2]); ax.set_ylabel("ms"); ax.legend(fontsize=8)

ax = axes[1][0]
for q in (0.5, 0.99):
    ax.plot(times, [v * 1e6 for v in quantile(q, "airlock_policy_eval_duration_seconds_bucket")], label=f"p{int(q*100)}")
ax.set_title(titles[3]); ax.set_ylabel("µs"); ax.legend(fontsize=8)

ax = axes[1][1]
ax.step(times, gauge("airlock_approvals_pending"), where="post", color="orange")
ax.set_title(titles[4] + " (over time)"); ax.set_ylabel("requests held")

ax = axes[1][2]
for q in (0.5, 0.95):
    ax.plot(times, quantile(q, "airlock_approval_wait_duration_seconds_bucket"), marker=".", label=f"p{int(q*100)} wait")
ax.set_title(titles[5]); ax.set_ylabel("s"); ax.legend(fontsize=8)

ax = axes[2][0]
verr = rates("airlock_vault_fetches_total", ("credential",), result="error")
for k, v in sorted(verr.items()):
    ax.plot(times, v, label=k[0], color="#e05050")
if verr:
    ax.legend(fontsize=8)
else:
    ax.text(0.5, 0.5, "no credential fetch errors in this run\n(the demo has no Vault)", ha="center", va="center", transform=ax.transAxes)
ax.set_title(titles[6]); ax.set_ylabel("errors/s")

ax = axes[2][1]
ax.plot(times, gauge("airlock_connections_active"), label="connections")
ax.plot(times, gauge("airlock_sandboxes_active"), label="sandboxes")
ax.set_title(titles[8]); ax.legend(fontsize=8)

ax = axes[2][2]
rule = rates("airlock_requests_total", ("rule",), decision=lambda d: d in ("deny", "would_deny"))
for k, v in sorted(rule.items()):
    ax.plot(times, v, label=k[0] or "(none)")
ax.set_title(titles[9]); ax.set_ylabel("req/s"); ax.legend(fontsize=8)

for row in axes:
    for a in row:
        a.tick_params(axis="x", labelsize=7)
        for lbl in a.get_xticklabels():
            lbl.set_rotation(20)
fig.tight_layout()
fig.savefig(sys.argv[3], dpi=80)
print("wrote", sys.argv[3])
