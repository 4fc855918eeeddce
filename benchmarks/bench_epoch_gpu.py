"""Epoch time of GraphSAGE 3 x 256 (fanouts 15/10/5, batch 1024) on a GPU, per
feature placement x sampler x precision (needs a CUDA GPU).

Graphs: synthetic products-shaped (--products-scale, default 0.25: 612K nodes,
15M edges, 100 x float32 features in 512-byte rows) and, with --graph papers,
papers100M-shaped (--papers-scale, default 0.03: 3.3M nodes, 48M edges,
128 x float32 features, 1.7 GB), prepared under --root with `gnnsys prepare
synthetic` when missing, all graphs at once; --prepare-only prepares them
and exits (no GPU needed). Cases, in this order: each sampler (--sampler:
gpu, gpu-pinned, cpu) x each placement (--features: gpu resident, pinned
zero-copy, cpu-gather, or ssd: the SSD tier's O_DIRECT random reads under
a cache of --cache-frac of the rows, default 0.1) x each precision
(--precision: 32, bf16-mixed, 16-mixed, auto; default 32,bf16-mixed). Each
case trains --epochs epochs with `gnnsys.train` and evaluates once after
the last, layer-wise for every placement (not timed); the median epoch time
of the epochs after the first is reported. Every case records the precision
it trained in (and the one asked for), the GPU, CUDA, torch and Triton
(benchmarks/gpu_facts.py), its last epoch's time breakdown and tier
counters, its ratio to the GPU-resident case of the same graph, sampler and
precision (vs_gpu_resident) and, for ssd, to the faster of pinned and
cpu-gather with the same sampler and precision (vs_in_memory). The JSON is
rewritten after each case, so a run cut short keeps the cases it finished;
a case that fails is recorded with its error and the exit status is 1;
with --time-budget SECONDS, a case that would end past it (judged by the
longest case so far) is recorded as not run, the run ending in time.
Writes --out (default benchmarks/results/bench_epoch_gpu.json) and a .png
beside it (none with --no-plot or without matplotlib).

    python benchmarks/bench_epoch_gpu.py [--graph products|papers ...] [--root DIR] [--precision 32,bf16-mixed]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from gpu_facts import gpu_facts
from plotting import can_plot

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = {"products": "ogbn-products", "papers": "ogbn-papers100M"}
FEATURES = ("gpu", "pinned", "cpu-gather", "ssd")
IN_MEMORY = ("pinned", "cpu-gather")  # host memory: what the SSD tier is compared with
SAMPLERS = ("gpu", "gpu-pinned", "cpu")
PRECISIONS = ("32", "bf16-mixed", "16-mixed", "auto")
MODEL = dict(model="sage", fanouts=(15, 10, 5), batch_size=1024, hidden=256)


def fail(message: str):
    """One line on stderr, exit status 2."""
    print(f"bench_epoch_gpu: {message}", file=sys.stderr)
    sys.exit(2)


def choices(flag: str, text: str, allowed: tuple) -> list:
    """The comma-separated values of `flag`, each one of `allowed` (else one line, exit 2)."""
    values = [v for v in text.split(",") if v]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        fail(f"{flag}: {bad[0] if bad else text!r} is not one of {', '.join(allowed)}")
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: fail(message)  # type: ignore[method-assign]
    p.add_argument("--graph", choices=list(GRAPHS), action="append", help="graph shape (repeatable; default products)")
    p.add_argument("--root", type=Path, default=RESULTS.parent / ".cache" / "data", help="where datasets are prepared")
    p.add_argument("--products-scale", type=float, default=0.25, help="scale of the products-shaped graph")
    p.add_argument("--papers-scale", type=float, default=0.03, help="scale of the papers100M-shaped graph")
    p.add_argument("--epochs", type=int, default=3, help="epochs per case (>= 2: the first is dropped)")
    p.add_argument("--features", default="gpu,pinned,cpu-gather", help=f"placements to run ({', '.join(FEATURES)})")
    p.add_argument("--sampler", default="gpu,cpu", help=f"samplers to run ({', '.join(SAMPLERS)})")
    p.add_argument("--precision", default="32,bf16-mixed", help=f"precisions to run ({', '.join(PRECISIONS)})")
    p.add_argument("--cache-frac", type=float, default=None, help="--features ssd: cache this share of the rows (0.1)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds: cases that would end later are not run")
    p.add_argument("--prepare-only", action="store_true", help="prepare the graphs and exit (no GPU needed)")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_epoch_gpu.json")
    p.add_argument("--no-plot", action="store_true", help="write the JSON only")
    args = p.parse_args(argv)
    args.graph = list(dict.fromkeys(args.graph or ["products"]))
    args.features = choices("--features", args.features, FEATURES)
    args.sampler = choices("--sampler", args.sampler, SAMPLERS)
    args.precision = choices("--precision", args.precision, PRECISIONS)
    if args.epochs < 2:
        fail(f"--epochs must be >= 2 (the first is dropped), got {args.epochs}")
    for flag, scale in (("--products-scale", args.products_scale), ("--papers-scale", args.papers_scale)):
        if not 0 < scale <= 1:
            fail(f"{flag} must be in (0, 1], got {scale:g}")
    if args.time_budget is not None and args.time_budget <= 0:
        fail(f"--time-budget must be > 0 seconds, got {args.time_budget:g}")
    if args.cache_frac is not None and "ssd" not in args.features:
        fail("--cache-frac sizes the SSD tier's cache; add ssd to --features")
    args.cache_frac = 0.1 if args.cache_frac is None else args.cache_frac
    if not 0 < args.cache_frac < 1:
        fail(f"--cache-frac must be in (0, 1), got {args.cache_frac:g}")
    return args


def dataset_dir(graph: str, args) -> Path:
    """Where the `graph`-shaped dataset of `args`' scale is (or will be) prepared."""
    return args.root / f"{graph}-{args.products_scale if graph == 'products' else args.papers_scale:g}"


