"""Minibatch epoch benchmark: gnnsys vs DGL vs PyG, side by side.

For each prepared dataset directory, runs every system in its own process and
environment, interleaved (rep 1 of each, rep 2 of each, ...) so that load on
this shared machine falls on all of them alike. Each run times one sampling +
feature-gather epoch over the train split and `--epochs` GraphSAGE training
epochs (breakdown: sample / gather / compute); `--eval-reps` runs also report
validation and test accuracy after the last epoch. Writes
benchmarks/results/minibatch_<dataset>.json (every run, medians, ratios peer /
gnnsys), a PNG bar plot and the runs so far as JSON lines
(.runs.jsonl, written as they finish; --resume continues from it) beside it; with a subset of --systems the
file names end in _<systems>.

    benchmarks/setup_peers.sh            # once: DGL and PyG environments
    python benchmarks/bench_minibatch.py /work/bench-data/arxiv-1.0 --reps 3 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from helpers import SYSTEMS, epoch_flags, median_of
from tqdm.auto import tqdm

HERE = Path(__file__).resolve().parent


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("datasets", nargs="+", help="prepared gnnsys dataset directories")
    p.add_argument("--systems", default="gnnsys,dgl,pyg", help="comma-separated subset of " + ",".join(SYSTEMS))
    p.add_argument("--reps", type=int, default=3, help="runs of each system (>= 3 for a reported median)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs per run")
    p.add_argument("--eval-reps", type=int, default=1, help="how many reps (the first ones) also report accuracy")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the finished runs in the results' .runs.jsonl (same options) and run only the rest",
    )
    p.add_argument("--out", default=str(HERE / "results"), help="results directory")
    args = p.parse_args(argv)
    args.systems = args.systems.split(",")
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"--systems: unknown {unknown}; choose from {list(SYSTEMS)}")
    for system in args.systems:
        python = SYSTEMS[system][0]
        if not python.exists():
            p.error(f"--systems: {system} needs {python}; run benchmarks/setup_peers.sh first")
    for d in args.datasets:
        if not (Path(d) / "meta.json").is_file():
            p.error(f"{d}: not a prepared gnnsys dataset (no meta.json)")
    return args


def run_once(system: str, dataset: str, args, seed: int, evaluate: bool) -> dict:
    """One run of one system in a fresh process: its JSON record, or an error record."""
    python, script = SYSTEMS[system]
    cmd = [str(python), str(script), str(Path(dataset).resolve()), *epoch_flags(args), "--seed", str(seed)]
    if evaluate:
        cmd.append("--eval")
    load_before = os.getloadavg()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"system": system, "error": f"timed out after {args.timeout:.0f} s", "loadavg_before": load_before}
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {
            "system": system,
            "error": f"exit {proc.returncode}: " + " | ".join(tail),
            "loadavg_before": load_before,
        }
    record = json.loads(lines[-1])
    record.update(process_wall_s=wall, loadavg_before=load_before)
    return record


def summarize(runs: list[dict]) -> dict:
    """Medians over the successful runs of one system."""
    ok = [r for r in runs if "error" not in r]
    epochs = [e for r in ok for e in r.get("epochs", [])]
    out = {
        "runs_ok": len(ok),
        "runs_failed": len(runs) - len(ok),
        "sampling_epoch_s": median_of([r["sampling"]["time_s"] for r in ok]),
        "sampling_sample_s": median_of([r["sampling"]["breakdown"]["sample_s"] for r in ok]),
        "sampling_gather_s": median_of([r["sampling"]["breakdown"]["gather_s"] for r in ok]),
        "train_epoch_s": median_of([e["time_s"] for e in epochs]),
        "train_breakdown_s": {
            k: median_of([e["breakdown"].get(k) for e in epochs]) for k in ("sample_s", "gather_s", "compute_s")
        },
        "valid": median_of([r.get("valid") for r in ok]),
        "test": median_of([r.get("test") for r in ok]),
        "batches": median_of([r["sampling"]["batches"] for r in ok]),
    }
    return out


def ratios(summary: dict) -> dict:
    """Each peer's median time / gnnsys's (> 1: gnnsys is faster)."""
    base = summary.get("gnnsys")
    if not base:
        return {}
    out = {}
    for system, s in summary.items():
        if system == "gnnsys":
            continue
        out[system] = {
            key: (s[key] / base[key] if s[key] and base[key] else None) for key in ("sampling_epoch_s", "train_epoch_s")
        }
    return out


def bench_dataset(dataset: str, args, log: Path) -> dict:
    """Interleaved reps of every system on one dataset; the result document.
    Each run's record is appended to `log` (JSON lines) as it finishes; the
    successful runs already in `log` are reused, not repeated."""
    meta = json.loads((Path(dataset) / "meta.json").read_text())
    done = {}
    if log.is_file():
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        done = {(r["rep"], r["system"]): r for r in records if "error" not in r}
    runs = {system: [] for system in args.systems}
    plan = [(rep, system) for rep in range(args.reps) for system in args.systems]
    for rep, system in tqdm(plan, desc=Path(dataset).name, unit="run", dynamic_ncols=True):
        record = done.get((rep, system))
        if record is None:
            record = run_once(system, dataset, args, seed=rep, evaluate=rep < args.eval_reps)
            record["rep"] = rep
            with open(log, "a") as f:
                f.write(json.dumps(record) + "\n")
        runs[system].append(record)
        if "error" in record:
            tqdm.write(f"{system} rep {rep}: {record['error']}")
    summary = {system: summarize(r) for system, r in runs.items()}
    return {
        "benchmark": "minibatch",
        "dataset": {
            "path": str(Path(dataset).resolve()),
            "name": meta["name"],
            "num_nodes": meta["num_nodes"],
            "num_edges": meta["num_edges"],
            "dim": meta["features"]["dim"],
            "num_classes": meta["labels"]["num_classes"],
        },
        "config": {
            k: getattr(args, k) for k in ("reps", "epochs", "eval_reps", "fanouts", "batch_size", "hidden", "lr")
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_end": list(os.getloadavg()),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "summary": summary,
        "ratios_vs_gnnsys": ratios(summary),
        "runs": runs,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    from plot_minibatch import plot
    from plotting import can_plot

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        name = f"minibatch_{Path(dataset).resolve().name}"
        if args.systems != list(SYSTEMS):  # a partial comparison never overwrites the full one
            name += "_" + "-".join(args.systems)
        log = out / f"{name}.runs.jsonl"
        if not args.resume:
            log.unlink(missing_ok=True)
        result = bench_dataset(dataset, args, log)
        (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        if can_plot(out / f"{name}.png"):
            plot(result, out / f"{name}.png")
        print(
            json.dumps(
                {
                    "dataset": result["dataset"]["name"],
                    "summary": result["summary"],
                    "ratios_vs_gnnsys": result["ratios_vs_gnnsys"],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
