"""Configurations of gnnsys and a peer (DGL) timed side by side: each run a
fresh child process, interleaved (rep 1 of each configuration, rep 2 of
each, ...) so that load falls on all alike, with its peak memory and the
load average; medians, the ratios gnnsys / peer and a plot, written after
every run. bench_proteins.py and bench_mag.py stand on it, and on its
`run_accuracy` (a recipe trained by gnnsys in this process, its document written).

A child prints its record as its last line starting with "{": {"epochs":
[{"time_s", "breakdown": {"sample_s", "compute_s", ...}, ...}], "valid",
"test", "precision"?}, the peers' format (benchmarks/peers/common.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from helpers import SYSTEMS, median_of, warm
from peaks import Peaks
from plotting import can_plot, save_figure

HERE = Path(__file__).resolve().parent
PEER = "dgl"


def measured_run(cmd: list, timeout: float) -> dict:
    """One child process: its JSON record (the last output line starting
    with "{") or an error record, with its wall time, the load average
    before and after, its peak RSS (ru_maxrss, file-backed pages of
    memory-mapped files included) and peak RssAnon (sampled every 0.2 s)."""
    from gnnsys.host_memory import anonymous_bytes

    before, start = os.getloadavg(), time.perf_counter()
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(HERE)}
    )
    peaks = Peaks({"rss_anon": lambda: anonymous_bytes(child.pid)}, period=0.2)
    killer = threading.Timer(timeout, child.kill)
    killer.start()
    output = child.stdout.read()
    peak = peaks.stop()  # before wait4 reaps the child, while its /proc entry is there
    _, status, usage = os.wait4(child.pid, 0)
    killer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; keep Popen consistent
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        record = {"error": f"exit {child.returncode}: " + " | ".join(output.strip().splitlines()[-3:])}
    else:
        record = json.loads(lines[-1])
    record.update(
        process_wall_s=time.perf_counter() - start,
        loadavg_before=before,
        loadavg_after=os.getloadavg(),
        peak_rss_mib=usage.ru_maxrss / 1024,
        peak_rss_anon_mib=peak["rss_anon"] / 2**20,
    )
    return record


def summarize(runs: list) -> dict:
    """Medians over one configuration's successful runs (epoch times without
    each run's first epoch when it has more)."""
    ok = [r for r in runs if "error" not in r]
    epochs = [e for r in ok for e in warm(r["epochs"])]
    return {
        "runs_ok": len(ok),
        "runs_failed": len(runs) - len(ok),
        "precision": sorted({r.get("precision", "32") for r in ok}),
        "epoch_s": median_of([e["time_s"] for e in epochs]),
        "epoch_s_per_run": [[round(e["time_s"], 2) for e in r["epochs"]] for r in ok],
        "first_epoch_s": median_of([r["epochs"][0]["time_s"] for r in ok]),
        "breakdown_s": {k: median_of([e["breakdown"].get(k) for e in epochs]) for k in ("sample_s", "compute_s")},
        "peak_rss_mib": median_of([r["peak_rss_mib"] for r in ok]),
        "peak_rss_anon_mib": median_of([r["peak_rss_anon_mib"] for r in ok]),
        "valid": median_of([r.get("valid") for r in ok]),
        "test": median_of([r.get("test") for r in ok]),
        "loadavg_1min": [[round(r["loadavg_before"][0], 2), round(r["loadavg_after"][0], 2)] for r in ok],
    }


def ratios(summary: dict) -> dict:
    """Each gnnsys configuration's median over the peer's (< 1: gnnsys takes less)."""
    base = summary.get(PEER)
    if not base or not base["runs_ok"]:
        return {}
    keys = ("epoch_s", "peak_rss_mib", "peak_rss_anon_mib")
    return {
        name: {k: s[k] / base[k] if s[k] and base[k] else None for k in keys}
        for name, s in summary.items()
        if name != PEER
    }