def prepare(args) -> dict:
    """{graph: dataset directory} for args.graph, those missing prepared now, in parallel child processes."""
    paths = {graph: dataset_dir(graph, args) for graph in args.graph}
    children = {}
    for graph, out in paths.items():
        if (out / "meta.json").is_file():
            continue
        args.root.mkdir(parents=True, exist_ok=True)
        scale = args.products_scale if graph == "products" else args.papers_scale
        command = [sys.executable, "-m", "gnnsys", "prepare", "synthetic", "--like", GRAPHS[graph], "--scale"]
        command += [f"{scale:g}", "--overwrite", "--no-progress", "--out", str(out)]
        print(f"preparing {graph}-shaped x{scale:g} in {out}", flush=True)
        children[graph] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = {graph: child.communicate()[1].strip() for graph, child in children.items()}  # waits for each
    failed = {graph: error for graph, error in ended.items() if children[graph].returncode != 0}
    for graph, error in failed.items():
        print(f"bench_epoch_gpu: preparing the {graph}-shaped graph failed: {error[-500:]}", file=sys.stderr)
    if failed:
        sys.exit(1)
    return paths


def plan(args) -> list[dict]:
    """The cases of one graph, in the order they run: sampler x placement x precision."""
    return [
        {"features": f, "sampler": s, "precision_asked": p}
        for s in args.sampler
        for f in args.features
        for p in args.precision
    ]


def train_options(case: dict, epochs: int, num_nodes: int, cache_frac: float) -> dict:
    """gnnsys.train's options for `case`: evaluated once after the last epoch, layer-wise;
    ssd with a cache of cache_frac of the rows and random reads (no packed batches)."""
    options = MODEL | dict(epochs=epochs, eval_every=epochs, eval="layerwise", device="cuda", progress=False)
    options |= dict(features=case["features"], sampler=case["sampler"], precision=case["precision_asked"])
    if case["features"] == "ssd":
        options |= dict(cache_rows=max(1, round(cache_frac * num_nodes)), scratch_gb=0)
    return options


def bench_case(path: Path, case: dict, options: dict) -> dict:
    """`case` with its median epoch time (first epoch dropped) and what it ran with, or its error."""
    from gnnsys import train

    record = dict(case)
    if "cache_rows" in options:
        record["cache_rows"] = options["cache_rows"]
    try:
        result = train(path, **options)
    except Exception as e:  # noqa: BLE001 -- recorded; the other cases still run
        return record | {"precision": None, "epoch_s": None, "error": f"{type(e).__name__}: {e}"}
    times = [e["time_s"] for e in result.epochs[1:]]
    return record | {
        "precision": result.config["precision"],
        "epoch_s": statistics.median(times),
        "epoch_times_s": times,
        "breakdown_last": result.epochs[-1]["breakdown"],
        "tiers_last": result.epochs[-1].get("tiers"),
        "machine": result.machine,
    }


