"""Reads request bodies the way a Python JSON-RPC or GraphQL server would (json.loads), for
the proxy's differential fuzz target: one JSON line in (the body, base64), one JSON line out
with what the body says, or the error."""
import base64
import json
import sys

for line in sys.stdin:
    body = base64.b64decode(json.loads(line))
    out = {}
    try:
        doc = json.loads(body)
        msgs = doc if isinstance(doc, list) else [doc]
        calls = []
        for m in msgs:
            c = {}
            if isinstance(m, dict):
                if isinstance(m.get("method"), str):
                    c["method"] = m["method"]
                p = m.get("params")
                if isinstance(p, dict) and isinstance(p.get("name"), str):
                    c["tool"] = p["name"]
                if isinstance(p, dict) and isinstance(p.get("arguments"), dict):
                    c["argument_keys"] = sorted(p["arguments"].keys())
                if isinstance(m.get("query"), str):
                    c["query"] = m["query"]
                if isinstance(m.get("operationName"), str):
                    c["operation_name"] = m["operationName"]
            calls.append(c)
        out["calls"] = calls
    except Exception as e:  # noqa: BLE001 - any failure is an answer
        out = {"error": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
