"""Mixed-precision benchmark: epoch time, accuracy and the GEMM roofline.

Configurations, each run in its own process, interleaved (rep 1 of each, rep 2
of each, ...) so that load on a shared machine falls on all alike: gnnsys
fp32; gnnsys bf16-mixed and gnnsys auto (the default precision) with fp32
stored features; the same two with bf16 stored features (--bf16-dataset, the
same graph prepared with `--dtype bfloat16`); each peer of --peers (DGL 2.1.0
and PyG, in the environments of benchmarks/setup_peers.sh) in fp32 with the
same model, and DGL with its whole run under `torch.autocast("cpu",
torch.bfloat16)` (a configuration that fails is recorded with its error; not
the DGL autocast run under --isa). GraphSAGE with bench_minibatch.py's
defaults (3x256, 15/10/5, batch 1024); the timed figure is the training epoch
(time_s, and compute_s of its breakdown), median over --repeats runs of
--epochs epochs (the first epoch of a run left out when it has more than one).
Each gnnsys run records the precision its request resolved to on this machine
(gnnsys.runtime.precision).

The machine: `machine` is gnnsys's machine record taken in a child process
(the CPU by gnnsys.runtime.cpu_features: model, flags, torch's capability, whether
bf16 GEMMs are native). `--isa avx2` emulates a CPU with AVX2 only on a newer
one: every child runs with ATEN_CPU_CAPABILITY=avx2 (torch's kernels),
ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's, which torch's bf16 matmul uses) and
NUMBA_CPU_NAME=haswell (gnnsys's numba kernels), and the results file is
named ..._avx2; the GEMM rates show whether the emulation reproduces the
bf16 cliff of such CPUs.

Roofline: the dense FLOP of one epoch counted from the sampled blocks of
gnnsys's epoch 0 (helpers.sage_layer_counts: per SAGE layer with n destination
rows, in -> out, two GEMMs forward, 4 n in out; weight gradients the same;
input gradients the same again except in the first layer), applied to
every configuration (DGL samples blocks of the same sizes in distribution);
the GEMM rate of this machine at 2 threads, fp32 and bf16 (a 50000x256 by
256x256 matmul, median of 5), measured in a fresh process before the first
and after the last run; the floor is FLOP / rate and each configuration
reports compute_s / floor (benchmarks/bench_roofline.py has it per layer).

Accuracy: --acc-seeds runs of --acc-epochs epochs each for the gnnsys
precisions of --acc-precisions (fp32 stored features), test accuracy after the
last epoch (exact layer-wise inference), mean and spread over seeds; with
--acc-reference, each mean is compared with the same precision's in an
earlier results file (the same seeds and epochs).

Every run records the 1-minute load average before and after; a run where
either is above --load-flag per core is flagged `loaded`, and the summary
gives the medians of all runs and of the quiet ones. Writes
benchmarks/results/precision_<dataset>.json and .png (atomically, after every
run), targets met or missed included.

    gnnsys prepare synthetic --like ogbn-arxiv --scale 1.0 --to-undirected --dtype bfloat16 \\
        --out /work/bench-data/arxiv-1.0-bf16
    python benchmarks/bench_precision.py /work/bench-data/arxiv-1.0 \\
        --bf16-dataset /work/bench-data/arxiv-1.0-bf16 --repeats 3 --epochs 2 --acc-epochs 10 --acc-seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from helpers import SYSTEMS, epoch_flags, median_of, sage_layer_counts, warm
from plotting import can_plot, save_figure

HERE = Path(__file__).resolve().parent
GEMM = (50000, 256, 256)
TARGETS = {
    "bf16_vs_gnnsys_fp32": 1.8,
    "bf16_vs_dgl_fp32": 3.5,
    "fp32_vs_dgl_fp32": 2.5,
    "auto_vs_dgl_fp32": 5.0,
    "accuracy_points": 0.5,
    "accuracy_vs_reference": 0.005,
    "fp32_over_floor": 1.3,
    "bf16_over_fp32_epoch": 1.05,
    "auto_over_fp32_epoch": 1.05,
}
PEERS = ("dgl", "pyg")
EMULATE = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "NUMBA_CPU_NAME": "haswell"}}
ACC_PRECISIONS = ("32", "bf16-mixed", "auto")


# -- children (each run is a fresh process; DGL's runs use the DGL environment) -------------
def child_gemm() -> dict:
    """GFLOP/s of a GEMM at 2 threads, fp32 and bf16 (median of 5 after a warm-up), by the
    faster of gnnsys's `cpu_features.products` (torch's matmul, and `linear`, which runs fp32
    products on oneDNN), with freed memory kept in the process as training keeps it (else
    each product's output is new pages, and their first touch halved the fp32 rate here)."""
    import torch

    from gnnsys.runtime.allocator import retain_freed_memory
    from gnnsys.runtime.cpu_features import products

    retain_freed_memory()
    torch.set_num_threads(2)
    m, k, n = GEMM
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        fastest = min(median_seconds(product) for product in products(a, b))
        rates[name] = 2 * m * k * n / fastest / 1e9
    return rates


def median_seconds(fn, repeats: int = 5) -> float:
    """The median wall time of `repeats` calls of `fn` after a warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child_kernels(dataset: str, bf16_dataset: str | None) -> dict:
    """Milliseconds (median of 5 after a warm-up) of the CPU kernels whose speed
    depends on a dtype, at a first-layer batch's size (100k source rows, 50k
    destinations, 10 entries each, 128 features): gnnsys's aggregation kernel
    in fp32 and bf16 and torch.sparse.mm in fp32 (what "32" aggregates with);
    the feature gather of each stored dtype, and the widening copy to fp32
    that the loader makes of bf16 or fp16 rows."""
    import torch

    import gnnsys
    from gnnsys.models.aggregation import Adjacency, aggregate

    n_src, n_dst, degree, dim = 100_000, 50_000, 10, 128
    gen = torch.Generator().manual_seed(0)
    adj = Adjacency.mean(
        torch.arange(0, n_dst * degree + 1, degree), torch.randint(0, n_src, (n_dst * degree,), generator=gen), n_src
    )
    x = torch.randn(n_src, dim, generator=gen)

    def ms(fn):
        return median_seconds(fn) * 1e3

    out = {
        "aggregate_fp32": ms(lambda: aggregate(adj, x, torch.float32)),
        "aggregate_bf16": ms(lambda: aggregate(adj, x.bfloat16(), torch.bfloat16)),
        "sparse_mm_fp32": ms(lambda: torch.sparse.mm(adj.csr(torch.float32), x)),
    }
    wide, half = torch.empty(n_src, dim), x.half()
    out["widen_fp16"] = ms(lambda: wide.copy_(half))
    for name, path in (("fp32", dataset), ("bf16", bf16_dataset)):
        if path is None:
            continue
        features = gnnsys.load_dataset(path).features
        ids = torch.randint(0, features.shape[0], (n_src,), generator=gen)
        raw = torch.empty(n_src, features.shape[1], dtype=features.dtype)
        out[f"gather_{name}"] = ms(lambda: features.gather(ids, out=raw))
        if name != "fp32":
            wide = torch.empty(n_src, features.shape[1])
            out[f"widen_{name}"] = ms(lambda: wide.copy_(raw))
    return out


def child_flops(dataset: str, fanouts: list, batch_size: int, hidden: int, seed: int) -> dict:
    """Dense GFLOP of one gnnsys training epoch (epoch 0's blocks) and the block sizes."""
    import gnnsys
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, SamplingOptions

    ds = gnnsys.load_dataset(dataset)
    dims = [ds.num_features] + [hidden] * (len(fanouts) - 1) + [ds.num_classes]
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=fanouts), BatchOptions(batch_size=batch_size, shuffle=True, seed=seed)
    )
    loader.set_epoch(0)
    flop, rows, batches = 0.0, [0] * len(fanouts), 0
    for mb in loader:
        batches += 1
        for i, block in enumerate(mb.blocks):
            rows[i] += block.num_dst
            counts = sage_layer_counts(block.num_dst, block.num_src, block.num_edges, dims[i], dims[i + 1], i > 0, 4, 4)
            flop += sum(sum(d["gemm_flops"].values()) for d in counts.values())
    return {"gflop_per_epoch": flop / 1e9, "batches": batches, "mean_dst_rows_per_layer": [r / batches for r in rows]}


