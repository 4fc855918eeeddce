"""The headline GPU figures against their targets, from the results folder of
benchmarks/gpu_headline.sh.

    python benchmarks/gpu_figures.py DIR

Reads DIR/epoch_products.json, epoch_papers.json and epoch_ssd.json
(bench_epoch_gpu.py) and pyg_peer_products.json (benchmarks/peers/pyg_epoch.py),
writes DIR/headline_figures.json and prints one line per figure: its value
against its target (met or missed), with the GPU, torch, Triton and precision
it was measured with; a figure whose results are absent, unreadable, failed
or not run (a step cut short) is "not measured". The zero-copy gather against a pinned memcpy is in
DIR/bench_gather_gpu.json, the table of bench_gather_gpu.py itself.

Figures (TARGETS):
- pinned_vs_gpu_resident: an epoch with pinned features read zero-copy over
  one with the features in GPU memory (same graph, sampler and precision);
- ssd_vs_in_memory: an epoch reading the SSD tier under a cache of 10% of the
  rows, packed (features packed) and at random (features ssd), each over the
  faster of pinned and cpu-gather (products shape, same run);
- gnnsys_vs_pyg: gnnsys's fastest fp32 epoch over PyG's (NeighborLoader
  sampling and slicing on the CPU, the same GraphSAGE on the GPU, fp32) on
  the graph the peer ran on (its dataset directory, found among the epoch
  reports' graphs), products shape, same machine and run; PyG's epoch is the
  median of its training epochs after the first (the first alone where only
  one finished: a peer cut short leaves the epochs it finished).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

TARGETS = {"pinned_vs_gpu_resident": 1.15, "ssd_vs_in_memory": 1.5, "gnnsys_vs_pyg": 0.5}  # at most
FACTS = ("gpu", "torch", "triton", "cuda")


def read(path: Path) -> dict | None:
    """The JSON at `path`, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def figure(name: str, value: float | None, case: dict | None, **where) -> dict:
    """One figure: `value` against TARGETS[name], with what `case` ran with."""
    met = None if value is None else value <= TARGETS[name]
    facts = {k: (case or {}).get(k) for k in FACTS}
    return {"figure": name, **where, "value": value, "target_at_most": TARGETS[name], "met": met} | facts


def measured(report: dict | None, graph: str) -> list:
    """The cases of `graph` in a bench_epoch_gpu.py report that measured an epoch."""
    graphs = report.get("graphs") if isinstance(report, dict) else None
    cases = (graphs or {}).get(graph, {}).get("cases", [])
    return [c for c in cases if c.get("epoch_s")]


def measured_on(folder: Path, dataset: str | None) -> list:
    """The measured cases of every epoch_*.json in `folder` that ran on the dataset directory `dataset`."""
    out = []
    for path in sorted(folder.glob("epoch_*.json")) if dataset else []:
        report = read(path)
        for graph, entry in (report.get("graphs") or {}).items() if isinstance(report, dict) else []:
            if os.path.normpath(str(entry.get("path"))) == os.path.normpath(dataset):
                out += measured(report, graph)
    return out


def dataset_name(report: dict | None, graph: str) -> str | None:
    """The name of the dataset directory `graph` ran on in a bench_epoch_gpu.py report (e.g. products-0.25)."""
    path = ((report.get("graphs") or {}).get(graph) or {}).get("path") if isinstance(report, dict) else None
    return os.path.basename(os.path.normpath(path)) if path else None


def epoch_figures(folder: Path) -> list:
    """pinned_vs_gpu_resident per graph, sampler and precision; ssd_vs_in_memory per SSD reader (packed,
    ssd), sampler and precision."""
    out = []
    for graph in ("products", "papers"):
        report = read(folder / f"epoch_{graph}.json")
        pinned = [c for c in measured(report, graph) if c["features"] == "pinned"]
        for c in pinned:
            where = dict(graph=graph, dataset=dataset_name(report, graph), sampler=c["sampler"])
            out.append(figure("pinned_vs_gpu_resident", c.get("vs_gpu_resident"), c, **where, precision=c["precision"]))
        if not pinned:
            out.append(figure("pinned_vs_gpu_resident", None, None, graph=graph))
    report = read(folder / "epoch_ssd.json")
    ssd = [c for c in measured(report, "products") if c["features"] in ("packed", "ssd")]
    for c in ssd:
        where = dict(graph="products", dataset=dataset_name(report, "products"), features=c["features"])
        where |= dict(sampler=c["sampler"])
        where |= dict(precision=c["precision"], in_memory_features=c.get("in_memory_features"))
        out.append(figure("ssd_vs_in_memory", c.get("vs_in_memory"), c, **where))
    if not ssd:
        out.append(figure("ssd_vs_in_memory", None, None, graph="products"))
    return out


def peer_figure(folder: Path) -> dict:
    """gnnsys_vs_pyg: gnnsys's fastest fp32 epoch on the peer's graph over PyG's epoch (median after the first)."""
    peer = read(folder / "pyg_peer_products.json")
    peer = peer if isinstance(peer, dict) else {}
    dataset = (peer.get("config") or {}).get("dataset")
    ours = [c for c in measured_on(folder, dataset) if c["precision"] == "32"]
    times = [e["time_s"] for e in peer.get("epochs", []) if e.get("time_s")]
    timed = times[1:] or times
    best = min(ours, key=lambda c: c["epoch_s"], default=None)
    where = dict(graph="products", dataset=os.path.basename(os.path.normpath(dataset)) if dataset else None)
    if best is None or not timed:
        return figure("gnnsys_vs_pyg", None, best, **where, precision="32")
    pyg_s = statistics.median(timed)
    where |= dict(precision="32", features=best["features"], sampler=best["sampler"], gnnsys_s=best["epoch_s"])
    where |= dict(pyg_s=pyg_s, pyg_epochs_timed=len(timed), pyg_complete=not peer.get("partial"))
    return figure("gnnsys_vs_pyg", best["epoch_s"] / pyg_s, best, **where)


def describe(f: dict) -> str:
    """One line of figure `f`."""
    where = ", ".join(f"{k} {f[k]}" for k in ("graph", "dataset", "features", "sampler", "precision") if f.get(k))
    if f["value"] is None:
        return f"{f['figure']} ({where}): not measured"
    verdict = "met" if f["met"] else "MISSED"
    return f"{f['figure']} ({where}): {f['value']:.2f} (target <= {f['target_at_most']}: {verdict}) on {f['gpu']}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"gpu_figures: needs one results folder, got {' '.join(argv) or 'none'}", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    figures = [*epoch_figures(folder), peer_figure(folder)]
    for f in figures:
        print(describe(f))
    out = folder / "headline_figures.json"
    out.with_suffix(".tmp").write_text(json.dumps({"figures": figures}, indent=2))
    out.with_suffix(".tmp").replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