def plot_timing(result: dict, path: Path, title: str):
    """Median epoch time (with each run's) and peak memory per configuration, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, s in result["summary"].items() if s["runs_ok"]]
    if not names:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    summary = result["summary"]
    left.bar(names, [summary[n]["epoch_s"] for n in names], color="tab:blue")
    for i, n in enumerate(names):
        times = [e for run in summary[n]["epoch_s_per_run"] for e in warm(run)]
        firsts = [run[0] for run in summary[n]["epoch_s_per_run"] if len(run) > 1]
        left.scatter([i] * len(times), times, color="black", s=12, zorder=3, label="runs" if i == 0 else None)
        left.scatter(
            [i] * len(firsts), firsts, color="black", marker="x", s=20, label="first epochs" if i == 0 else None
        )
        top = max([summary[n]["epoch_s"], *times, *firsts])
        left.text(i, 1.03 * top, f"{summary[n]['epoch_s']:.1f} s", ha="center", va="bottom")
    left.set_ylabel("seconds per training epoch (median)")
    left.legend(fontsize=8)
    left.set_title("epoch time")
    positions = np.arange(len(names))
    right.bar(positions - 0.2, [summary[n]["peak_rss_mib"] / 1024 for n in names], 0.4, label="peak RSS")
    right.bar(positions + 0.2, [summary[n]["peak_rss_anon_mib"] / 1024 for n in names], 0.4, label="peak RssAnon")
    right.set_xticks(positions, names)
    right.set_ylabel("GiB (median)")
    right.set_title("peak memory (training + evaluation)")
    right.legend()
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def time_configurations(
    benchmark: str, args, recipe: dict, facts: dict, references: dict, command, metric: str, title: str
) -> dict:
    """The `timing` subcommand of a benchmark: every configuration of
    args.configs, args.reps interleaved runs each (`command(config, rep)`),
    into results/<benchmark>_<dataset dir>.json (with the dataset's `facts`,
    the generator's `references`, the `recipe` and the timing options) and
    .png (titled `title`); `metric` names the test score in the progress lines."""
    json_path, png_path = result_paths(args.out, f"{benchmark}_{Path(args.dataset).resolve().name}")
    options = {k: getattr(args, k) for k in ("configs", "reps", "epochs", "fanouts", "batch_size")}
    result = {
        "benchmark": benchmark,
        "dataset": facts,
        "config": {**recipe, **options},
        "machine": machine_facts(),
        "references": references,
        "runs": {config: [] for config in args.configs},
    }
    run_interleaved(
        result, json_path, args.reps, command, args.timeout, lambda r: describe_run(r, metric), resume=args.resume
    )
    write_plot(result, png_path, title)
    return result


def run_interleaved(
    result: dict,
    json_path: Path,
    reps: int,
    command: Callable[[str, int], list],
    timeout: float,
    describe: Callable[[dict], str],
    resume: bool = False,
) -> dict:
    """Run `reps` interleaved reps of every configuration of result["runs"]
    ({configuration: []}), `command(configuration, rep)` each (seed = rep),
    into `result` (which holds "config" and "machine"), with its summary
    and ratios, written to `json_path` atomically after every run; one line
    per run (`describe(record)`). resume: keep the successful runs of the
    file already at `json_path` (same "config"), run the rest."""
    from gnnsys.atomic import atomic_write_bytes

    done = {}
    if resume and json_path.is_file():
        earlier = json.loads(json_path.read_text())
        done = finished_runs(earlier, json_path, result["config"])
        result["machine"] = {
            **earlier["machine"],
            "resumed": [*earlier["machine"].get("resumed", []), result["machine"]],
        }
    for rep in range(reps):
        for config, runs in result["runs"].items():
            record = done.get((rep, config))
            if record is None:
                record = dict(measured_run(command(config, rep), timeout), rep=rep)
                print(f"{config} rep {rep}: {record.get('error') or describe(record)}", flush=True)
            runs.append(record)
            result["summary"] = {c: summarize(r) for c, r in result["runs"].items()}
            result["ratios_gnnsys_over_dgl"] = ratios(result["summary"])
            result["machine"]["loadavg_end"] = os.getloadavg()
            atomic_write_bytes(json_path, (json.dumps(result, indent=1) + "\n").encode())
    return result


def finished_runs(earlier: dict, json_path: Path, config: dict) -> dict:
    """{(rep, configuration): record} of the successful runs of `earlier`, the
    result read from `json_path`; SystemExit when its configuration is not `config`."""
    if earlier["config"] != config:
        raise SystemExit(f"--resume: {json_path} was run with {earlier['config']}, not {config}")
    return {(r["rep"], name): r for name, runs in earlier["runs"].items() for r in runs if "error" not in r}


def describe_run(record: dict, metric: str) -> str:
    """One line of a finished run: its epoch times, test `metric`, peak memory and load."""
    epochs = [round(e["time_s"], 2) for e in record["epochs"]]
    return (
        f"epochs {epochs} s, test {metric} {record.get('test', float('nan')):.4f}, peak RSS "
        f"{record['peak_rss_mib']:.0f} MiB (anon {record['peak_rss_anon_mib']:.0f}), load "
        f"{record['loadavg_before'][0]:.2f} -> {record['loadavg_after'][0]:.2f}"
    )


def write_plot(result: dict, png_path: Path, title: str):
    """plot_timing when matplotlib is there (else one line, plotting.can_plot)."""
    if can_plot(png_path):
        plot_timing(result, png_path, title)


def gnnsys_child(argv: list, recipe: dict, **extra) -> dict:
    """A gnnsys child's run: gnnsys.train of `recipe` (and `extra`) with the
    arguments `child_command` passes (dataset, --precision, --epochs,
    --seed, --fanouts, --batch-size), evaluated after the last epoch, as a
    record in the peers' format: per-epoch times and losses, valid and test,
    and the values the run's config holds for the `extra` options."""
    import gnnsys

    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("--precision", required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fanouts", required=True)
    p.add_argument("--batch-size", type=int, required=True)
    a = p.parse_args(argv)
    fanouts = [int(f) for f in a.fanouts.split(",")]
    result = gnnsys.train(
        a.dataset,
        **recipe,
        **extra,
        layers=len(fanouts),
        fanouts=fanouts,
        batch_size=a.batch_size,
        epochs=a.epochs,
        seed=a.seed,
        eval_every=a.epochs,
        precision=a.precision,
        progress=False,
    ).to_dict()
    last = result["epochs"][-1]
    return {
        "system": "gnnsys",
        "precision": result["config"]["precision"],
        "options": {k: result["config"][k] for k in extra},
        "metric": result["metric"],
        "epochs": [{k: e[k] for k in ("epoch", "time_s", "loss", "breakdown")} for e in result["epochs"]],
        "valid": last["valid"],
        "test": last["test"],
    }


def child_command(script: str, dataset, args: argparse.Namespace, seed: int, precision: str) -> list:
    """The command line of a gnnsys child: `script child ...` in this interpreter."""
    sampling = ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size)]
    common = [str(dataset), "--epochs", str(args.epochs), "--seed", str(seed), *sampling]
    return [sys.executable, str(Path(script).resolve()), "child", *common, "--precision", precision]