def add_ratios(cases: list) -> None:
    """Each measured case's vs_gpu_resident and, for ssd, vs_in_memory (and which placement that was)."""

    def same(c, d):
        return (c["sampler"], c["precision_asked"]) == (d["sampler"], d["precision_asked"]) and d["epoch_s"]

    for c in cases:
        if c["epoch_s"] is None:
            continue
        base = next((d["epoch_s"] for d in cases if d["features"] == "gpu" and same(c, d)), None)
        c["vs_gpu_resident"] = c["epoch_s"] / base if base else None
        if c["features"] == "ssd":
            memory = [d for d in cases if d["features"] in IN_MEMORY and same(c, d)]
            best = min(memory, key=lambda d: d["epoch_s"], default=None)
            c["vs_in_memory"] = c["epoch_s"] / best["epoch_s"] if best else None
            c["in_memory_features"] = best["features"] if best else None


def describe(graph: str, c: dict) -> str:
    """One line of case `c`'s result."""
    what = f"{graph}: features {c['features']:10s} sampler {c['sampler']:10s} precision {c['precision_asked']:10s}"
    if c["epoch_s"] is None:
        return f"{what}: {c.get('skipped') or c['error']}"
    ratio = c.get("vs_gpu_resident")
    return f"{what}: {c['epoch_s']:.3f} s/epoch" + (f" ({ratio:.2f}x gpu-resident)" if ratio else "")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(report["graphs"])
    fig, axes = plt.subplots(1, len(graphs), figsize=(8 * len(graphs), 4), squeeze=False)
    for ax, graph in zip(axes[0], graphs):
        cases = report["graphs"][graph]["cases"]
        labels = [f"{c['features']}\n{c['sampler']}\n{c['precision'] or c['precision_asked']}" for c in cases]
        ax.bar(labels, [c["epoch_s"] or 0 for c in cases])
        ax.set(
            ylabel="epoch time (s)", title=f"{graph}-shaped, SAGE 3x256, 15/10/5, batch 1024, {report['gpu']['gpu']}"
        )
        ax.tick_params(axis="x", labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_cases(path: Path, args, facts: dict, cases: list, save, began: float) -> None:
    """Each case of plan(args) on the dataset at `path`, appended to `cases` (with `facts`) and saved
    (`save()`) as it ends; with --time-budget, the cases the time left cannot hold are recorded as not run."""
    import gnnsys

    num_nodes = gnnsys.load_dataset(path).num_nodes
    took: list[float] = []  # seconds of each case run, the first with the compilations
    for case in plan(args):
        started = time.monotonic()
        longest = max(took[1:] or took or [0.0])
        if args.time_budget and started - began + longest > args.time_budget:
            late = f"not run: it would end past the {args.time_budget:g} s time budget"
            record = case | {"precision": None, "epoch_s": None, "skipped": late}
        else:
            record = bench_case(path, case, train_options(case, args.epochs, num_nodes, args.cache_frac))
            took.append(time.monotonic() - started)
            record["seconds"] = round(took[-1], 1)
        cases.append(record | facts)
        add_ratios(cases)
        print(describe(path.name, cases[-1]), flush=True)
        save(record.get("machine"))


def main(argv=None) -> int:
    began = time.monotonic()
    args = parse_args(argv)
    if args.prepare_only:
        for graph, path in prepare(args).items():
            print(f"{graph}: {path}")
        return 0
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured")
    from gnnsys.atomic import atomic_write_bytes

    facts = gpu_facts()
    config = vars(args) | {"root": str(args.root), "out": str(args.out), "model": MODEL}
    report = {"benchmark": "bench_epoch_gpu", "config": config, "gpu": facts, "graphs": {}}

    def save(machine=None):  # what a killed run leaves
        report["machine"] = report.get("machine") or machine
        atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())

    for graph, path in prepare(args).items():
        report["graphs"][graph] = {"path": str(path), "cases": []}
        run_cases(path, args, facts, report["graphs"][graph]["cases"], save, began)
    save()
    print(f"wrote {args.out}")
    if not args.no_plot and can_plot(args.out.with_suffix(".png")):
        plot(report, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    cases = [c for g in report["graphs"].values() for c in g["cases"]]
    late = [c for c in cases if "skipped" in c]
    if late:
        print(f"{len(late)} of {len(cases)} cases not run: the {args.time_budget:g} s time budget")
    return 1 if any(c["epoch_s"] is None and "skipped" not in c for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
