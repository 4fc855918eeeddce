"""The thread split of benchmarks/gpu_threads.sh, one row per run.

    python benchmarks/threads_summary.py DIR

Reads DIR/cores-N/roofline_*.json (bench_roofline.py, run on N cores) and
writes DIR/threads_summary.json: for every run, the cores it had, torch's
intra-op threads, numba's threads, the loader's prefetch and the threads
alive during its epoch (the loader's gnnsys-sample-* and gnnsys-gather, none
with prefetch 0), its epoch and compute seconds, its compute over the floor
and its load average; and per core count the fastest epoch's split. Prints
one line per run. A core count without a readable record (skipped, cut
short) is left out; no record at all is exit status 1.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def rows(folder: Path) -> list[dict]:
    """One row per run of every readable cores-N/roofline_*.json under `folder`, by cores."""
    out = []
    for path in folder.glob("cores-*/roofline_*.json"):
        match = re.fullmatch(r"cores-(\d+)", path.parent.name)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for run in record.get("runs", []) if match and isinstance(record, dict) else []:
            roofline = run.get("roofline") or {}
            out.append(
                {
                    "cores": int(match.group(1)),
                    "torch_threads": run["torch_threads"],
                    "numba_threads": run["numba_threads"],
                    "prefetch": run["prefetch"],
                    "loader_threads": [t for t in run["threads_alive"] if t.startswith("gnnsys-")],
                    "precision": run["precision"],
                    "epoch_s": run["time_s"],
                    "compute_s": run["compute_s"],
                    "compute_over_floor": roofline.get("compute_over_floor"),
                    "loadavg": run["loadavg_before"],
                }
            )
    return sorted(out, key=lambda r: (r["cores"], -r["prefetch"], -r["torch_threads"]))


def describe(r: dict) -> str:
    """One line of row `r`."""
    floor = f" ({r['compute_over_floor']:.2f}x its floor)" if r["compute_over_floor"] else ""
    loader = ", ".join(r["loader_threads"]) or "none"
    return (
        f"{r['cores']:2d} cores: torch {r['torch_threads']:2d}, numba {r['numba_threads']:2d}, prefetch "
        f"{r['prefetch']} (loader threads: {loader}): epoch {r['epoch_s']:.2f} s, compute {r['compute_s']:.2f} s"
        + floor
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"threads_summary: needs one results folder, got {' '.join(argv) or 'none'}", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    table = rows(folder)
    if not table:
        print(f"threads_summary: no cores-N/roofline_*.json with runs under {folder}", file=sys.stderr)
        return 1
    for r in table:
        print(describe(r))
    fastest = {}
    for r in table:
        if r["cores"] not in fastest or r["epoch_s"] < fastest[r["cores"]]["epoch_s"]:
            fastest[r["cores"]] = r
    for cores, r in fastest.items():
        print(f"{cores:2d} cores: fastest epoch with torch {r['torch_threads']} and prefetch {r['prefetch']}")
    out = folder / "threads_summary.json"
    out.with_suffix(".tmp").write_text(json.dumps({"runs": table, "fastest": list(fastest.values())}, indent=2))
    out.with_suffix(".tmp").replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
