"""Benchmark `gnnsys prepare synthetic` at OGB scale: wall time, peak RSS and disk.

Runs `python -m gnnsys prepare synthetic --like ogbn-arxiv --scale 1.0
--to-undirected`, `--like ogbn-products --scale 1.0`, `--like ogbn-proteins
--scale 1.0 --node-features-from-edges mean` (79M stored edges with 8 edge
features each), `--like ogbn-mag --scale 1.0` (heterogeneous: four node types,
four relations and their reverses, 21.1M generated edges) and `--like
ogbn-papers100M --scale S --dtype float16 --align 512` (S from --scale,
default 1.0; extra prepare options after --prepare-options) as child
processes, each repeated (--arxiv-repeats, default 3; --products-repeats,
--proteins-repeats, --mag-repeats and --papers-repeats, default 1 because
one run takes minutes), and records each
child's wall time, peak resident memory (from os.wait4's rusage of that
child) and the peak disk space it used beyond what the file system held
when it started (sampled every 0.5 s), next to the finished dataset's size.
The prepared datasets stay under --root (default /work/bench-data:
arxiv-1.0, products-1.0, proteins-1.0, mag-1.0, papers-S) for the training benchmarks. Writes
--results (default benchmarks/results/prepare_synthetic.json).

    python benchmarks/prepare_synthetic.py [--root DIR] [--only arxiv|products|proteins|mag|papers] [--scale S]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

import numba
import numpy as np
import psutil
import torch
from helpers import run_child

from gnnsys.atomic import atomic_write_bytes

RESULTS = Path(__file__).resolve().parent / "results" / "prepare_synthetic.json"
CASES = {
    "arxiv": {"like": "ogbn-arxiv", "dir": "arxiv-1.0", "options": ["--to-undirected"]},
    "products": {"like": "ogbn-products", "dir": "products-1.0", "options": []},
    "proteins": {
        "like": "ogbn-proteins",
        "dir": "proteins-1.0",
        "options": ["--node-features-from-edges", "mean"],
    },
    "mag": {"like": "ogbn-mag", "dir": "mag-1.0", "options": []},
    "papers": {
        "like": "ogbn-papers100M",
        "dir": "papers-{scale:g}",
        "options": ["--dtype", "float16", "--align", "512"],
    },
}


def machine() -> dict:
    """CPU, memory, load and versions of the machine running the benchmark."""
    from importlib.metadata import version

    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
        "gnnsys": version("gnnsys"),
        "note": "shared machine: other jobs ran at the same time, so times are noisy",
    }


def dataset_sizes(meta: dict) -> dict:
    """Node and edge counts and the (target's) feature width of a prepared
    dataset's meta.json; a heterogeneous one's also per node type and relation."""
    if meta.get("kind") != "hetero":
        return {"num_nodes": meta["num_nodes"], "num_edges": meta["num_edges"], "feature_dim": meta["features"]["dim"]}
    relations = {"__".join((r["src"], r["rel"], r["dst"])): r["num_edges"] for r in meta["relations"]}
    return {
        "num_nodes": sum(t["num_nodes"] for t in meta["node_types"].values()),
        "num_edges": sum(relations.values()),
        "feature_dim": meta["node_types"][meta["target"]]["features"]["dim"],
        "node_types": {name: t["num_nodes"] for name, t in meta["node_types"].items()},
        "relations": relations,
    }


def bench_case(name: str, root: Path, repeats: int, seed: int, scale: float = 1.0, extra=()) -> dict:
    """Prepare one case `repeats` times into root/<dir>; timings and what was written."""
    case = CASES[name]
    scale = scale if name == "papers" else 1.0
    out = root / case["dir"].format(scale=scale)
    argv = [
        sys.executable,
        "-m",
        "gnnsys",
        "prepare",
        "synthetic",
        "--like",
        case["like"],
        "--scale",
        str(scale),
        "--seed",
        str(seed),
        *case["options"],
        *extra,
        "--overwrite",
        "--no-progress",
        "--out",
        str(out),
    ]
    runs = []
    for i in range(repeats):
        if out.exists():  # a previous repeat's output: its space is not this run's scratch
            shutil.rmtree(out)
        runs.append(run_child(argv, root))
        print(f"{name} run {i + 1}/{repeats}: {runs[-1]}", flush=True)
    meta = json.loads((out / "meta.json").read_text())
    synth = meta["source"]["synthetic"]
    wall = statistics.median(r["wall_s"] for r in runs)
    size = sum(f.stat().st_size for f in out.iterdir())
    sizes = dataset_sizes(meta)
    return {
        "command": " ".join(argv[1:]),
        "path": str(out),
        "repeats": repeats,
        "runs": runs,
        "median_wall_s": wall,
        "max_peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "max_peak_rss_anon_mib": max(r["peak_rss_anon_mib"] for r in runs),
        "peak_disk_over_dataset": max(r["peak_disk_bytes"] for r in runs) / size,
        "graph_build": meta["source"].get("graph_build"),
        **sizes,
        "edges_per_s": round(sizes["num_edges"] / wall),
        "dataset_bytes": size,
        "num_classes": meta["labels"]["num_classes"],
        **{  # the class-labelled shapes' known ceilings (ogbn-proteins' generator records its own parameters)
            key: synth[key]
            for key in (
                "attainable_accuracy",
                "attainable_accuracy_at_least",
                "bayes_accuracy",
                "label_ceiling",
                "homophily",
            )
            if key in synth
        },
        **({"edge_features": meta["edge_features"]} if "edge_features" in meta else {}),
    }


def main(argv=None) -> int:
    """Run the cases and write the JSON result."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("/work/bench-data"), help="where the datasets are prepared")
    p.add_argument("--only", choices=list(CASES), action="append", help="run only this case (repeatable)")
    p.add_argument("--arxiv-repeats", type=int, default=3)
    p.add_argument("--products-repeats", type=int, default=1, help="1 by default: one run takes minutes")
    p.add_argument("--papers-repeats", type=int, default=1, help="1 by default: one run takes minutes")
    p.add_argument("--proteins-repeats", type=int, default=1, help="1 by default: one run takes minutes")
    p.add_argument("--mag-repeats", type=int, default=1, help="1 by default: one run takes minutes")
    p.add_argument("--scale", type=float, default=1.0, help="scale of the papers case")
    p.add_argument(
        "--prepare-options",
        nargs=argparse.REMAINDER,
        default=[],
        help="further `gnnsys prepare` options for every case (e.g. --mem-limit 8)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    repeats = {
        "arxiv": args.arxiv_repeats,
        "products": args.products_repeats,
        "proteins": args.proteins_repeats,
        "mag": args.mag_repeats,
        "papers": args.papers_repeats,
    }
    result = {
        "benchmark": "prepare_synthetic",
        "machine": machine(),
        "cases": {},
        "repeats_note": "median over repeats; products is prepared once by default because one run "
        "takes minutes on this machine",
    }
    for name in args.only or list(CASES):
        result["cases"][name] = bench_case(name, args.root, repeats[name], args.seed, args.scale, args.prepare_options)
        print(f"{name}: {result['cases'][name]['path']}", flush=True)
    atomic_write_bytes(args.results, (json.dumps(result, indent=2) + "\n").encode())
    print(f"results in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
