"""ogbn-proteins-shaped graph: gnnsys and DGL side by side, and the OGB example's recipe against the generator.

The model is the OGB proteins example's (examples/nodeproppred/proteins/gnn.py):
GraphSAGE (mean), 3 layers, hidden 256, dropout 0, Adam lr 0.01 without weight
decay, node features the mean of each node's edge features (prepare with
`--node-features-from-edges mean`), binary cross entropy with logits over the
labelled entries of the 112 tasks, OGB's ROC-AUC averaged over tasks.

`timing DATASET`: configurations gnnsys-fp32 (precision "32", the peer's),
gnnsys-auto (gnnsys's default precision: bf16-mixed where the CPU multiplies
bf16 natively) and dgl (benchmarks/peers/dgl_epoch.py in the DGL environment of
benchmarks/setup_peers.sh), minibatch training with fanouts 15/10/5 and batch
1024. Each run is a fresh process, interleaved (rep 1 of each, rep 2 of
each, ...) so that load falls on all alike (--resume keeps the successful
runs of an earlier result file and runs the rest): --epochs training epochs (the
first left out of the median when there are more), then valid/test ROC-AUC by
exact layer-wise inference (in every run, so every run does the same work).
Each run records the 1-minute load average before and after, its peak RSS
(the child's ru_maxrss from os.wait4, file-backed pages of memory-mapped files
included) and its peak anonymous memory (RssAnon sampled every 0.2 s).
Writes results/proteins_timing_<dataset dir>.json (every run, medians, the
ratios gnnsys / DGL) and .png.

`accuracy DATASET`: the recipe trained by gnnsys, --trainer fullgraph (the OGB
example's full-batch training: one step an epoch) or minibatch (the timing's
sampler), --epochs epochs, evaluated every 5 (the example's eval_steps),
--runs runs from seed 0; test ROC-AUC at the best validation epoch (OGB's
Logger). Writes results/proteins_accuracy_<dataset dir>_<trainer>.json and .png.

Both compare the ROC-AUC with what the generator knows
(datasets/synthetic_proteins.py; meta.json records its scale and seed, from
which the labels are redrawn and checked against labels.npy): "oracle", the
ROC-AUC of the latent scores w_t . h_v + b_t the labels were drawn from (the
labels' noise is logistic and monotone, so no model can rank better), and
"features_plug_in", those scores with h_v estimated from the node's own
features by inverting their expected value given h_v (a mean of
sigmoid(EDGE_SIGNAL (h_u + h_v) / 2 + EDGE_NOISE e) over the neighbours u):
what the node's own features reveal through the generator's own maps, an
estimate of what is attainable rather than a bound.

    gnnsys prepare synthetic --like ogbn-proteins --scale 1.0 --seed 0 --node-features-from-edges mean \\
        --out /work/bench-data/proteins-1.0
    benchmarks/setup_peers.sh dgl
    python benchmarks/bench_proteins.py timing /work/bench-data/proteins-1.0 --reps 3 --epochs 2
    python benchmarks/bench_proteins.py accuracy /work/bench-data/proteins-1.0 --trainer minibatch --epochs 5
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
from pathlib import Path

import numpy as np
from bench_minibatch import SYSTEMS
from bench_precision import median_of, warm
from peaks import Peaks
from plotting import can_plot, save_figure

HERE = Path(__file__).resolve().parent
RECIPE = {"model": "sage", "hidden": 256, "dropout": 0.0, "lr": 0.01, "weight_decay": 0.0}
LAYERS = 3  # the full-graph recipe's; a minibatch run has one layer per fanout
EVAL_EVERY = 5  # the OGB example's eval_steps
PRECISIONS = {"gnnsys-fp32": "32", "gnnsys-auto": "auto"}
CONFIGS = (*PRECISIONS, "dgl")
TRAINERS = ("fullgraph", "minibatch")
SAMPLING = {"fanouts": "15,10,5", "batch_size": 1024}


# -- the generator's references ------------------------------------------------------------------
def generator_references(dataset) -> dict:
    """{"valid"|"test": {"oracle": rocauc, "features_plug_in": rocauc}} of a
    synthetic proteins dataset (a gnnsys Dataset), recomputed from the
    generator's parameters in its meta.json; SystemExit when the dataset is
    not one, or its labels are not the generator's."""
    import torch

    from gnnsys.datasets.synthetic_proteins import ProteinsModel
    from gnnsys.training.tasks import rocauc

    synth = dataset.meta.get("source", {}).get("synthetic", {})
    if synth.get("like") != "ogbn-proteins":
        raise SystemExit(f"{dataset.path}: not prepared by `gnnsys prepare synthetic --like ogbn-proteins`")
    model = ProteinsModel(synth["scale"], synth["seed"])
    labels = dataset.labels.numpy()
    if labels.shape != model.labels.shape or not np.array_equal(labels, model.labels):
        raise SystemExit(
            f"{dataset.path}: labels.npy differs from the generator's at scale {synth['scale']}, seed "
            f"{synth['seed']} (nodes renumbered at prepare?): no reference"
        )
    plug_in = _latent_from_features(dataset, synth) @ model.task_weights + model.task_offsets
    scores = {"oracle": model.latent_scores(), "features_plug_in": plug_in}
    y = torch.from_numpy(labels)
    return {
        split: {name: rocauc(torch.from_numpy(s[ids]), y[ids]) for name, s in scores.items()}
        for split, ids in ((split, dataset.split(split).numpy()) for split in ("valid", "test"))
    }


