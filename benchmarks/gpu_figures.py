"""The headline GPU figures against their targets, from the results folder of
benchmarks/gpu_headline.sh.

    python benchmarks/gpu_figures.py DIR

Reads DIR/epoch_products.json, epoch_papers.json and epoch_ssd.json
(bench_epoch_gpu.py) and pyg_peer_products.json (benchmarks/peers/pyg_epoch.py),
writes DIR/headline_figures.json and prints one line per figure: its value
against its target (met or missed), with the GPU, torch, Triton and precision
it was measured with; a figure whose results are absent or failed is "not
measured". The zero-copy gather against a pinned memcpy is in
DIR/bench_gather_gpu.json, the table of bench_gather_gpu.py itself.

Figures (TARGETS):
- pinned_vs_gpu_resident: an epoch with pinned features read zero-copy over
  one with the features in GPU memory (same graph, sampler and precision);
- ssd_vs_in_memory: an epoch reading the SSD tier under a cache of 10% of the
  rows over the faster of pinned and cpu-gather (products shape, same run);
- gnnsys_vs_pyg: gnnsys's fastest fp32 epoch over PyG's (NeighborLoader
  sampling and slicing on the CPU, the same GraphSAGE on the GPU, fp32),
  products shape, same machine and run.
"""

from __future__ import annotations

import json
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
    cases = ((report or {}).get("graphs") or {}).get(graph, {}).get("cases", [])
    return [c for c in cases if c.get("epoch_s")]


def epoch_figures(folder: Path) -> list:
    """pinned_vs_gpu_resident per graph, sampler and precision; ssd_vs_in_memory per sampler and precision."""
    out = []
    for graph in ("products", "papers"):
        cases = measured(read(folder / f"epoch_{graph}.json"), graph)
        pinned = [c for c in cases if c["features"] == "pinned"]
        for c in pinned:
            where = dict(graph=graph, sampler=c["sampler"], precision=c["precision"])
            out.append(figure("pinned_vs_gpu_resident", c.get("vs_gpu_resident"), c, **where))
        if not pinned:
            out.append(figure("pinned_vs_gpu_resident", None, None, graph=graph))
    ssd = [c for c in measured(read(folder / "epoch_ssd.json"), "products") if c["features"] == "ssd"]
    for c in ssd:
        where = dict(graph="products", sampler=c["sampler"], precision=c["precision"])
        where["in_memory_features"] = c.get("in_memory_features")
        out.append(figure("ssd_vs_in_memory", c.get("vs_in_memory"), c, **where))
    if not ssd:
        out.append(figure("ssd_vs_in_memory", None, None, graph="products"))
    return out


def peer_figure(folder: Path) -> dict:
    """gnnsys_vs_pyg: gnnsys's fastest fp32 products epoch over PyG's epoch (median after the first)."""
    ours = [c for c in measured(read(folder / "epoch_products.json"), "products") if c["precision"] == "32"]
    peer = read(folder / "pyg_peer_products.json") or {}
    times = [e["time_s"] for e in peer.get("epochs", []) if e.get("time_s")]
    times = times[1:] or times
    best = min(ours, key=lambda c: c["epoch_s"], default=None)
    if best is None or not times:
        return figure("gnnsys_vs_pyg", None, best, graph="products", precision="32")
    pyg_s = statistics.median(times)
    where = dict(graph="products", precision="32", features=best["features"], sampler=best["sampler"])
    return figure("gnnsys_vs_pyg", best["epoch_s"] / pyg_s, best, **where, gnnsys_s=best["epoch_s"], pyg_s=pyg_s)


def describe(f: dict) -> str:
    """One line of figure `f`."""
    where = ", ".join(f"{k} {f[k]}" for k in ("graph", "sampler", "precision") if f.get(k))
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
