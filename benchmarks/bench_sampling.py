"""Sampling + feature gather of one epoch with gnnsys alone (no training).

Times `MinibatchLoader` over the train split of a prepared dataset: the
synchronous loop (`prefetch=0`: sample then gather in the caller's thread) and
the pipelined one (background sampling and gather threads), plus the sampler
alone. Reports the median of `--reps` epochs each (different epochs, so
different shuffles) and writes benchmarks/results/sampling_<dataset>.json.

    python benchmarks/bench_sampling.py /work/bench-data/arxiv-1.0 --reps 3
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
import numpy as np
import torch
from tqdm.auto import tqdm

import gnnsys
from gnnsys.loading.loader import MinibatchLoader
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared gnnsys dataset directory")
    p.add_argument("--reps", type=int, default=3, help="epochs timed per mode (>= 3 for a reported median)")
    p.add_argument("--fanouts", default="15,10,5", help="output layer first (PyG order)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--sampling-threads", type=int, default=1, help="the loader's sampling threads")
    p.add_argument("--out", default=str(HERE / "results"), help="results directory")
    args = p.parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.reps < 1:
        p.error("--reps must be >= 1")
    return args


def time_epoch(loader: MinibatchLoader, epoch: int, desc: str) -> dict:
    """Wall time of one pass and the summed per-batch stage times."""
    loader.set_epoch(epoch)
    stages = {"sample_s": 0.0, "gather_s": 0.0, "wait_s": 0.0}
    input_nodes = 0
    began = time.perf_counter()
    for mb in tqdm(loader, desc=desc, unit="batch", leave=False):
        for k in stages:
            stages[k] += mb.timings.get(k, 0.0)
        input_nodes += mb.input_nodes.numel()
    return {"time_s": time.perf_counter() - began, **stages, "input_nodes_per_batch": input_nodes / len(loader)}


def time_sampler(loader: MinibatchLoader, epoch: int, desc: str) -> dict:
    """Wall time of sampling every batch of an epoch, without gathering."""
    batches = loader.seeds.epoch(epoch)
    began = time.perf_counter()
    for i, seeds in enumerate(tqdm(batches, desc=desc, unit="batch", leave=False)):
        loader.sampler.sample(seeds, epoch, i)
    return {"time_s": time.perf_counter() - began}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": numba.threading_layer(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numpy": np.__version__,
    }


def main(argv=None):
    args = parse_args(argv)
    ds = gnnsys.load_dataset(args.dataset)
    sampling, batches = SamplingOptions(fanouts=args.fanouts), BatchOptions(batch_size=args.batch_size, seed=0)
    loaders = {
        "sync": MinibatchLoader(ds, "train", sampling, batches, PipelineOptions(prefetch=0)),
        "pipelined": MinibatchLoader(
            ds,
            "train",
            sampling,
            batches,
            PipelineOptions(prefetch=args.prefetch, sampling_threads=args.sampling_threads),
        ),
    }
    warm = loaders["sync"].seeds.epoch(0)[0]
    loaders["sync"].sampler.sample(warm)  # compile / load the kernels outside the timings
    ds.features.gather(warm)
    runs = {"sampler_only": [], "sync": [], "pipelined": []}
    for rep in range(args.reps):  # interleaved, so load on the machine falls on every mode alike
        runs["sampler_only"].append(time_sampler(loaders["sync"], rep, f"sampler rep {rep + 1}"))
        for mode, loader in loaders.items():
            runs[mode].append(time_epoch(loader, rep, f"{mode} rep {rep + 1}"))
    medians = {mode: statistics.median(r["time_s"] for r in rs) for mode, rs in runs.items()}
    result = {
        "benchmark": "sampling+gather epoch",
        "dataset": ds.meta.get("name", ds.name),
        "path": str(Path(args.dataset).resolve()),
        "num_nodes": ds.num_nodes,
        "num_edges": ds.num_edges,
        "train_seeds": int(ds.split("train").numel()),
        "batches": len(loaders["sync"]),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": machine(),
        "median_s": medians,
        "runs": runs,
    }
    out = Path(args.out) / f"sampling_{Path(args.dataset).resolve().name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for mode, s in medians.items():
        print(f"{mode:>13}: {s:6.2f} s per epoch (median of {args.reps})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