def _latent_from_features(dataset, synth: dict) -> np.ndarray:
    """[N, latent] estimate of h_v from each node's features (the mean of its
    in-edges' features; a sum divided by the in-degree), `latent_from_edge_mean`."""
    import torch

    how = dataset.meta["source"]["options"].get("node_features_from_edges")
    if how not in ("mean", "sum"):
        raise SystemExit(f"{dataset.path}: node features not derived from edge features (--node-features-from-edges)")
    x = dataset.features[torch.arange(dataset.num_nodes)].double().numpy()
    if how == "sum":
        x = x / np.maximum(np.diff(dataset.indptr.numpy()), 1)[:, None]
    return latent_from_edge_mean(x, synth["edge_signal"], synth["edge_noise"]).astype(np.float32)


def latent_from_edge_mean(x: np.ndarray, edge_signal: float, edge_noise: float) -> np.ndarray:
    """h with g(h) = x, elementwise, for g(h) = E[sigmoid(edge_signal (h + u) / 2
    + edge_noise e)] over u, e ~ N(0, 1) (the neighbour's latent and the edge's
    noise): g(h) = E[sigmoid(a h + s z)], a = edge_signal / 2, s^2 = a^2 +
    edge_noise^2, by Gauss-Hermite quadrature on a grid of h in [-8, 8]."""
    a = edge_signal / 2
    s = np.hypot(a, edge_noise)
    z, w = np.polynomial.hermite_e.hermegauss(64)
    grid = np.linspace(-8, 8, 4001)
    g = (1 / (1 + np.exp(-(a * grid[:, None] + s * z)))) @ w / w.sum()
    return np.interp(x, g, grid)


# -- timing children -----------------------------------------------------------------------------
def child_gnnsys(argv: list) -> dict:
    """gnnsys.train of the recipe on sampled minibatches in the peers' record
    format: per-epoch times, then valid/test ROC-AUC (exact layer-wise)."""
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
        **RECIPE,
        layers=len(fanouts),
        fanouts=fanouts,
        batch_size=a.batch_size,
        epochs=a.epochs,
        seed=a.seed,
        eval_every=a.epochs,
        precision=a.precision,
        eval="layerwise",
        progress=False,
    ).to_dict()
    last = result["epochs"][-1]
    return {
        "system": "gnnsys",
        "precision": result["config"]["precision"],
        "metric": result["metric"],
        "epochs": [{k: e[k] for k in ("epoch", "time_s", "loss", "breakdown")} for e in result["epochs"]],
        "valid": last["valid"],
        "test": last["test"],
    }


