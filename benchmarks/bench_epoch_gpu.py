"""Epoch time of GraphSAGE 3 x 256 (fanouts 15/10/5, batch 1024) on a GPU,
per feature placement and sampler (needs a CUDA GPU).

Graphs: synthetic products-shaped (--products-scale, default 0.25: 612K
nodes, 15M edges) and, when asked for, papers100M-shaped (--papers-scale,
default 0.25: 28M nodes, 404M edges, 14 GB of features), prepared under
--root with `gnnsys prepare synthetic` when missing. Cases: features gpu
(resident) | pinned (zero-copy) | cpu-gather, times sampler cpu | gpu. Each
case trains --epochs epochs (no evaluation); the median epoch time of the
epochs after the first is reported, with ratios to gpu-resident + gpu
sampling of the same run (`gnnsys.train`'s `features` and `sampler`
options); a case that fails is recorded with its error and the exit status
is 1. The defaults (products x0.25, 3 epochs) fit the few minutes
benchmarks/gpu_check.sh gives it. Writes benchmarks/results/
bench_epoch_gpu.json and .png (no .png with --no-plot or without
matplotlib). Results of its run on an NVIDIA H200 (bf16-mixed, the default precision
there): benchmarks/results/gpu_check_h200/.

    python benchmarks/bench_epoch_gpu.py [--graph products|papers] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from plotting import can_plot

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = {"products": "ogbn-products", "papers": "ogbn-papers100M"}
FEATURES = ("gpu", "pinned", "cpu-gather")
SAMPLERS = ("gpu", "cpu")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", choices=list(GRAPHS), action="append", help="graph shape (repeatable; default products)")
    p.add_argument("--root", type=Path, default=RESULTS.parent / ".cache" / "data", help="where datasets are prepared")
    p.add_argument("--products-scale", type=float, default=0.25, help="scale of the products-shaped graph")
    p.add_argument("--papers-scale", type=float, default=0.25, help="scale of the papers100M-shaped graph")
    p.add_argument("--epochs", type=int, default=3, help="epochs per case (>= 2: the first is dropped)")
    p.add_argument("--features", default=",".join(FEATURES), help="placements to run")
    p.add_argument("--sampler", default=",".join(SAMPLERS), help="samplers to run")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_epoch_gpu.json")
    p.add_argument("--no-plot", action="store_true", help="write the JSON only")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is dropped)")
    return args


def prepared(graph: str, root: Path, scale: float) -> Path:
    """The dataset directory of `graph`, prepared now if missing."""
    out = root / f"{graph}-{scale}"
    if not (out / "meta.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gnnsys",
                "prepare",
                "synthetic",
                "--like",
                GRAPHS[graph],
                "--scale",
                str(scale),
                "--out",
                str(out),
            ],
            check=True,
        )
    return out


def bench_case(path: Path, features: str, sampler: str, epochs: int) -> dict:
    """Median epoch time (first epoch dropped) of one placement x sampler, or its error."""
    from gnnsys import train

    try:
        result = train(
            path,
            model="sage",
            fanouts=(15, 10, 5),
            batch_size=1024,
            hidden=256,
            epochs=epochs,
            device="cuda",
            eval_every=epochs + 1,
            features=features,
            sampler=sampler,
            progress=False,
        )
    except Exception as e:  # noqa: BLE001 -- recorded; the other cases still run
        return {"features": features, "sampler": sampler, "epoch_s": None, "error": f"{type(e).__name__}: {e}"}
    times = [e["time_s"] for e in result.epochs[1:]]
    return {
        "features": features,
        "sampler": sampler,
        "epoch_s": statistics.median(times),
        "epoch_times_s": times,
        "breakdown_last": result.epochs[-1]["breakdown"],
        "machine": result.machine,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(report["graphs"])
    fig, axes = plt.subplots(1, len(graphs), figsize=(6 * len(graphs), 4), squeeze=False)
    for ax, graph in zip(axes[0], graphs):
        cases = report["graphs"][graph]["cases"]
        ax.bar([f"{c['features']}\n{c['sampler']} sampler" for c in cases], [c["epoch_s"] or 0 for c in cases])
        ax.set(ylabel="epoch time (s)", title=f"{graph}-shaped, SAGE 3x256, 15/10/5, batch 1024")
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "bench_epoch_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured", file=sys.stderr
        )
        return 2
    from gnnsys.atomic import atomic_write_bytes

    report = {
        "benchmark": "bench_epoch_gpu",
        "config": vars(args) | {"root": str(args.root), "out": str(args.out)},
        "graphs": {},
    }
    for graph in args.graph or ["products"]:
        path = prepared(graph, args.root, args.products_scale if graph == "products" else args.papers_scale)
        cases = []
        report["graphs"][graph] = {"path": str(path), "cases": cases}
        for f in args.features.split(","):
            for s in args.sampler.split(","):
                c = bench_case(path, f, s, args.epochs)
                cases.append(c)
                print(
                    f"{graph}: features {c['features']:10s} sampler {c['sampler']}: "
                    + (f"{c['epoch_s']:.2f} s/epoch" if c["epoch_s"] is not None else c["error"]),
                    flush=True,
                )
                report["machine"] = report.get("machine") or c.get("machine")
                atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())  # what a killed run leaves
        base = next((c["epoch_s"] for c in cases if (c["features"], c["sampler"]) == ("gpu", "gpu")), None)
        for c in cases:
            ok = c["epoch_s"] is not None
            c["vs_gpu_resident_gpu_sampler"] = c["epoch_s"] / base if ok and base else None
    atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())
    print(f"wrote {args.out}")
    if not args.no_plot and can_plot(args.out.with_suffix(".png")):
        plot(report, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    failed = [c for g in report["graphs"].values() for c in g["cases"] if c["epoch_s"] is None]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
