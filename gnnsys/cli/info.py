"""`gnnsys info DIR [--verify] [--json]`."""
from __future__ import annotations

import json
import sys


def add_parser(sub):
    p = sub.add_parser("info", help="print the summary of a prepared dataset")
    p.add_argument("path", help="prepared dataset directory")
    p.add_argument("--verify", action="store_true", help="re-check every checksum and invariant; exit 1 on failure")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def run(args) -> int:
    from gnnsys.datasets.inspect import format_summary, summarize, verify

    summary = summarize(args.path)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    if args.verify:
        problems = verify(args.path)
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        print("verify: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        return 1 if problems else 0
    return 0