def command(config: str, dataset: Path, args, seed: int) -> list:
    """The command line of one timed run of `config`."""
    sampling = ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size)]
    common = [str(dataset), "--epochs", str(args.epochs), "--seed", str(seed), *sampling]
    if config == "dgl":
        python, script = SYSTEMS["dgl"]
        recipe = ["--hidden", str(RECIPE["hidden"]), "--dropout", str(RECIPE["dropout"]), "--lr", str(RECIPE["lr"])]
        return [str(python), str(script), *common, *recipe, "--eval"]
    return [sys.executable, str(Path(__file__).resolve()), "child", *common, "--precision", PRECISIONS[config]]


def measured_run(cmd: list, timeout: float) -> dict:
    """One child process: its JSON record (the last output line starting
    with "{") or an error record, with its wall time, the load average
    before and after, its peak RSS (ru_maxrss) and peak RssAnon."""
    from gnnsys.datasets.host_memory import anonymous_bytes

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
    """Each gnnsys configuration's median over DGL's (< 1: gnnsys takes less)."""
    base = summary.get("dgl")
    if not base or not base["runs_ok"]:
        return {}
    keys = ("epoch_s", "peak_rss_mib", "peak_rss_anon_mib")
    return {
        name: {k: s[k] / base[k] if s[k] and base[k] else None for k in keys}
        for name, s in summary.items()
        if name != "dgl"
    }


def plot_timing(result: dict, path: Path):
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
    right.set_title("peak memory (training + exact evaluation)")
    right.legend()
    d = result["dataset"]
    fig.suptitle(f"{d['name']}: {d['num_nodes']:,} nodes, {d['num_edges']:,} edges", fontsize=10)
    save_figure(fig, path)


def timing(args) -> dict:
    """Interleaved timed runs of every configuration; the result document, written after every run."""
    import gnnsys
    from gnnsys.datasets.atomic import atomic_write_bytes

    dataset = gnnsys.load_dataset(args.dataset)
    json_path, png_path = result_paths(args.out, f"proteins_timing_{Path(args.dataset).resolve().name}")
    result = {
        "benchmark": "proteins_timing",
        "dataset": _dataset_facts(dataset),
        "config": {**RECIPE, **{k: getattr(args, k) for k in ("configs", "reps", "epochs", "fanouts", "batch_size")}},
        "machine": _machine(),
        "references": generator_references(dataset),
        "runs": {config: [] for config in args.configs},
    }
    done = {}
    if args.resume and json_path.is_file():
        earlier = json.loads(json_path.read_text())
        done = finished_runs(earlier, json_path, result["config"])
        result["machine"] = {**earlier["machine"], "resumed": [*earlier["machine"].get("resumed", []), _machine()]}
    for rep in range(args.reps):
        for config in args.configs:
            record = done.get((rep, config))
            if record is None:
                record = dict(measured_run(command(config, dataset.path, args, seed=rep), args.timeout), rep=rep)
                print(f"{config} rep {rep}: {record.get('error') or _line(record)}", flush=True)
            result["runs"][config].append(record)
            result["summary"] = {c: summarize(r) for c, r in result["runs"].items()}
            result["ratios_gnnsys_over_dgl"] = ratios(result["summary"])
            result["machine"]["loadavg_end"] = os.getloadavg()
            atomic_write_bytes(json_path, (json.dumps(result, indent=1) + "\n").encode())
    if can_plot(png_path):
        plot_timing(result, png_path)
    return result


