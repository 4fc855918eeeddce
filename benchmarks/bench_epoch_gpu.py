"""Epoch time of GraphSAGE 3 x 256 (fanouts 15/10/5, batch 1024) on a GPU, per
feature placement x sampler x precision (needs a CUDA GPU).

Graphs: synthetic products-shaped (--products-scale, default 0.25: 612K nodes,
15M edges, 100 x float32 features in 512-byte rows) and, with --graph papers,
papers100M-shaped (--papers-scale, default 0.03: 3.3M nodes, 48M edges,
128 x float32 features, 1.7 GB), prepared under --root with `gnnsys prepare
synthetic` when missing, all graphs at once; --prepare-only prepares them
and exits (no GPU needed; there --products-scale may list several scales,
each prepared). Cases: each sampler (--sampler: gpu, gpu-pinned, cpu) x
each placement (--features: gpu resident, pinned zero-copy, cpu-gather,
packed: the SSD tier reading each batch's rows packed in one sequential
segment, or ssd: its O_DIRECT random reads; both under a cache of
--cache-frac of the rows, default 0.1) x each precision (--precision: 32, bf16-mixed,
16-mixed, auto; default 32,bf16-mixed), in that order, except that the
CPU-gather baseline's cases come after all the others (precision, then
sampler), so a run cut short has measured the placements it compares
first. Each case trains --epochs epochs with `gnnsys.train` and evaluates
once after the last (not timed), by --eval: layerwise (default; exact,
streaming over every node) or sampled (the training fanouts over the
validation and test nodes, far cheaper where those are few, as on the
papers shape); the median epoch time of the epochs after the first is
reported. Every case records the precision it trained in (and the one
asked for), the GPU, CUDA, torch and Triton (benchmarks/gpu_facts.py), its
last epoch's time breakdown and tier counters, its seconds in all and
outside its epochs (loading, placing the features, evaluating), its ratio
to the GPU-resident case of the same graph, sampler and precision
(vs_gpu_resident) and, for packed and ssd, to the faster of pinned and cpu-gather
with the same sampler and precision (vs_in_memory). The JSON is rewritten
after each case, so a run cut short keeps the cases it finished; a case
that fails is recorded with its error and the exit status is 1; with
--time-budget SECONDS, a case that would end past it (judged by the
longest case so far with its sampler, the first case's compilations left
out) is recorded as not run, the run ending in time.
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
FEATURES = ("gpu", "pinned", "cpu-gather", "packed", "ssd")
ON_SSD = ("packed", "ssd")  # the SSD tier: packed batches read sequentially, or rows read at random
IN_MEMORY = ("pinned", "cpu-gather")  # host memory: what the SSD tier is compared with
SAMPLERS = ("gpu", "gpu-pinned", "cpu")
PRECISIONS = ("32", "bf16-mixed", "16-mixed", "auto")
EVALS = ("layerwise", "sampled")
BASELINE = "cpu-gather"  # the placement the others are compared with, run after them
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


def scale(flag: str, value: float) -> float:
    """`value`, a graph's scale, when in (0, 1] (else one line, exit 2)."""
    if not 0 < value <= 1:
        fail(f"{flag} must be in (0, 1], got {value:g}")
    return value


