"""Reads request targets the way a Python server would, for FuzzTargetDifferential.

One JSON string (a request target as sent upstream) per line on stdin; one JSON object per
line on stdout: the path, the path decoded, the query, the fragment, and the query's pairs as
urllib.parse reads them (parse_qsl with keep_blank_values and strict_parsing, decoding UTF-8
strictly), or {"error": ...} when Python cannot read it.
"""
import json
import sys
from urllib.parse import parse_qsl, unquote, urlsplit


def read(target):
    parts = urlsplit(target)
    pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True, errors="strict")
    return {
        "path": parts.path,
        "decoded_path": unquote(parts.path, errors="strict"),
        "query": parts.query,
        "fragment": parts.fragment,
        "pairs": [[k, v] for k, v in pairs],
    }


for line in sys.stdin:
    try:
        out = read(json.loads(line))
    except Exception as e:  # reported to the fuzz target, which fails on it
        out = {"error": repr(e)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
