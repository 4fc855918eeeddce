"""Distinct input rows per batch: LABOR-0 against uniform neighbour sampling.

Samples the first `--batches` batches of epoch 0 of the shuffled train split
of a prepared dataset with both CPU samplers, at the same fanouts, seed and
draw streams, and reports per sampler the median over batches of the
distinct input rows (the first layer's source count: the feature rows a batch
gathers), of each layer's sources and edges, and of the sampling time, plus
the LABOR / uniform ratio of the medians. Writes JSON (--out) and prints a
one-line table.

    python benchmarks/bench_labor.py /work/bench/products-0.05 --out benchmarks/results/labor_rows_products-0.05.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numba
import torch

import gnnsys
from gnnsys.samplers import SAMPLINGS, SeedBatches, make_sampler


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared gnnsys dataset directory")
    p.add_argument("--batches", type=int, default=50, help="batches sampled per sampler")
    p.add_argument("--fanouts", default="15,10,5", help="output layer first (PyG order)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="JSON file to write (default: print only)")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.batches < 1:
        p.error("--batches must be >= 1")
    return args


def measure(sampler, batches) -> dict:
    """Per batch: input rows, each layer's sources and edges (input layer first), seconds."""
    runs = {"input_rows": [], "layer_sources": [], "layer_edges": [], "sample_s": []}
    for i, seeds in enumerate(batches):
        began = time.perf_counter()
        mb = sampler.sample(seeds, 0, i)
        runs["sample_s"].append(time.perf_counter() - began)
        runs["input_rows"].append(int(mb.input_nodes.numel()))
        runs["layer_sources"].append([b.num_src for b in mb.blocks])
        runs["layer_edges"].append([b.num_edges for b in mb.blocks])
    return runs


def medians(runs: dict) -> dict:
    per_layer = lambda rows: [statistics.median(col) for col in zip(*rows)]  # noqa: E731
    return {
        "input_rows": statistics.median(runs["input_rows"]),
        "layer_sources": per_layer(runs["layer_sources"]),
        "layer_edges": per_layer(runs["layer_edges"]),
        "sample_s": statistics.median(runs["sample_s"]),
    }


def main(argv=None):
    args = parse_args(argv)
    ds = gnnsys.load_dataset(args.dataset)
    batches = SeedBatches(ds.split("train"), args.batch_size, shuffle=True, seed=args.seed).epoch(0)[: args.batches]
    samplers = {
        s: make_sampler("cpu", ds.indptr, ds.indices, args.fanouts, seed=args.seed, sampling=s) for s in SAMPLINGS
    }
    for sampler in samplers.values():
        sampler.sample(batches[0], 1, 0)  # compile / load the kernels outside the timings
    load_before = os.getloadavg()
    runs = {name: measure(sampler, batches) for name, sampler in samplers.items()}
    result = {
        "benchmark": "distinct input rows per batch, labor vs uniform",
        "dataset": ds.meta.get("name", ds.name),
        "path": str(Path(args.dataset).resolve()),
        "num_nodes": ds.num_nodes,
        "num_edges": ds.num_edges,
        "batches": len(batches),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "numba_threads": numba.get_num_threads(),
            "torch": torch.__version__,
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "median": {name: medians(r) for name, r in runs.items()},
        "runs": runs,
    }
    m = result["median"]
    result["ratio_labor_to_uniform"] = m["labor"]["input_rows"] / m["uniform"]["input_rows"]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{Path(args.dataset).name}: median input rows per batch over {len(batches)} batches "
        f"(fanouts {args.fanouts}, batch {args.batch_size}): uniform {m['uniform']['input_rows']:,.0f}  "
        f"labor {m['labor']['input_rows']:,.0f}  ratio {result['ratio_labor_to_uniform']:.3f}  "
        f"(load {result['machine']['loadavg_after'][0]:.2f})"
    )


if __name__ == "__main__":
    main()