def scales(flag: str, text: str) -> list[float]:
    """The distinct comma-separated scales of `flag`, each in (0, 1] (else one line, exit 2)."""
    values = []
    for v in text.split(","):
        try:
            values.append(scale(flag, float(v)))
        except ValueError:
            fail(f"{flag}: {v!r} is not a number")
    return list(dict.fromkeys(values))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: fail(message)  # type: ignore[method-assign]
    p.add_argument("--graph", choices=list(GRAPHS), action="append", help="graph shape (repeatable; default products)")
    p.add_argument("--root", type=Path, default=RESULTS.parent / ".cache" / "data", help="where datasets are prepared")
    p.add_argument(
        "--products-scale",
        default="0.25",
        help="scale of the products-shaped graph (several, comma-separated, with --prepare-only)",
    )
    p.add_argument("--papers-scale", type=float, default=0.03, help="scale of the papers100M-shaped graph")
    p.add_argument("--epochs", type=int, default=3, help="epochs per case (>= 2: the first is dropped)")
    p.add_argument("--features", default="gpu,pinned,cpu-gather", help=f"placements to run ({', '.join(FEATURES)})")
    p.add_argument("--sampler", default="gpu,cpu", help=f"samplers to run ({', '.join(SAMPLERS)})")
    p.add_argument("--precision", default="32,bf16-mixed", help=f"precisions to run ({', '.join(PRECISIONS)})")
    p.add_argument(
        "--cache-frac", type=float, default=None, help="--features packed or ssd: cache this share of the rows (0.1)"
    )
    p.add_argument("--eval", choices=EVALS, default="layerwise", help="the evaluation after the last epoch (not timed)")
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
    args.products_scales = scales("--products-scale", args.products_scale)
    if len(args.products_scales) > 1 and not args.prepare_only:
        fail(f"--products-scale: one scale to run cases on, got {args.products_scale} (several with --prepare-only)")
    args.products_scale = args.products_scales[0]
    scale("--papers-scale", args.papers_scale)
    if args.time_budget is not None and args.time_budget <= 0:
        fail(f"--time-budget must be > 0 seconds, got {args.time_budget:g}")
    if args.cache_frac is not None and not set(ON_SSD) & set(args.features):
        fail("--cache-frac sizes the SSD tier's cache; add packed or ssd to --features")
    args.cache_frac = 0.1 if args.cache_frac is None else args.cache_frac
    if not 0 < args.cache_frac < 1:
        fail(f"--cache-frac must be in (0, 1), got {args.cache_frac:g}")
    return args


def prepare(args) -> list[tuple[str, Path]]:
    """(graph, dataset directory) for args.graph at each of its scales (--root/GRAPH-SCALE), those
    missing prepared now, in parallel child processes."""
    shapes = [(g, s) for g in args.graph for s in (args.products_scales if g == "products" else [args.papers_scale])]
    paths = [(graph, args.root / f"{graph}-{scale:g}") for graph, scale in shapes]
    children = {}
    for (graph, scale), (_, out) in zip(shapes, paths):
        if (out / "meta.json").is_file():
            continue
        args.root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "gnnsys", "prepare", "synthetic", "--like", GRAPHS[graph], "--scale"]
        command += [f"{scale:g}", "--overwrite", "--no-progress", "--out", str(out)]
        print(f"preparing {graph}-shaped x{scale:g} in {out}", flush=True)
        children[out.name] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = {name: child.communicate()[1].strip() for name, child in children.items()}  # waits for each
    failed = {name: error for name, error in ended.items() if children[name].returncode != 0}
    for name, error in failed.items():
        print(f"bench_epoch_gpu: preparing {name} failed: {error[-500:]}", file=sys.stderr)
    if failed:
        sys.exit(1)
    return paths


def plan(args) -> list[dict]:
    """The cases of one graph, in the order they run: sampler x placement x precision, then the
    CPU-gather baseline's by precision x sampler."""
    grid = [(s, f, p) for s in args.sampler for f in args.features for p in args.precision if f != BASELINE]
    if BASELINE in args.features:
        grid += [(s, BASELINE, p) for p in args.precision for s in args.sampler]
    return [{"features": f, "sampler": s, "precision_asked": p} for s, f, p in grid]


def train_options(case: dict, epochs: int, num_nodes: int, cache_frac: float, evaluation: str = "layerwise") -> dict:
    """gnnsys.train's options for `case`: evaluated once after the last epoch, by `evaluation`
    (layerwise or sampled); packed and ssd with a cache of cache_frac of the rows, ssd reading at random
    (no packed batches)."""
    options = MODEL | dict(epochs=epochs, eval_every=epochs, eval=evaluation, device="cuda", progress=False)
    options |= dict(features=case["features"], sampler=case["sampler"], precision=case["precision_asked"])
    if case["features"] in ON_SSD:
        options |= dict(cache_rows=max(1, round(cache_frac * num_nodes)))
    if case["features"] == "ssd":
        options |= dict(scratch_gb=0)
    return options