def child_gnnsys(dataset: str, precision: str, epochs: int, seed: int, evaluate: bool, a) -> dict:
    """gnnsys.train GraphSAGE epochs in `precision`; the peers' record format."""
    import gnnsys

    result = gnnsys.train(
        dataset,
        model="sage",
        fanouts=a.fanouts,
        batch_size=a.batch_size,
        hidden=a.hidden,
        epochs=epochs,
        lr=a.lr,
        dropout=0.5,
        seed=seed,
        eval_every=epochs,
        precision=precision,
        progress=False,
    ).to_dict()
    record = {
        "system": "gnnsys",
        "precision": result["config"]["precision"],
        "epochs": [{k: e[k] for k in ("epoch", "time_s", "loss", "breakdown")} for e in result["epochs"]],
    }
    if evaluate:
        record.update(valid=result["epochs"][-1]["valid"], test=result["epochs"][-1]["test"])
    return record


def child_dgl_autocast(peer_argv: list):
    """benchmarks/peers/dgl_epoch.py with its whole run under bf16 autocast (in the DGL environment)."""
    import torch

    sys.path.insert(0, str(HERE / "peers"))
    import dgl_epoch

    sys.argv = [str(HERE / "peers" / "dgl_epoch.py"), *peer_argv]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dgl_epoch.main()


