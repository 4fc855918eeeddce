"""Soak: the anonymous memory of long training runs, epoch by epoch.

Each configuration of --configs at each precision of --precisions trains in
a fresh child process for --epochs epochs, evaluated every epoch, as a
user's long run would. This process samples the child's RssAnon
(/proc/PID/status, its data-parallel workers' added) every 0.5 s and, at
each epoch's end (the child prints a line from `on_epoch_end`, after the
evaluation), keeps the largest sample since the previous epoch: the
epoch's peak anonymous memory.

Configurations (products: a products-shaped synthetic graph, --products;
mag: a mag-shaped heterogeneous one, --mag):
- minibatch: `gnnsys.train`, GraphSAGE 15/10/5, features in memory, exact
  layer-wise evaluation;
- ssd: the same through the SSD tier (features="ssd"), a hybrid cache of a
  tenth of the rows with 4 batches of lookahead, sampled evaluation;
- fullgraph: `gnnsys.train_fullgraph`, 2-layer GCN on the whole graph;
- data-parallel: minibatch with workers=2 (both workers' memory summed);
- hetero: `gnnsys.train` of the R-GCN on the mag-shaped graph.

Reported per run: growth per epoch over the second half (least-squares slope
of the epoch peaks, MB = 10^6 bytes), and the run's peak over the peak of its
first 50 epochs; each against the targets (growth <= 1 MB an epoch over the
second half of a 120-epoch run; over 500 epochs a peak within 5% of the
peak at epoch 50; a shorter run is marked "short" for the target it cannot
judge). Writes results/soak_<tag>.json after every run and
results/soak_<tag>.png (epoch peaks of every run); `plot` draws the runs of
several result files in one figure.

    python benchmarks/bench_soak.py run --products DIR [--mag DIR] --configs minibatch,ssd \
        --precisions 32,bf16-mixed --epochs 120 [--tag NAME]
    python benchmarks/bench_soak.py plot results/soak_A.json results/soak_B.json --out results/soak_AB.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from peaks import Peaks
from plotting import can_plot, save_figure
from side_by_side import machine_facts, result_paths

HERE = Path(__file__).resolve().parent
CONFIGS = ("minibatch", "ssd", "fullgraph", "data-parallel", "hetero")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
SAMPLE_S = 0.5
EPOCH_LINE = "SOAK_EPOCH "
TARGET_GROWTH_MB = 1.0  # per epoch, over the second half of a 120-epoch run
TARGET_GROWTH_EPOCHS = 120
TARGET_PEAK_RATIO = 1.05  # peak over the peak at epoch 50, over 500 epochs
TARGET_PEAK_EPOCHS = 500
PEAK_AT = 50


def tree_anonymous_bytes(pid: int) -> int:
    """RssAnon of process `pid` and of its descendants (data-parallel workers)."""
    import psutil

    from gnnsys.host_memory import anonymous_bytes

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    return anonymous_bytes(pid) + sum(anonymous_bytes(c.pid) for c in children)


def growth_per_epoch(peaks_bytes: list) -> float | None:
    """MB (10^6 bytes) an epoch over the second half of the epoch peaks (least squares); None under 4 epochs."""
    half = np.asarray(peaks_bytes[len(peaks_bytes) // 2 :], dtype=float) / 1e6
    if half.size < 2 or len(peaks_bytes) < 4:
        return None
    return float(np.polyfit(np.arange(half.size), half, 1)[0])


def judge(peaks_bytes: list) -> dict:
    """The run's figures against the targets: growth per epoch over the second
    half, peak over the peak of the first PEAK_AT epochs; "met", "missed", or
    "short" when the run has fewer epochs than the target is stated for."""
    growth = growth_per_epoch(peaks_bytes)
    n = len(peaks_bytes)
    ratio = max(peaks_bytes) / max(peaks_bytes[:PEAK_AT]) if n > PEAK_AT else None

    def mark(ok, enough):
        if ok is None:
            return "n/a"
        return ("met" if ok else "missed") if enough else ("short, " + ("met" if ok else "missed"))

    return {
        "epochs": n,
        "growth_mb_per_epoch": growth,
        "growth_target": mark(None if growth is None else growth <= TARGET_GROWTH_MB, n >= TARGET_GROWTH_EPOCHS),
        "peak_over_peak_at_50": ratio,
        "peak_target": mark(None if ratio is None else ratio <= TARGET_PEAK_RATIO, n >= TARGET_PEAK_EPOCHS),
        "first_peak_mib": peaks_bytes[0] / 2**20 if peaks_bytes else None,
        "last_peak_mib": peaks_bytes[-1] / 2**20 if peaks_bytes else None,
        "max_peak_mib": max(peaks_bytes) / 2**20 if peaks_bytes else None,
    }


def soak_run(cmd: list, timeout: float) -> dict:
    """One child: its epoch peaks of anonymous memory (sampled every SAMPLE_S
    seconds, children included), epoch times, load average and exit status."""
    before, start = os.getloadavg(), time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks = Peaks({"anon": lambda: tree_anonymous_bytes(child.pid)}, period=SAMPLE_S)
    killer = threading.Timer(timeout, child.kill)
    killer.daemon = True
    killer.start()
    epochs, tail = {}, []
    try:
        for line in child.stdout:
            if line.startswith(EPOCH_LINE):
                record = json.loads(line[len(EPOCH_LINE) :])
                if record["epoch"] not in epochs:  # data-parallel: every worker reports; the first ends the epoch
                    record["anon_peak_bytes"] = peaks.take()["anon"]
                    epochs[record["epoch"]] = record
            else:
                tail = [*tail[-4:], line.rstrip()]
    except BaseException:
        child.kill()  # the parent failed: no orphan training on
        raise
    finally:
        peaks.stop()
        child.wait()
        killer.cancel()
    records = [epochs[e] for e in sorted(epochs)]
    run = {
        "command": cmd,
        "returncode": child.returncode,
        "wall_s": time.perf_counter() - start,
        "loadavg_before": before,
        "loadavg_after": os.getloadavg(),
        "epoch_s_median": float(np.median([r["time_s"] for r in records[1:]])) if len(records) > 1 else None,
        "anon_peak_bytes": [r["anon_peak_bytes"] for r in records],
        "epoch_s": [round(r["time_s"], 3) for r in records],
    }
    if child.returncode != 0:
        run["error"] = " | ".join(tail)
    return run


def child_command(config: str, precision: str, args) -> list:
    """The command line of the child that trains `config` at `precision`."""
    data = args.mag if config == "hetero" else args.products
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "child",
        config,
        str(data),
        "--precision",
        precision,
        "--epochs",
        str(args.epochs),
    ]


def report_epoch(record: dict):
    """on_epoch_end: one line the parent reads (module level: data-parallel workers pickle it),
    in one write, so that the lines of workers writing at once do not interleave."""
    line = EPOCH_LINE + json.dumps({"epoch": record["epoch"], "time_s": record["time_s"]}) + "\n"
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


def child(argv: list):
    """Train one configuration, printing EPOCH_LINE after each epoch."""
    import gnnsys

    p = argparse.ArgumentParser(prog="bench_soak.py child")
    p.add_argument("config", choices=CONFIGS)
    p.add_argument("dataset")
    p.add_argument("--precision", required=True)
    p.add_argument("--epochs", type=int, required=True)
    a = p.parse_args(argv)
    common = dict(epochs=a.epochs, precision=a.precision, eval_every=1, progress=False, seed=0)
    if a.config == "fullgraph":
        gnnsys.train_fullgraph(a.dataset, on_epoch_end=report_epoch, **common)
        return
    tiers = {
        "minibatch": dict(features="auto", eval="layerwise"),
        "ssd": dict(features="ssd", cache_policy="hybrid", cache_gb=None, lookahead=4, eval="sampled"),
        "data-parallel": dict(workers=2),
        "hetero": {},
    }[a.config]
    if a.config == "ssd":
        meta = json.loads((Path(a.dataset) / "meta.json").read_text())
        tiers["cache_rows"] = max(1, meta["num_nodes"] // 10)
    gnnsys.train(a.dataset, on_epoch_end=report_epoch, **common, **tiers)


def plot(result: dict, path: Path):
    """Epoch peaks of anonymous memory of every run, one line each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 5.5))
    colors = plt.get_cmap("tab20").colors
    for i, (name, run) in enumerate(result["runs"].items()):
        peaks = np.asarray(run["anon_peak_bytes"]) / 2**20
        if peaks.size:
            growth = run["judged"]["growth_mb_per_epoch"]
            label = f"{name}: {growth:+.1f} MB/epoch" if growth is not None else name
            style = "--" if "before" in name else "-"
            ax.plot(np.arange(1, peaks.size + 1), peaks, style, color=colors[i % len(colors)], label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("peak RssAnon in the epoch (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("soak: peak anonymous memory per epoch (growth: slope over the second half)", fontsize=10)
    save_figure(fig, path)


def run(args):
    """Every configuration at every precision, one child at a time, into results/soak_<tag>.json and .png."""
    from gnnsys.atomic import atomic_write_bytes

    json_path, png_path = result_paths(args.out, f"soak_{args.tag}")
    result = {
        "benchmark": "soak",
        "tag": args.tag,
        "datasets": {"products": str(args.products), "mag": str(args.mag) if args.mag else None},
        "epochs": args.epochs,
        "sample_s": SAMPLE_S,
        "targets": {
            "growth_mb_per_epoch": TARGET_GROWTH_MB,
            "over_epochs": TARGET_GROWTH_EPOCHS,
            "peak_over_peak_at_50": TARGET_PEAK_RATIO,
            "peak_over_epochs": TARGET_PEAK_EPOCHS,
        },
        "environment": {k: v for k, v in os.environ.items() if "CACHE_CAPACITY" in k},
        "machine": machine_facts(),
        "runs": {},
    }
    for config in args.configs:
        for precision in args.precisions:
            name = f"{config} {precision}"
            record = soak_run(child_command(config, precision, args), args.timeout)
            record["judged"] = judge(record["anon_peak_bytes"]) if record["anon_peak_bytes"] else {}
            result["runs"][name] = record
            result["machine"]["loadavg_end"] = os.getloadavg()
            atomic_write_bytes(json_path, (json.dumps(result, indent=1) + "\n").encode())
            print(f"{name}: {record.get('error') or describe(record)}", flush=True)
    if can_plot(png_path):
        plot(result, png_path)
    return result


def describe(record: dict) -> str:
    """One line of a finished run."""
    j = record["judged"]
    growth = "n/a" if j["growth_mb_per_epoch"] is None else f"{j['growth_mb_per_epoch']:+.2f}"
    ratio = "n/a" if j["peak_over_peak_at_50"] is None else f"{j['peak_over_peak_at_50']:.3f}"
    return (
        f"{j['epochs']} epochs, peak RssAnon {j['first_peak_mib']:.0f} -> {j['last_peak_mib']:.0f} MiB, "
        f"growth {growth} MB/epoch ({j['growth_target']}), peak / peak at 50 {ratio} ({j['peak_target']}), "
        f"epoch {record['epoch_s_median']} s, "
        f"load {record['loadavg_before'][0]:.1f} -> {record['loadavg_after'][0]:.1f}"
    )


def plot_files(paths: list, out: Path):
    """One figure of the runs of several result files (each run named with its file's tag)."""
    results = [json.loads(Path(path).read_text()) for path in paths]
    merged = {**results[0], "tag": " + ".join(r["tag"] for r in results), "runs": {}}
    for r in results:
        merged["runs"].update({f"{r['tag']}: {name}": run for name, run in r["runs"].items()})
    if can_plot(out):
        plot(merged, out)


def parse_args(argv):
    """The subcommand's arguments; p.error on a bad dataset, configuration,
    precision or result file."""
    p = argparse.ArgumentParser(description="anonymous memory per epoch of long training runs")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("plot", help="draw the runs of several result files in one figure")
    q.add_argument("results", nargs="+", help="results/soak_<tag>.json files")
    q.add_argument("--out", required=True, help="the PNG to write")
    r = sub.add_parser("run", help="soak the configurations")
    r.add_argument("--products", required=True, help="prepared products-shaped dataset")
    r.add_argument("--mag", help="prepared mag-shaped dataset (for the hetero configuration)")
    r.add_argument("--configs", default="minibatch,ssd", help="comma-separated subset of " + ",".join(CONFIGS))
    r.add_argument("--precisions", default="32,bf16-mixed", help="comma-separated subset of " + ",".join(PRECISIONS))
    r.add_argument("--epochs", type=int, default=120)
    r.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    r.add_argument("--tag", default="products", help="results/soak_<tag>.json and .png")
    r.add_argument("--out", default=str(HERE / "results"), help="results directory")
    args = p.parse_args(argv)
    if args.command == "plot":
        missing = [path for path in args.results if not Path(path).is_file()]
        if missing:
            p.error(f"results: no such file {missing[0]}")
        return args
    args.configs, args.precisions = args.configs.split(","), args.precisions.split(",")
    for flag, values, allowed in (("--configs", args.configs, CONFIGS), ("--precisions", args.precisions, PRECISIONS)):
        unknown = [v for v in values if v not in allowed]
        if unknown:
            p.error(f"{flag}: unknown {unknown}; choose from {list(allowed)}")
    if args.epochs < 1:
        p.error(f"--epochs: must be >= 1, got {args.epochs}")
    for flag, path in (("--products", args.products), ("--mag", args.mag)):
        if path is not None and not (Path(path) / "meta.json").is_file():
            p.error(f"{flag}: {path} is not a prepared gnnsys dataset (no meta.json)")
    if "hetero" in args.configs and args.mag is None:
        p.error("--configs: hetero needs --mag")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        child(argv[1:])
        return
    args = parse_args(argv)
    if args.command == "plot":
        plot_files(args.results, Path(args.out))
    else:
        run(args)


if __name__ == "__main__":
    main()
