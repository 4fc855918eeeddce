"""Benchmark `gnnsys prepare synthetic` at OGB scale: wall time and peak RSS.

Runs `python -m gnnsys prepare synthetic --like ogbn-arxiv --scale 1.0
--to-undirected` and `--like ogbn-products --scale 1.0` as child processes,
each repeated (--arxiv-repeats, default 3; --products-repeats, default 1
because one products run takes minutes), and records each child's wall time
and peak resident memory (from os.wait4's rusage of that child). The prepared
datasets stay under --root (default /work/bench-data: arxiv-1.0 and
products-1.0) for the training benchmarks. Writes
benchmarks/results/prepare_synthetic.json.

    python benchmarks/prepare_synthetic.py [--root DIR] [--only arxiv|products]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np
import psutil
import torch

from gnnsys.datasets.atomic import atomic_write_bytes

RESULTS = Path(__file__).resolve().parent / "results" / "prepare_synthetic.json"
CASES = {
    "arxiv": {"like": "ogbn-arxiv", "dir": "arxiv-1.0", "options": ["--to-undirected"]},
    "products": {"like": "ogbn-products", "dir": "products-1.0", "options": []},
}


def machine() -> dict:
    """CPU, memory, load and versions of the machine running the benchmark."""
    from importlib.metadata import version

    return {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1), "load_avg_at_start": os.getloadavg(),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "torch": torch.__version__, "gnnsys": version("gnnsys"),
            "note": "shared machine: other jobs ran at the same time, so times are noisy"}


def run_child(argv: list[str]) -> dict:
    """Run one child process; its wall time, peak RSS and exit status."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; keep Popen consistent
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with status {child.returncode}:\n{output}")
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2)}


def bench_case(name: str, root: Path, repeats: int, seed: int) -> dict:
    """Prepare one case `repeats` times into root/<dir>; timings and what was written."""
    case = CASES[name]
    out = root / case["dir"]
    argv = [sys.executable, "-m", "gnnsys", "prepare", "synthetic", "--like", case["like"], "--scale", "1.0",
            "--seed", str(seed), *case["options"], "--overwrite", "--no-progress", "--out", str(out)]
    runs = []
    for i in range(repeats):
        runs.append(run_child(argv))
        print(f"{name} run {i + 1}/{repeats}: {runs[-1]}", flush=True)
    meta = json.loads((out / "meta.json").read_text())
    synth = meta["source"]["synthetic"]
    wall = statistics.median(r["wall_s"] for r in runs)
    size = sum(f.stat().st_size for f in out.iterdir())
    return {"command": " ".join(argv[1:]), "path": str(out), "repeats": repeats,
            "runs": runs, "median_wall_s": wall,
            "max_peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "num_nodes": meta["num_nodes"], "num_edges": meta["num_edges"],
            "edges_per_s": round(meta["num_edges"] / wall), "dataset_bytes": size,
            "feature_dim": meta["features"]["dim"], "num_classes": meta["labels"]["num_classes"],
            "attainable_accuracy": synth["attainable_accuracy"], "bayes_accuracy": synth["bayes_accuracy"],
            "label_ceiling": synth["label_ceiling"], "homophily": synth["homophily"]}


def main(argv=None) -> int:
    """Run the cases and write the JSON result."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("/work/bench-data"), help="where the datasets are prepared")
    p.add_argument("--only", choices=list(CASES), action="append", help="run only this case (repeatable)")
    p.add_argument("--arxiv-repeats", type=int, default=3)
    p.add_argument("--products-repeats", type=int, default=1, help="1 by default: one run takes minutes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    repeats = {"arxiv": args.arxiv_repeats, "products": args.products_repeats}
    result = {"benchmark": "prepare_synthetic", "machine": machine(), "cases": {},
              "repeats_note": "median over repeats; products is prepared once by default because one run "
                              "takes minutes on this machine"}
    for name in args.only or list(CASES):
        result["cases"][name] = bench_case(name, args.root, repeats[name], args.seed)
        print(f"{name}: {result['cases'][name]['path']}", flush=True)
    atomic_write_bytes(args.results, (json.dumps(result, indent=2) + "\n").encode())
    print(f"results in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