def finished_runs(earlier: dict, json_path: Path, config: dict) -> dict:
    """{(rep, configuration): record} of the successful runs of `earlier`, the
    result read from `json_path`; SystemExit when its configuration is not `config`."""
    if earlier["config"] != config:
        raise SystemExit(f"--resume: {json_path} was run with {earlier['config']}, not {config}")
    return {(r["rep"], name): r for name, runs in earlier["runs"].items() for r in runs if "error" not in r}


def _line(record: dict) -> str:
    epochs = [round(e["time_s"], 2) for e in record["epochs"]]
    return (
        f"epochs {epochs} s, test ROC-AUC {record.get('test', float('nan')):.4f}, peak RSS "
        f"{record['peak_rss_mib']:.0f} MiB (anon {record['peak_rss_anon_mib']:.0f}), load "
        f"{record['loadavg_before'][0]:.2f} -> {record['loadavg_after'][0]:.2f}"
    )


# -- accuracy ------------------------------------------------------------------------------------
def accuracy(args) -> dict:
    """The recipe trained by gnnsys in this process; its ROC-AUC curve and
    OGB-Logger summary beside the generator's references."""
    import gnnsys
    from gnnsys.datasets.atomic import atomic_write_bytes

    dataset = gnnsys.load_dataset(args.dataset)
    json_path, png_path = result_paths(
        args.out, f"proteins_accuracy_{Path(args.dataset).resolve().name}_{args.trainer}"
    )
    references = generator_references(dataset)
    options = {**RECIPE, "epochs": args.epochs, "eval_every": EVAL_EVERY, "runs": args.runs}
    options.update(precision=args.precision, seed=0, progress=False)
    before, start = os.getloadavg(), time.perf_counter()
    if args.trainer == "fullgraph":
        options.update(layers=LAYERS)
        trained = gnnsys.train_fullgraph(dataset, **options)
    else:
        sampling = {"fanouts": [int(f) for f in args.fanouts.split(",")], "batch_size": args.batch_size}
        options.update(sampling, layers=len(sampling["fanouts"]), eval="layerwise")
        trained = gnnsys.train(dataset, **options)
    result = trained.to_dict()
    document = {
        "benchmark": "proteins_accuracy",
        "trainer": args.trainer,
        "dataset": _dataset_facts(dataset),
        "options": {k: v for k, v in options.items() if k != "progress"},
        "machine": {**_machine(), "loadavg_end": os.getloadavg()},
        "loadavg_before": before,
        "wall_s": time.perf_counter() - start,
        "precision": result["config"]["precision"],
        "references": references,
        "logger": result["summary"],
        "runs": [
            {k: run[k] for k in ("run", "seed", "best_epoch", "highest_valid", "final_test")} for run in result["runs"]
        ],
        "curves": [
            {"run": run["run"], "epochs": [_scores(e) for e in run["epochs"] if e["valid"] is not None]}
            for run in result["runs"]
        ],
        "epoch_s": median_of([e["time_s"] for run in result["runs"] for e in run["epochs"]]),
    }
    atomic_write_bytes(json_path, (json.dumps(document, indent=1) + "\n").encode())
    if can_plot(png_path):
        plot_accuracy(document, png_path)
    return document


def _scores(epoch: dict) -> dict:
    return {k: epoch[k] for k in ("epoch", "loss", "train", "valid", "test")}


