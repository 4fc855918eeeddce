"""Data-parallel minibatch training (`gnnsys.train(..., workers=W)`): epoch
time for W ranks, the share of step time spent in the shared cache's
exchange, and the metric of W-rank training against one process.

1. Epoch time: for each W in --workers (default 1,2,4; gloo processes on the
   CPU, each with 1/W of the torch threads), `--epochs` epochs of GraphSAGE
   (fanouts 15/10/5, batch 1024 per rank, hidden 256) on the products-shaped
   graph (benchmarks/prepare_synthetic.py writes /work/bench-data/products-1.0;
   prepared here when missing). The first epoch compiles and warms the page
   cache, so the table shows the last one (`time_s`, excluding evaluation).
   With --cache-rows (and --replicate-frac) the runs stack the feature cache;
   with W > 1 that is the shared cache, and the exchange column is rank 0's
   seconds in its collectives (`tiers.cache.exchange_s`) over the epoch
   time ("-" for one rank or no cache).
2. Metric: --seeds seeds on a small arxiv-shaped graph (--small, prepared
   when missing), one process against --metric-workers ranks, each rank with
   the same --batch-size (as `gnnsys train --workers W` runs): test metric at
   the best validation epoch, mean and standard deviation per W, and the
   difference of the means.

W above the machine's core count oversubscribes it (this development machine
has 2 cores, so W=4 measures contention, not scaling); the output says so.
Writes benchmarks/results/bench_data_parallel.json.

    python benchmarks/bench_data_parallel.py [--data DIR] [--small DIR] [--workers 1,2,4] [--epochs 2] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from common import machine  # noqa: E402
from helpers import run_child  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bench_data_parallel.json"


def ensure_dataset(path: Path, like: str, scale: float) -> Path:
    """`path`, prepared with `gnnsys prepare synthetic --like LIKE --scale SCALE` unless it holds a dataset."""
    if not (path / "meta.json").is_file():
        print(f"preparing {path} (--like {like} --scale {scale})", flush=True)
        run_child(
            [
                sys.executable,
                "-m",
                "gnnsys",
                "prepare",
                "synthetic",
                "--like",
                like,
                "--scale",
                str(scale),
                "--seed",
                "0",
                "--no-progress",
                "--out",
                str(path),
            ]
        )
    return path


def train_options(args, workers: int, seed: int, epochs: int) -> dict:
    """gnnsys.train keywords of one run."""
    tiers = {"cache_rows": args.cache_rows} if args.cache_rows else {}
    if args.replicate_frac:
        tiers["replicate_frac"] = args.replicate_frac
    return dict(
        model="sage",
        fanouts=args.fanouts,
        batch_size=args.batch_size,
        hidden=args.hidden,
        epochs=epochs,
        lr=args.lr,
        dropout=0.5,
        seed=seed,
        eval_every=epochs,
        workers=workers,
        progress=False,
        **tiers,
    )


def exchange_share(record: dict) -> float | None:
    """The share of rank 0's epoch spent in the shared cache's collectives
    (its `exchange_s`); None without a shared cache (one rank, or no cache)."""
    seconds = record.get("tiers", {}).get("cache", {}).get("exchange_s")
    return None if seconds is None else seconds / record["time_s"]


def epoch_time(data: Path, workers: int, args) -> dict:
    """One run of --epochs epochs with `workers` ranks: the last epoch's time, seeds/s and breakdown."""
    from gnnsys import load_dataset, train

    began = time.perf_counter()
    result = train(data, **train_options(args, workers, args.seed, args.epochs))
    last = result.epochs[-1]
    seeds = load_dataset(data).split("train").shape[0] // workers * workers
    return {
        "workers": workers,
        "epoch_s": last["time_s"],
        "seeds_per_s": seeds / last["time_s"],
        "exchange_share": exchange_share(last),
        "breakdown": last["breakdown"],
        "tiers": last.get("tiers"),
        "epochs_s": [e["time_s"] for e in result.epochs],
        "run_s": time.perf_counter() - began,
        "loss": last["loss"],
        "valid": last["valid"],
        "test": last["test"],
    }