def child_main(argv: list) -> int:
    kind = argv[0]
    if kind == "dgl-autocast":
        child_dgl_autocast(argv[1:])
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("dataset", nargs="?")
    p.add_argument("--precision", default="32")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval", action="store_true")
    p.add_argument("--bf16-dataset")
    add_model_arguments(p)
    a = p.parse_args(argv[1:])
    a.fanouts = [int(f) for f in a.fanouts.split(",")]
    if kind == "gemm":
        record = child_gemm()
    elif kind == "kernels":
        record = child_kernels(a.dataset, a.bf16_dataset)
    elif kind == "machine":
        from gnnsys.training.result import machine_info

        record = machine_info("cpu")
    elif kind == "flops":
        record = child_flops(a.dataset, a.fanouts, a.batch_size, a.hidden, a.seed)
    else:
        record = child_gnnsys(a.dataset, a.precision, a.epochs, a.seed, a.eval, a)
    print(json.dumps(record), flush=True)
    return 0


# -- the driver ---------------------------------------------------------------------------------
def add_model_arguments(p):
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared gnnsys dataset (fp32 features)")
    p.add_argument("--bf16-dataset", help="the same graph prepared with --dtype bfloat16 (else that config is skipped)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each configuration")
    p.add_argument("--epochs", type=int, default=1, help="training epochs per timed run")
    p.add_argument("--acc-epochs", type=int, default=10, help="epochs of each accuracy run (0: no accuracy runs)")
    p.add_argument("--acc-seeds", type=int, default=3, help="accuracy runs (seeds 0..N-1) per precision")
    p.add_argument(
        "--peers",
        default="dgl,pyg",
        help="peers timed beside gnnsys, fp32 with the same model (DGL also under bf16 autocast); '' for none",
    )
    p.add_argument(
        "--acc-precisions",
        default=",".join(ACC_PRECISIONS),
        help="gnnsys precisions of the accuracy runs (the first is the one the others are compared with)",
    )
    p.add_argument(
        "--acc-reference",
        help="an earlier results JSON of this benchmark: each precision's mean test accuracy is compared with it",
    )
    p.add_argument("--isa", choices=list(EMULATE), help="emulate a CPU with this ISA only (see the docstring)")
    p.add_argument("--load-flag", type=float, default=0.5, help="flag runs above this load average per core")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    p.add_argument("--out", default=str(HERE / "results"), help="results directory")
    add_model_arguments(p)
    args = p.parse_args(argv)
    for d in filter(None, (args.dataset, args.bf16_dataset)):
        if not (Path(d) / "meta.json").is_file():
            p.error(f"{d}: not a prepared gnnsys dataset (no meta.json)")
    args.peers = [s for s in args.peers.split(",") if s]
    for system in args.peers:
        if system not in PEERS:
            p.error(f"--peers: unknown peer {system!r}; choose from {', '.join(PEERS)}")
        if not SYSTEMS[system][0].exists():
            p.error(f"--peers: {system} needs {SYSTEMS[system][0]}; run benchmarks/setup_peers.sh {system} first")
    args.acc_precisions = [s for s in args.acc_precisions.split(",") if s]
    unknown = [s for s in args.acc_precisions if s not in ACC_PRECISIONS]
    if unknown or not args.acc_precisions:
        p.error(f"--acc-precisions: choose from {', '.join(ACC_PRECISIONS)}, got {args.acc_precisions}")
    if args.acc_reference:
        try:
            args.reference_accuracy = json.loads(Path(args.acc_reference).read_text())["accuracy"]
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--acc-reference: {args.acc_reference}: not a results file of this benchmark ({e})")
    return args