def peer_command(script: Path, dataset, args: argparse.Namespace, seed: int, recipe: list) -> list:
    """The command line of the peer's run of `script` (benchmarks/peers) in its
    environment, with the options of `recipe` (the peers' common arguments)."""
    sampling = ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size)]
    common = [str(dataset), "--epochs", str(args.epochs), "--seed", str(seed), *sampling]
    return [str(SYSTEMS[PEER][0]), str(script), *common, *recipe, "--eval"]


def benchmark_parser(description: str, graph: str, configs: tuple, sampling: dict):
    """(parser, subparsers) of a side-by-side benchmark on a prepared
    synthetic `graph` dataset, with its `timing` subcommand; `add_subcommand`
    adds the others."""
    p = argparse.ArgumentParser(description=description)
    sub = p.add_subparsers(dest="command", required=True)
    t = add_subcommand(sub, "timing", "gnnsys and DGL epochs side by side", graph)
    add_timing_arguments(t, configs, sampling)
    return p, sub


def add_subcommand(sub, name: str, help: str, graph: str):
    """A subcommand taking a prepared synthetic `graph` dataset and --out."""
    q = sub.add_parser(name, help=help)
    q.add_argument("dataset", help=f"prepared synthetic {graph} dataset")
    q.add_argument("--out", default=str(HERE / "results"), help="results directory")
    return q


def parse_benchmark_args(p: argparse.ArgumentParser, argv, configs: tuple, peer_python: Path) -> argparse.Namespace:
    """p's arguments; p.error when the dataset is not a prepared one, or the
    timing's configurations are unknown or need a missing peer environment."""
    args = p.parse_args(argv)
    if not (Path(args.dataset) / "meta.json").is_file():
        p.error(f"{args.dataset}: not a prepared gnnsys dataset (no meta.json)")
    if args.command == "timing":
        check_configs(p, args, configs, peer_python)
    return args


def print_timing(result: dict):
    """The timing's summaries and ratios as one JSON line."""
    print(json.dumps({"summary": result["summary"], "ratios_gnnsys_over_dgl": result["ratios_gnnsys_over_dgl"]}))