def metric_runs(small: Path, workers: int, args) -> dict:
    """Test metric at the best validation epoch, per seed, for one process and `workers` ranks."""
    from gnnsys import train

    out = {}
    for w in (1, workers):
        tests = [train(small, **train_options(args, w, seed, args.metric_epochs)).test for seed in range(args.seeds)]
        out[str(w)] = {
            "tests": tests,
            "mean": statistics.mean(tests),
            "std": statistics.stdev(tests) if len(tests) > 1 else 0.0,
        }
        print(
            f"metric, W={w}: {out[str(w)]['mean']:.4f} +- {out[str(w)]['std']:.4f} over {args.seeds} seeds", flush=True
        )
    one, many = out["1"], out[str(workers)]
    out["difference"] = many["mean"] - one["mean"]  # within noise: small against the seeds' standard deviations
    return out


def table(rows: list, cores: int) -> str:
    """The epoch-time table, W=1 as the baseline."""
    base = rows[0]["epoch_s"] if rows and rows[0]["workers"] == 1 else None
    lines = ["| W | epoch s | seeds/s | speed-up | exchange share | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        speed = f"{base / r['epoch_s']:.2f}x" if base else "-"
        share = "-" if r["exchange_share"] is None else f"{100 * r['exchange_share']:.1f}%"
        note = f"oversubscribed: {r['workers']} processes on {cores} cores" if r["workers"] > cores else ""
        lines.append(f"| {r['workers']} | {r['epoch_s']:.1f} | {r['seeds_per_s']:,.0f} | {speed} | {share} | {note} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the epoch-time and metric parts and write the JSON result."""
    from gnnsys.atomic import atomic_write_bytes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--data",
        type=Path,
        default=Path("/work/bench-data/products-1.0"),
        help="products-shaped dataset for the epoch times (prepared when missing)",
    )
    p.add_argument("--data-scale", type=float, default=1.0, help="--scale when --data is prepared here")
    p.add_argument(
        "--small",
        type=Path,
        default=Path("/work/bench-data/arxiv-0.1"),
        help="small graph for the metric comparison (prepared when missing)",
    )
    p.add_argument("--small-scale", type=float, default=0.1, help="--scale when --small is prepared here")
    p.add_argument("--workers", default="1,2,4", help="comma-separated rank counts")
    p.add_argument("--epochs", type=int, default=2, help="epochs per epoch-time run (the last is reported)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch per rank")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-rows", type=int, default=0, help="feature cache rows (per rank)")
    p.add_argument("--replicate-frac", type=float, default=0.0, help="hottest share of the shared cache on every rank")
    p.add_argument("--seeds", type=int, default=3, help="seeds of the metric comparison (0: skip it)")
    p.add_argument("--metric-workers", type=int, default=2, help="ranks compared with one process")
    p.add_argument("--metric-epochs", type=int, default=5)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    args.fanouts = [int(v) for v in args.fanouts.split(",")]
    cores = os.cpu_count() or 1
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    record = {"benchmark": "bench_data_parallel", "machine": machine(), "config": config}
    data = ensure_dataset(args.data, "ogbn-products", args.data_scale)
    rows = []
    for w in (int(v) for v in args.workers.split(",")):
        rows.append(epoch_time(data, w, args))
        print(f"W={w}: epoch {rows[-1]['epoch_s']:.1f} s (run {rows[-1]['run_s']:.0f} s with evaluation)", flush=True)
    record["epoch_time"] = rows
    if args.seeds:
        record["metric"] = metric_runs(
            ensure_dataset(args.small, "ogbn-arxiv", args.small_scale), args.metric_workers, args
        )
    record["table"] = table(rows, cores)
    if any(r["workers"] > cores for r in rows):
        record["note"] = (
            f"this machine has {cores} cores: runs with more processes than cores oversubscribe it "
            "and measure contention, not scaling"
        )
        print(record["note"])
    print(record["table"])
    atomic_write_bytes(args.results, (json.dumps(record, indent=2) + "\n").encode())
    print(f"results in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
