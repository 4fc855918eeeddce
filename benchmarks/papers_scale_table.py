"""The papers100M-shaped graph across scales: one table and one plot from the
results the scale benchmarks wrote.

Reads, for each scale S in --scales, benchmarks/results/prepare_papers-S.json
(benchmarks/prepare_synthetic.py --only papers --scale S),
papers_scale_S.json (bench_papers_scale.py, uniform and LABOR) and, where
present, inference_papers-S*.json (bench_inference.py). Prints a Markdown
table (prepare time, peak RSS, peak disk over the dataset's size; steady
training seeds/s against the disk's floor for uniform and LABOR sampling,
with rows read per batch and the cache hit rate; inference time; the load
average of each run) and writes a PNG of seeds/s and the floor against the
scale.

    python benchmarks/papers_scale_table.py --scales 0.1,0.5,1 --plot benchmarks/results/papers_scale.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def rows(scales: list[str]) -> list[dict]:
    """One dict per scale with the figures of the table (None where not measured)."""
    out = []
    for s in scales:
        prep = _load(f"prepare_papers-{s}.json") or _load(f"prepare_papers-{s}_first.json")
        case = prep["cases"]["papers"] if prep else None
        train = _load(f"papers_scale_{s}.json")
        inference = sorted(RESULTS.glob(f"inference_papers-{s}*.json"))
        inf = json.loads(inference[0].read_text()) if inference else None
        row = {
            "scale": s,
            "nodes": train["dataset"]["num_nodes"] if train else None,
            "edges": train["dataset"]["num_edges"] if train else None,
            "prepare_s": case["median_wall_s"] if case else None,
            "prepare_rss_gb": case["max_peak_rss_mib"] * 2**20 / 1e9 if case else None,
            "prepare_anon_gb": case["max_peak_rss_anon_mib"] * 2**20 / 1e9
            if case and "max_peak_rss_anon_mib" in case
            else None,
            "disk_gb": case["dataset_bytes"] / 1e9 if case else None,
            "peak_disk_over_dataset": case["peak_disk_over_dataset"] if case else None,
            "prepare_load": case["runs"][0]["loadavg_end"][0] if case else None,
        }
        for sampling in ("uniform", "labor"):
            summary = (train or {}).get("summary", {}).get(sampling)
            run = next((r for r in (train or {}).get("runs", []) if r["sampling"] == sampling), None)
            if summary:
                steady = summary["steady"]
                row[sampling] = {
                    "seeds_per_s": steady["seeds_per_s"],
                    "floor": steady["floor_seeds_per_s"],
                    "over_floor": steady["over_floor"],
                    "rows": steady["rows_needed_per_batch"],
                    "hit": steady["hit_rate"],
                    "first_over_steady": summary["first_time_over_steady"],
                    "anon_gb": run["rss_anon_peak_bytes"] / 1e9,
                    "load": run["loadavg_before"][0],
                }
        if inf:
            anon = [json.loads(p.read_text()).get("rss_anon_peak_bytes") for p in inference]
            row["inference"] = {
                "seconds": inf["wall_s"],
                "hidden": _hidden(inf),
                "load": inf["load_start"][0],
                "anon_gb": max((a for a in anon if a), default=0) / 1e9 or None,
                "passes": [layer["passes"] for layer in inf["layers"]],
                "peak_rss_gb": inf["peak_rss_mib"] * 2**20 / 1e9,
            }
        out.append(row)
    return out


def _hidden(inf: dict):
    """The model's hidden width: layer 2's input row bytes over the scratch dtype's size."""
    layers = inf["layers"]
    itemsize = 4 if inf["args"]["dtype"] == "float32" else 2
    return layers[1]["input_bytes"] // max(inf["num_nodes"], 1) // itemsize if len(layers) > 1 else None


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(data: list[dict]) -> str:
    """The Markdown table."""
    lines = [
        "| scale | nodes | edges | prepare | peak RSS (RssAnon) | dataset | peak disk / dataset | "
        "uniform seeds/s (floor, ratio) | LABOR seeds/s (floor, ratio) | rows read / batch (uniform, LABOR) | "
        "first / steady time | training RssAnon | inference (hidden, passes per layer, RssAnon) | load avg |",
        "|" + "---|" * 14,
    ]

    def train(d):
        return f"{d['seeds_per_s']:,.0f} ({d['floor']:,.0f}, {d['over_floor']:.2f})" if d else "-"

    for r in data:
        u, lab, inf = r.get("uniform") or {}, r.get("labor") or {}, r.get("inference")
        lines.append(
            f"| {r['scale']} | {fmt(r['nodes'], ',')} | {fmt(r['edges'], ',')} | "
            f"{fmt(r['prepare_s'] and r['prepare_s'] / 60, '.1f')} min | {fmt(r['prepare_rss_gb'], '.2f')} GB "
            f"({fmt(r['prepare_anon_gb'], '.2f')}) | "
            f"{fmt(r['disk_gb'], '.1f')} GB | {fmt(r['peak_disk_over_dataset'], '.2f')} | {train(u)} | {train(lab)} | "
            f"{fmt(u.get('rows'), ',.0f')}, {fmt(lab.get('rows'), ',.0f')} | "
            f"{fmt(u.get('first_over_steady'), '.2f')} | "
            f"{fmt(max(u.get('anon_gb', 0), lab.get('anon_gb', 0)) or None, '.2f')} GB | "
            + (
                f"{inf['seconds'] / 60:.1f} min ({inf['hidden']}, {inf['passes']}, {fmt(inf['anon_gb'], '.2f')} GB) | "
                if inf
                else "- | "
            )
            + f"{fmt(r['prepare_load'], '.1f')} / {fmt(u.get('load'), '.1f')} / {fmt(inf and inf['load'], '.1f')} |"
        )
    return "\n".join(lines)


def plot(data: list[dict], path: Path):
    """Steady seeds/s of uniform and LABOR sampling and their floors against the scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from plotting import save_figure

    fig, ax = plt.subplots(figsize=(6, 4))
    for sampling, color in (("uniform", "C0"), ("labor", "C1")):
        pts = [(float(r["scale"]), r[sampling]) for r in data if r.get(sampling)]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1]["seeds_per_s"] for p in pts], "o-", color=color, label=f"{sampling}: measured")
        ax.plot(
            xs,
            [p[1]["floor"] for p in pts],
            "x--",
            color=color,
            label=f"{sampling}: floor (uncached rows / fio reads/s)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("scale of ogbn-papers100M (1 = 111M nodes, 1.6B edges)")
    ax.set_ylabel("training seeds/s (steady)")
    ax.set_title("SAGE on the SSD tier, host budget 4 GB")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", default="0.1,0.5,1")
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    data = rows(args.scales.split(","))
    print(table(data))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    if args.plot:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from plotting import can_plot

        if can_plot(args.plot):
            plot(data, args.plot)


if __name__ == "__main__":
    main()
