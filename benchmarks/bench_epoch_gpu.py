"""Epoch time of GraphSAGE 3 x 256 (fanouts 15/10/5, batch 1024) on a GPU,
per feature placement and sampler (needs a CUDA GPU).

Graphs: synthetic products-shaped (scale 1.0) and papers100M-shaped
(--papers-scale, default 0.25: 28M nodes, 404M edges, 14 GB of features),
prepared under --root with `gnnsys prepare synthetic` when missing.
Cases: features gpu (resident) | pinned (zero-copy) | cpu-gather, times
sampler cpu | gpu. Each case trains --epochs epochs (no evaluation); the
median epoch time of the epochs after the first is reported, with ratios to
gpu-resident + gpu sampling of the same run (`gnnsys.train`'s `features` and
`sampler` options). Writes benchmarks/results/bench_epoch_gpu.json and .png.

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

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = {"products": "ogbn-products", "papers": "ogbn-papers100M"}
FEATURES = ("gpu", "pinned", "cpu-gather")
SAMPLERS = ("gpu", "cpu")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", choices=list(GRAPHS), action="append", help="graph shape (repeatable; default both)")
    p.add_argument("--root", type=Path, default=Path("/work/bench-data"), help="where datasets are prepared")
    p.add_argument("--papers-scale", type=float, default=0.25, help="scale of the papers100M-shaped graph")
    p.add_argument("--epochs", type=int, default=4, help="epochs per case (>= 3 after the first is dropped)")
    p.add_argument("--features", default=",".join(FEATURES), help="placements to run")
    p.add_argument("--sampler", default=",".join(SAMPLERS), help="samplers to run")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_epoch_gpu.json")
    return p.parse_args(argv)


def prepared(graph: str, root: Path, scale: float) -> Path:
    """The dataset directory of `graph`, prepared now if missing."""
    out = root / f"{graph}-{scale}"
    if not (out / "meta.json").is_file():
        subprocess.run([sys.executable, "-m", "gnnsys", "prepare", "synthetic", "--like", GRAPHS[graph],
                        "--scale", str(scale), "--out", str(out)], check=True)
    return out


def bench_case(path: Path, features: str, sampler: str, epochs: int) -> dict:
    """Median epoch time (first epoch dropped) of one placement x sampler."""
    from gnnsys import train

    result = train(path, model="sage", fanouts=(15, 10, 5), batch_size=1024, hidden=256, epochs=epochs,
                   device="cuda", eval_every=epochs + 1, features=features, sampler=sampler, progress=False)
    times = [e["time_s"] for e in result.epochs[1:]]
    return {"features": features, "sampler": sampler, "epoch_s": statistics.median(times), "epoch_times_s": times,
            "breakdown_last": result.epochs[-1]["breakdown"], "machine": result.machine}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(report["graphs"])
    fig, axes = plt.subplots(1, len(graphs), figsize=(6 * len(graphs), 4), squeeze=False)
    for ax, graph in zip(axes[0], graphs):
        cases = report["graphs"][graph]["cases"]
        ax.bar([f"{c['features']}\n{c['sampler']} sampler" for c in cases], [c["epoch_s"] for c in cases])
        ax.set(ylabel="epoch time (s)", title=f"{graph}-shaped, SAGE 3x256, 15/10/5, batch 1024")
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_epoch_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured",
              file=sys.stderr)
        return 2
    from gnnsys import train

    from gnnsys.datasets.atomic import atomic_write_bytes

    report = {"benchmark": "bench_epoch_gpu", "config": vars(args) | {"root": str(args.root), "out": str(args.out)},
              "graphs": {}}
    for graph in args.graph or list(GRAPHS):
        path = prepared(graph, args.root, 1.0 if graph == "products" else args.papers_scale)
        cases = [bench_case(path, f, s, args.epochs)
                 for f in args.features.split(",") for s in args.sampler.split(",")]
        base = next((c["epoch_s"] for c in cases if (c["features"], c["sampler"]) == ("gpu", "gpu")), None)
        for c in cases:
            c["vs_gpu_resident_gpu_sampler"] = None if base is None else c["epoch_s"] / base
            print(f"{graph}: features {c['features']:10s} sampler {c['sampler']}: {c['epoch_s']:.2f} s/epoch",
                  flush=True)
        report["graphs"][graph] = {"path": str(path), "cases": cases}
        report["machine"] = cases[0]["machine"]
    atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