def plot_accuracy(document: dict, path: Path):
    """Valid and test ROC-AUC against the epoch, with the generator's references, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for curve in document["curves"]:
        epochs = [e["epoch"] + 1 for e in curve["epochs"]]
        for split, color in (("valid", "tab:orange"), ("test", "tab:blue")):
            label = f"{split}" if curve["run"] == 0 else None
            scores = [e[split] for e in curve["epochs"]]
            ax.plot(epochs, scores, "o-", color=color, markersize=3, alpha=0.8, label=label)
    for name, style in (("oracle", "--"), ("features_plug_in", ":")):
        ax.axhline(document["references"]["test"][name], color="black", linestyle=style, label=f"test {name}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ROC-AUC (mean over tasks)")
    ax.set_title(f"{document['dataset']['name']}: SAGE 3 x 256, {document['trainer']}", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


# -- shared --------------------------------------------------------------------------------------
def result_paths(directory, stem: str) -> tuple[Path, Path]:
    """The JSON and PNG paths of result `stem` in `directory` (a stem may hold dots: proteins-0.1)."""
    return Path(directory) / f"{stem}.json", Path(directory) / f"{stem}.png"


def _dataset_facts(dataset) -> dict:
    return {
        "path": str(dataset.path),
        "name": dataset.name,
        "num_nodes": dataset.num_nodes,
        "num_edges": dataset.meta["num_edges"],
        "feature_dim": dataset.num_features,
        "num_tasks": dataset.num_classes,
        "splits": {s: int(dataset.split(s).shape[0]) for s in ("train", "valid", "test")},
        "synthetic": dataset.meta["source"].get("synthetic"),
    }


def _machine() -> dict:
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("timing", help="gnnsys and DGL epochs side by side")
    t.add_argument("dataset", help="prepared synthetic ogbn-proteins dataset")
    t.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ",".join(CONFIGS))
    t.add_argument("--reps", type=int, default=3, help="runs of each configuration")
    t.add_argument("--epochs", type=int, default=2, help="training epochs per run")
    t.add_argument("--fanouts", default=SAMPLING["fanouts"])
    t.add_argument("--batch-size", type=int, default=SAMPLING["batch_size"])
    t.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    t.add_argument(
        "--resume", action="store_true", help="keep the successful runs of the result file (same options), run the rest"
    )
    a = sub.add_parser("accuracy", help="the OGB example's recipe trained by gnnsys")
    a.add_argument("dataset", help="prepared synthetic ogbn-proteins dataset")
    a.add_argument("--trainer", choices=TRAINERS, default="fullgraph")
    a.add_argument("--epochs", type=int, default=100)
    a.add_argument("--runs", type=int, default=1, help="runs, seeds 0, 1, ...")
    a.add_argument("--precision", default="32", help="gnnsys precision (the example trains in fp32)")
    a.add_argument("--fanouts", help=f"minibatch trainer only (default {SAMPLING['fanouts']})")
    a.add_argument("--batch-size", type=int, help=f"minibatch trainer only (default {SAMPLING['batch_size']})")
    for q in (t, a):
        q.add_argument("--out", default=str(HERE / "results"), help="results directory")
    args = p.parse_args(argv)
    if not (Path(args.dataset) / "meta.json").is_file():
        p.error(f"{args.dataset}: not a prepared gnnsys dataset (no meta.json)")
    if args.command == "timing":
        args.configs = args.configs.split(",")
        unknown = [c for c in args.configs if c not in CONFIGS]
        if unknown:
            p.error(f"--configs: unknown {unknown}; choose from {list(CONFIGS)}")
        if "dgl" in args.configs and not SYSTEMS["dgl"][0].exists():
            p.error(f"--configs: dgl needs {SYSTEMS['dgl'][0]}; run benchmarks/setup_peers.sh dgl first")
    elif args.trainer == "fullgraph":
        given = [f"--{k.replace('_', '-')}" for k in SAMPLING if getattr(args, k) is not None]
        if given:
            p.error(f"{given[0]}: samples minibatches; the fullgraph trainer trains on the whole graph")
    else:
        for k, default in SAMPLING.items():
            setattr(args, k, default if getattr(args, k) is None else getattr(args, k))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.command == "timing":
        result = timing(args)
        print(json.dumps({"summary": result["summary"], "ratios_gnnsys_over_dgl": result["ratios_gnnsys_over_dgl"]}))
    else:
        document = accuracy(args)
        print(json.dumps({k: document[k] for k in ("precision", "logger", "runs", "references", "epoch_s")}))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        print(json.dumps(child_gnnsys(sys.argv[2:])), flush=True)
    else:
        sys.exit(main())