def configurations(args) -> dict:
    """{name: command line} of every configuration this machine can run."""
    me = [sys.executable, str(Path(__file__).resolve()), "child"]
    model = epoch_flags(args)
    configs = {
        "gnnsys-fp32": me + ["gnnsys", args.dataset, "--precision", "32", *model],
        "gnnsys-bf16": me + ["gnnsys", args.dataset, "--precision", "bf16-mixed", *model],
        "gnnsys-auto": me + ["gnnsys", args.dataset, "--precision", "auto", *model],
    }
    if args.bf16_dataset:
        configs["gnnsys-bf16-stored"] = me + ["gnnsys", args.bf16_dataset, "--precision", "bf16-mixed", *model]
        configs["gnnsys-auto-stored"] = me + ["gnnsys", args.bf16_dataset, "--precision", "auto", *model]
    peer = [str(Path(args.dataset).resolve()), *model]
    for system in args.peers:
        python, script = SYSTEMS[system]
        configs[f"{system}-fp32"] = [str(python), str(script), *peer]
        if system == "dgl" and not args.isa:  # emulating AVX2, a bf16 GEMM runs some 30x slower than fp32
            configs["dgl-bf16"] = [str(python), str(Path(__file__).resolve()), "child", "dgl-autocast", *peer]
    return configs