def run_accuracy(
    benchmark: str, head: dict, references, train: Callable[[], dict], paths: tuple[Path, Path], plot
) -> dict:
    """Run `train()` (a TrainResult's to_dict()) and write its document to
    paths (JSON, and `plot(document, png)` where a plot can be made); the
    document: {"benchmark", **head, "machine" (with the load average after),
    "loadavg_before", "wall_s", "precision", "references", "logger" (OGB's
    Logger summary), "runs", "curves" (each run's evaluated epochs), "epoch_s"
    (the median epoch)}."""
    from gnnsys.atomic import atomic_write_bytes

    before, start = os.getloadavg(), time.perf_counter()
    result = train()
    document = {
        "benchmark": benchmark,
        **head,
        "machine": {**machine_facts(), "loadavg_end": os.getloadavg()},
        "loadavg_before": before,
        "wall_s": time.perf_counter() - start,
        "precision": result["config"]["precision"],
        "references": references,
        "logger": result["summary"],
        "runs": [
            {k: run[k] for k in ("run", "seed", "best_epoch", "highest_valid", "final_test")} for run in result["runs"]
        ],
        "curves": [
            {
                "run": run["run"],
                "epochs": [
                    {k: e[k] for k in ("epoch", "loss", "train", "valid", "test")}
                    for e in run["epochs"]
                    if e["valid"] is not None
                ],
            }
            for run in result["runs"]
        ],
        "epoch_s": median_of([e["time_s"] for run in result["runs"] for e in run["epochs"]]),
    }
    json_path, png_path = paths
    atomic_write_bytes(json_path, (json.dumps(document, indent=1) + "\n").encode())
    if can_plot(png_path):
        plot(document, png_path)
    return document


def accuracy_axes(document: dict, height: float, alpha: float):
    """(figure, axes), 7 x `height` inches, with each run's valid and test
    score per epoch of an accuracy document (run_accuracy), lines of `alpha`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, height))
    for curve in document["curves"]:
        epochs = [e["epoch"] + 1 for e in curve["epochs"]]
        for split, color in (("valid", "tab:orange"), ("test", "tab:blue")):
            label = split if curve["run"] == 0 else None
            scores = [e[split] for e in curve["epochs"]]
            ax.plot(epochs, scores, "o-", color=color, markersize=3, alpha=alpha, label=label)
    return fig, ax


def print_accuracy(document: dict):
    """The accuracy document's precision, Logger summary, runs, references and median epoch as one JSON line."""
    print(json.dumps({k: document[k] for k in ("precision", "logger", "runs", "references", "epoch_s")}))


def add_timing_arguments(p: argparse.ArgumentParser, configs: tuple, sampling: dict):
    """The `timing` subcommand's options: --configs (a subset of `configs`),
    --reps, --epochs, --fanouts and --batch-size (defaults from `sampling`),
    --timeout, --resume."""
    p.add_argument("--configs", default=",".join(configs), help="comma-separated subset of " + ",".join(configs))
    p.add_argument("--reps", type=int, default=3, help="runs of each configuration")
    p.add_argument("--epochs", type=int, default=2, help="training epochs per run")
    p.add_argument("--fanouts", default=sampling["fanouts"])
    p.add_argument("--batch-size", type=int, default=sampling["batch_size"])
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    p.add_argument(
        "--resume", action="store_true", help="keep the successful runs of the result file (same options), run the rest"
    )


def check_configs(p: argparse.ArgumentParser, args: argparse.Namespace, configs: tuple, peer_python: Path):
    """Split args.configs into a list; p.error on an unknown configuration, or
    on the peer's when its environment (`peer_python`) is missing."""
    args.configs = args.configs.split(",")
    unknown = [c for c in args.configs if c not in configs]
    if unknown:
        p.error(f"--configs: unknown {unknown}; choose from {list(configs)}")
    if PEER in args.configs and not peer_python.exists():
        p.error(f"--configs: {PEER} needs {peer_python}; run benchmarks/setup_peers.sh {PEER} first")


def result_paths(directory, stem: str) -> tuple[Path, Path]:
    """The JSON and PNG paths of result `stem` in `directory` (a stem may hold dots: proteins-0.1)."""
    return Path(directory) / f"{stem}.json", Path(directory) / f"{stem}.png"


def machine_facts() -> dict:
    """The machine, versions and load average a result was taken on."""
    import psutil
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg_start": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
