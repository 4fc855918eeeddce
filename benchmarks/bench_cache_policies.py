"""Cache hit rate against cache size, by policy.

A batch-granular trace simulation: the input nodes of gnnsys's own
NeighborSampler batches (shuffled train seeds) are recorded for `--epochs`
epochs, then each policy of gnnsys.storage.cache is run over the trace with
the same `CachePolicy.access` that CachedFeatures uses (no feature data is
moved). A batch's hit rate counts its distinct input nodes found cached at
the start of the batch. Policies: static-degree and presample (static by
out-degree / by hotness from `--presample-epochs` pre-sampled epochs that
training does not use, GNNLab), lru, sieve, s3fifo (warmed by presample
hotness), hybrid (presample hotness + reuse + a window of `--lookahead`
batches, built as gnnsys.loading.loader.MinibatchLoader builds it: the input ids of
the next batches of the same epoch, never crossing into the next one) and
the belady bound. Reports the first epoch and the steady state
(the later epochs); the simulation is deterministic, so one run each.

    python benchmarks/bench_cache_policies.py papers=/tmp/papers products=/tmp/products
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
from helpers import record_trace
from plotting import can_plot, save_figure

import gnnsys
from gnnsys.atomic import atomic_write_bytes
from gnnsys.samplers import NeighborSampler, SeedBatches
from gnnsys.storage.cache import make_policy, out_degree, presample_hotness

HERE = Path(__file__).resolve().parent
POLICIES = ["static-degree", "presample", "lru", "sieve", "s3fifo", "hybrid", "belady"]
SINGLE = ["static-degree", "presample", "lru", "sieve", "s3fifo"]
TARGET_SIZES = (0.05, 0.10, 0.20)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("graphs", nargs="+", help="NAME=DIR of prepared gnnsys datasets")
    p.add_argument("--sizes", default="0.01,0.02,0.05,0.1,0.2,0.5", help="cache sizes, fractions of the nodes")
    p.add_argument("--lookahead", type=int, default=8, help="hybrid's window, in batches")
    p.add_argument("--epochs", type=int, default=3, help="epochs traced (the first is the cold one)")
    p.add_argument("--presample-epochs", type=int, default=2)
    p.add_argument("--fanouts", default="15,10,5", help="output layer first (PyG order)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--out", default=str(HERE / "results" / "cache_policies"), help="path stem of .json/.png")
    args = p.parse_args(argv)
    args.graphs = [g.split("=", 1) if "=" in g else (Path(g).name, g) for g in args.graphs]
    args.sizes = [float(s) for s in args.sizes.split(",")]
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    if args.epochs < 2 or args.lookahead < 0:
        p.error("--epochs must be >= 2 and --lookahead >= 0")
    return args


def simulate(policy, trace, lookahead: int, per_epoch: int) -> np.ndarray:
    """Hits per batch of `policy` over `trace` (epochs of `per_epoch` batches),
    each batch's window the next `lookahead` batches of its own epoch, as
    MinibatchLoader._windowed gives them (it windows one epoch's batches)."""
    policy.warm()
    hits = np.zeros(len(trace), np.int64)
    for t, ids in enumerate(trace):
        epoch_end = (t // per_epoch + 1) * per_epoch
        policy.set_window(trace[t + 1 : min(t + 1 + lookahead, epoch_end)])
        hits[t] = policy.access(ids)[0].sum()
    return hits


def run_graph(name: str, path: str, args) -> dict:
    """Hit rates of every policy at every size on one prepared graph."""
    ds = gnnsys.load_dataset(path)
    sampler = NeighborSampler(ds.indptr, ds.indices, args.fanouts, seed=0)
    seeds = SeedBatches(ds.split("train"), args.batch_size, shuffle=True, seed=0)
    began = time.perf_counter()
    trace = record_trace(sampler, seeds, range(args.epochs))
    hot = presample_hotness(sampler, seeds, range(1000, 1000 + args.presample_epochs))
    sample_s = time.perf_counter() - began
    scores = {"static-degree": out_degree(ds.indices.numpy(), ds.num_nodes), "presample": hot}
    per_epoch = len(seeds)
    distinct = np.array([t.shape[0] for t in trace])
    first, steady = slice(0, per_epoch), slice(per_epoch, len(trace))
    result = {
        "nodes": ds.num_nodes,
        "edges": ds.num_edges,
        "train": int(ds.split("train").numel()),
        "batches_per_epoch": per_epoch,
        "distinct_inputs_per_batch": float(distinct.mean()),
        "trace_s": round(sample_s, 1),
        "sizes": {},
    }
    for frac in args.sizes:
        cap = int(round(frac * ds.num_nodes))
        rates = {}
        for pol in POLICIES:
            if pol in scores:
                policy = make_policy("static", cap, ds.num_nodes, score=scores[pol])
            elif pol == "belady":
                policy = make_policy("belady", cap, ds.num_nodes, trace=trace)
            else:
                policy = make_policy(pol, cap, ds.num_nodes, score=hot)
            t0 = time.perf_counter()
            hits = simulate(policy, trace, args.lookahead, per_epoch)
            rates[pol] = {
                "first_epoch": hits[first].sum() / distinct[first].sum(),
                "steady": hits[steady].sum() / distinct[steady].sum(),
                "sim_s": round(time.perf_counter() - t0, 2),
            }
            print(
                f"{name} {frac:>5.0%} {pol:<14} first {rates[pol]['first_epoch']:.3f} "
                f"steady {rates[pol]['steady']:.3f}",
                flush=True,
            )
        result["sizes"][str(frac)] = {"capacity": cap, "rates": rates, "targets": targets(rates, frac)}
    return result


def targets(rates: dict, frac: float) -> dict:
    """Issue 12's targets at one size, per phase: hybrid >= the best single
    policy, and (at 5/10/20%) hybrid closing half the gap to belady."""
    out = {}
    for phase in ("first_epoch", "steady"):
        best_name = max(SINGLE, key=lambda p: rates[p][phase])
        best, hyb, bound = rates[best_name][phase], rates["hybrid"][phase], rates["belady"][phase]
        gap = bound - best
        row = {
            "best_single": best_name,
            "not_below_best": bool(hyb >= best),
            "gap_closed": (hyb - best) / gap if gap > 0 else None,
        }
        if frac in TARGET_SIZES:
            row["half_gap_met"] = bool(gap <= 0 or hyb - best >= gap / 2)
        out[phase] = row
    return out


def plot(results: dict, path: Path):
    """Hit rate against cache size, one panel per graph and phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(results["graphs"])
    fig, axes = plt.subplots(len(graphs), 2, figsize=(11, 4 * len(graphs)), squeeze=False)
    for row, g in enumerate(graphs):
        sizes = results["graphs"][g]["sizes"]
        xs = [100 * float(s) for s in sizes]
        for col, phase in enumerate(("first_epoch", "steady")):
            ax = axes[row][col]
            for pol in POLICIES:
                ax.plot(
                    xs,
                    [sizes[s]["rates"][pol][phase] for s in sizes],
                    marker="o",
                    label=pol,
                    linestyle="--" if pol == "belady" else "-",
                )
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:g}%" for x in xs])
            ax.set_title(f"{g}: {'first epoch' if phase == 'first_epoch' else 'steady state'}")
            ax.set_xlabel("cache size (% of nodes)")
            ax.set_ylabel("hit rate")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    results = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "processor": platform.processor(),
            "loadavg_start": os.getloadavg(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "gnnsys": version("gnnsys"),
        },
        "config": {
            "fanouts": args.fanouts,
            "batch_size": args.batch_size,
            "epochs": args.epochs,
            "presample_epochs": args.presample_epochs,
            "lookahead": args.lookahead,
        },
        "graphs": {},
    }
    for name, path in args.graphs:
        results["graphs"][name] = run_graph(name, path, args)
    results["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(args.out)
    atomic_write_bytes(out.with_suffix(".json"), json.dumps(results, indent=1, default=float).encode())
    print(f"wrote {out.with_suffix('.json')}")
    if can_plot(out.with_suffix(".png")):
        plot(results, out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
