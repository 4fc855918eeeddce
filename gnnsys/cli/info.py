"""`gnnsys info DIR [--verify] [--json]`."""
from __future__ import annotations

import json
import sys


def add_parser(sub):
    p = sub.add_parser("info", help="print the summary of a prepared dataset")
    p.add_argument("path", help="prepared dataset directory")
    p.add_argument("--verify", action="store_true", help="re-check every checksum and invariant; exit 1 on failure")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--device", default="cpu", help="the training device placement 'auto' is chosen for")
    p.add_argument("--host-mem-budget", type=float, metavar="GB",
                   help="say whether the features fit this much host memory, and the cache an SSD stack can keep")
    return p


def run(args) -> int:
    from gnnsys.datasets.features_file import DTYPES
    from gnnsys.datasets.inspect import format_summary, summarize, verify
    from gnnsys.feature_stack import format_advice, placement_advice

    summary = summarize(args.path)
    f = summary["features"]
    row_bytes = f["dim"] * DTYPES[f["dtype"]].itemsize
    summary["placement"] = placement_advice(summary["num_nodes"], f["row_stride"], row_bytes, args.device,
                                            args.host_mem_budget)
    text = "\n".join([format_summary(summary), *format_advice(summary["placement"])])
    print(json.dumps(summary, indent=2) if args.json else text)
    if args.verify:
        problems = verify(args.path)
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        print("verify: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        return 1 if problems else 0
    return 0