def run(cmd: list, args, seed: int | None = None) -> dict:
    """One child process: its JSON record with the load average around it, or an error record."""
    if seed is not None:
        cmd = cmd + ["--seed", str(seed)]
    cores = os.cpu_count() or 1
    before = os.getloadavg()
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            env={**os.environ, "PYTHONPATH": str(HERE), **EMULATE.get(args.isa, {})},
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            record = {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        else:
            record = json.loads(lines[-1])
    except subprocess.TimeoutExpired:
        record = {"error": f"timed out after {args.timeout:.0f} s"}
    after = os.getloadavg()
    record.update(
        process_wall_s=time.perf_counter() - start,
        loadavg_before=before,
        loadavg_after=after,
        loaded=max(before[0], after[0]) / cores > args.load_flag,
    )
    return record


def summarize(name: str, runs: list, gflop: float | None, rates: dict) -> dict:
    """Medians of one configuration's timed runs (all, and quiet ones only), the
    precision gnnsys resolved it to, its roofline line (at the GEMM rate of that precision)."""
    ok = [r for r in runs if "error" not in r]
    out = {
        "runs_ok": len(ok),
        "runs_failed": len(runs) - len(ok),
        "runs_loaded": sum(r["loaded"] for r in ok),
        "precision": sorted({r["precision"] for r in ok if "precision" in r}),
    }
    rate = rates["bf16" if out["precision"] == ["bf16-mixed"] or (not out["precision"] and "bf16" in name) else "fp32"]
    for label, chosen in (("", ok), ("quiet_", [r for r in ok if not r["loaded"]])):
        epochs = [e for r in chosen for e in warm(r.get("epochs", []))]
        out[label + "epoch_s"] = median_of([e["time_s"] for e in epochs])
        out[label + "compute_s"] = median_of([e["breakdown"].get("compute_s") for e in epochs])
    if gflop and rate and out["compute_s"]:
        out["floor_s"] = gflop / rate
        out["compute_over_floor"] = out["compute_s"] / out["floor_s"]
    return out


def accuracy(runs: list) -> dict:
    """Mean, spread and values of the test accuracy over the accuracy runs."""
    tests = [r["test"] for r in runs if "test" in r]
    return {
        "test_mean": statistics.mean(tests) if tests else None,
        "test_stdev": statistics.stdev(tests) if len(tests) > 1 else None,
        "tests": tests,
    }


def targets(summary: dict, acc: dict, reference: dict | None = None) -> dict:
    """Each target with its measured figure and met/missed (None: not measured).
    `reference`: an earlier run's accuracy per precision (--acc-reference)."""

    def speed(a, b):
        return (
            summary[b]["epoch_s"] / summary[a]["epoch_s"]
            if a in summary and b in summary and summary[a]["epoch_s"] and summary[b]["epoch_s"]
            else None
        )

    def computes_bf16(name):  # else it ran fp32 GEMMs: no bf16-native CPU
        return summary.get(name, {}).get("precision") == ["bf16-mixed"]

    figures = {
        "bf16_vs_gnnsys_fp32": speed("gnnsys-bf16", "gnnsys-fp32") if computes_bf16("gnnsys-bf16") else None,
        "bf16_vs_dgl_fp32": speed("gnnsys-bf16", "dgl-fp32") if computes_bf16("gnnsys-bf16") else None,
        "fp32_vs_dgl_fp32": speed("gnnsys-fp32", "dgl-fp32"),
        "auto_vs_dgl_fp32": speed("gnnsys-auto", "dgl-fp32") if computes_bf16("gnnsys-auto") else None,
        "fp32_over_floor": summary.get("gnnsys-fp32", {}).get("compute_over_floor"),
        "bf16_over_fp32_epoch": speed("gnnsys-fp32", "gnnsys-bf16"),
        "auto_over_fp32_epoch": speed("gnnsys-fp32", "gnnsys-auto"),
    }
    means = {p: a["test_mean"] for p, a in acc.items() if a["test_mean"] is not None}
    first = next(iter(acc), None)
    others = [abs(m - means[first]) for p, m in means.items() if p != first] if first in means else []
    figures["accuracy_points"] = max(others) * 100 if others else None
    shifts = [
        abs(m - reference[p]["test_mean"]) for p, m in means.items() if (reference or {}).get(p, {}).get("test_mean")
    ]
    figures["accuracy_vs_reference"] = max(shifts) if shifts else None
    out = {}
    for name, figure in figures.items():
        higher_is_better = "_vs_" in name and not name.startswith("accuracy")
        met = None if figure is None else (figure >= TARGETS[name] if higher_is_better else figure <= TARGETS[name])
        out[name] = {"target": TARGETS[name], "measured": figure, "met": met}
    return out


def plot(result: dict, path: Path):
    """Epoch time (median, with the GEMM floor) per configuration and accuracy per precision, as a PNG."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, s in result["summary"].items() if s["epoch_s"]]
    acc = result["accuracy"]
    precisions = [p for p in acc if acc[p]["test_mean"] is not None]
    widths = [w for w, shown in ((3, names), (1, precisions)) if shown]
    if not widths:
        return
    fig, axes = plt.subplots(1, len(widths), figsize=(3 + 2 * sum(widths), 4), gridspec_kw={"width_ratios": widths})
    axes = list(axes) if len(widths) > 1 else [axes]
    if names:
        left = axes.pop(0)
        left.bar(names, [result["summary"][n]["epoch_s"] for n in names], color="tab:blue", label="epoch (median)")
        floors = [n for n in names if result["summary"][n].get("floor_s")]
        left.scatter(
            floors,
            [result["summary"][n]["floor_s"] for n in floors],
            color="black",
            marker="_",
            s=600,
            label="GEMM floor",
        )
        left.set_ylabel("seconds per epoch")
        left.set_title(f"{result['dataset']}: epoch time")
        left.legend()
        left.tick_params(axis="x", rotation=20)
    if precisions:
        right = axes.pop(0)
        right.bar(
            precisions,
            [100 * acc[p]["test_mean"] for p in precisions],
            yerr=[100 * (acc[p]["test_stdev"] or 0) for p in precisions],
            color="tab:green",
        )
        right.set_ylabel("test accuracy (%)")
        right.set_title(f"after {result['config']['acc_epochs']} epochs")
    save_figure(fig, path)


def main(argv=None) -> int:
    args = parse_args(argv)
    from gnnsys.atomic import atomic_write_bytes

    meta = json.loads((Path(args.dataset) / "meta.json").read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"precision_{Path(args.dataset).resolve().name}" + (f"_{args.isa}" if args.isa else "")
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    configs = configurations(args)
    model = ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden)]
    me = [sys.executable, str(Path(__file__).resolve()), "child"]
    result = {
        "benchmark": "precision",
        "dataset": meta["name"],
        "config": vars(args),
        "cpus": os.cpu_count(),
        "emulated_isa": EMULATE.get(args.isa),
        "machine": run(me + ["machine"], args),
        "gemm": [run(me + ["gemm"], args)],
        "configurations": list(configs),
        "kernels_ms": run(
            me + ["kernels", args.dataset, *(["--bf16-dataset", args.bf16_dataset] if args.bf16_dataset else [])], args
        ),
        "runs": {name: [] for name in configs},
        "accuracy_runs": {p: [] for p in args.acc_precisions},
    }

    def save():
        gemm = [g for g in result["gemm"] if "error" not in g]
        rates = {p: median_of([g[p] for g in gemm]) for p in ("fp32", "bf16")}
        gflop = result.get("flops", {}).get("gflop_per_epoch")
        result["gemm_gflops"] = rates
        result["summary"] = {n: summarize(n, r, gflop, rates) for n, r in result["runs"].items()}
        result["accuracy"] = {p: accuracy(r) for p, r in result["accuracy_runs"].items()}
        result["targets"] = targets(result["summary"], result["accuracy"], getattr(args, "reference_accuracy", None))
        atomic_write_bytes(json_path, json.dumps(result, indent=1).encode())
        if can_plot(png_path):
            plot(result, png_path)

    result["flops"] = run(me + ["flops", args.dataset, *model], args)
    for rep in range(args.repeats):
        for name, cmd in configs.items():
            record = run(cmd, args, seed=rep)
            result["runs"][name].append(dict(record, rep=rep))
            print(
                f"{name} rep {rep}: "
                + (
                    record.get("error")
                    or f"{[round(e['time_s'], 2) for e in record.get('epochs', [])]} s"
                    f"{' (loaded)' if record['loaded'] else ''}"
                ),
                flush=True,
            )
            save()
    for seed in range(args.acc_seeds if args.acc_epochs else 0):
        for precision in args.acc_precisions:
            cmd = me + [
                "gnnsys",
                args.dataset,
                "--precision",
                precision,
                "--lr",
                str(args.lr),
                *model,
                "--epochs",
                str(args.acc_epochs),
                "--eval",
            ]
            record = run(cmd, args, seed=seed)
            result["accuracy_runs"][precision].append(dict(record, seed=seed))
            print(f"accuracy {precision} seed {seed}: {record.get('error') or record.get('test')}", flush=True)
            save()
    result["gemm"].append(run(me + ["gemm"], args))
    save()
    print(
        json.dumps(
            {"summary": result["summary"], "accuracy": result["accuracy"], "targets": result["targets"]}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[2:]) if sys.argv[1:2] == ["child"] else main())
