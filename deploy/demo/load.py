"""Sends a mix of requests through a running airlock and samples its /metrics.

usage: load.py PROXY_URL METRICS_URL UPSTREAM_PORT SECONDS OUT.json
"""
import json, random, sys, threading, time, urllib.request

proxy, metrics_url, port, seconds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
stop = time.time() + seconds

def one(method, url):
    try:
        opener.open(urllib.request.Request(url, method=method, data=b"x" if method in ("PUT", "POST") else None), timeout=30).read()
    except Exception:
        pass

denied_hosts = ["exfil.example", "paste.example", "pastebin.com", "evil.example", "tracker.example", "ngrok.io"]
weights = [5, 3, 2, 1.5, 1, 0.5]

def worker(seed):
    rnd = random.Random(seed)
    while time.time() < stop:
        phase = (time.time() % 120) / 120  # load rises and falls every two minutes
        r = rnd.random()
        if r < 0.62:
            one("GET", f"http://127.0.0.1:{port}/")
        elif r < 0.80:
            host = rnd.choices(denied_hosts, weights)[0]
            one("GET", f"http://{host}/upload?key=not-logged")
        elif r < 0.90:
            one("GET", f"http://127.0.0.1:{port}/cred/item")
        elif r < 0.93:
            threading.Thread(target=one, args=("PUT", f"http://127.0.0.1:{port}/doc"), daemon=True).start()
        else:
            one("POST", f"http://127.0.0.1:{port}/admin")
        time.sleep(0.02 + 0.2 * (1 - abs(2 * phase - 1)) * rnd.random())

threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
for t in threads:
    t.start()
samples = []
while time.time() < stop + 20:
    try:
        text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
        samples.append({"t": time.time(), "text": text})
    except Exception as e:
        print("scrape failed:", e, file=sys.stderr)
    time.sleep(5)
json.dump(samples, open(out, "w"))
print(f"{len(samples)} samples")