def bench_case(path: Path, case: dict, options: dict) -> dict:
    """`case` with its median epoch time (first epoch dropped) and what it ran with, or its error."""
    from gnnsys import train

    record = dict(case)
    if "cache_rows" in options:
        record["cache_rows"] = options["cache_rows"]
    started = time.monotonic()
    try:
        result = train(path, **options)
    except Exception as e:  # noqa: BLE001 -- recorded; the other cases still run
        return record | {"precision": None, "epoch_s": None, "error": f"{type(e).__name__}: {e}"}
    took = time.monotonic() - started
    times = [e["time_s"] for e in result.epochs[1:]]
    return record | {
        "first_epoch_s": result.epochs[0]["time_s"],
        "outside_epochs_s": round(took - sum(e["time_s"] for e in result.epochs), 2),  # load, placement, evaluation
        "precision": result.config["precision"],
        "epoch_s": statistics.median(times),
        "epoch_times_s": times,
        "breakdown_last": result.epochs[-1]["breakdown"],
        "tiers_last": result.epochs[-1].get("tiers"),
        "machine": result.machine,
    }


def add_ratios(cases: list) -> None:
    """Each measured case's vs_gpu_resident and, for packed and ssd, vs_in_memory (and which placement that was)."""

    def same(c, d):
        return (c["sampler"], c["precision_asked"]) == (d["sampler"], d["precision_asked"]) and d["epoch_s"]

    for c in cases:
        if c["epoch_s"] is None:
            continue
        base = next((d["epoch_s"] for d in cases if d["features"] == "gpu" and same(c, d)), None)
        c["vs_gpu_resident"] = c["epoch_s"] / base if base else None
        if c["features"] in ON_SSD:
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


def expected_seconds(took: list, sampler: str) -> float:
    """What the next case with `sampler` should take, from `took` ((sampler, seconds) of the cases run, the
    first with the compilations): the longest later case with that sampler, else the longest later case, else
    the first."""
    later = took[1:]
    return max([s for name, s in later if name == sampler] or [s for _, s in later] or [s for _, s in took] or [0.0])


def run_cases(path: Path, args, facts: dict, cases: list, save, began: float) -> None:
    """Each case of plan(args) on the dataset at `path`, appended to `cases` (with `facts`) and saved
    (`save()`) as it ends; with --time-budget, the cases the time left cannot hold are recorded as not run."""
    import gnnsys

    num_nodes = gnnsys.load_dataset(path).num_nodes
    took: list[tuple[str, float]] = []  # (sampler, seconds) of each case run, the first with the compilations
    for case in plan(args):
        started = time.monotonic()
        if args.time_budget and started - began + expected_seconds(took, case["sampler"]) > args.time_budget:
            late = f"not run: it would end past the {args.time_budget:g} s time budget"
            record = case | {"precision": None, "epoch_s": None, "skipped": late}
        else:
            options = train_options(case, args.epochs, num_nodes, args.cache_frac, args.eval)
            record = bench_case(path, case, options)
            took.append((case["sampler"], time.monotonic() - started))
            record["seconds"] = round(took[-1][1], 1)
        cases.append(record | facts)
        add_ratios(cases)
        print(describe(path.name, cases[-1]), flush=True)
        save(record.get("machine"))


def main(argv=None) -> int:
    began = time.monotonic()
    args = parse_args(argv)
    if args.prepare_only:
        for graph, path in prepare(args):
            print(f"{graph}: {path}")
        return 0
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured")
    from gnnsys.atomic import atomic_write_bytes

    facts = gpu_facts()
    config = vars(args) | {"root": str(args.root), "out": str(args.out), "model": MODEL}
    del config["products_scales"]  # one scale when cases run: products_scale
    report = {"benchmark": "bench_epoch_gpu", "config": config, "gpu": facts, "graphs": {}}

    def save(machine=None):  # what a killed run leaves
        report["machine"] = report.get("machine") or machine
        atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())

    for graph, path in prepare(args):
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
