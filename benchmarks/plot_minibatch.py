"""Bar plot of a minibatch benchmark result (benchmarks/bench_minibatch.py).

python benchmarks/plot_minibatch.py benchmarks/results/minibatch_arxiv-1.0.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

STAGES = (("sample_s", "sampling"), ("gather_s", "feature gather"), ("compute_s", "compute"))


def plot(result: dict, path):
    """Two panels (sampling + gather epoch; training epoch), one stacked bar per
    system (median stage times), labelled with the total and the ratio to gnnsys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = {k: v for k, v in result["summary"].items() if v["runs_ok"]}
    systems = list(summary)
    base = summary.get("gnnsys")
    panels = (
        (
            "sampling + feature gather, 1 epoch",
            "sampling_epoch_s",
            lambda s: {"sample_s": s["sampling_sample_s"], "gather_s": s["sampling_gather_s"]},
        ),
        ("GraphSAGE training epoch", "train_epoch_s", lambda s: s["train_breakdown_s"]),
    )
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = ("#4c72b0", "#dd8452", "#55a868")
    for ax, (title, key, parts) in zip(axes, panels):
        top = 0.0
        for i, system in enumerate(systems):
            bottom = 0.0
            for (stage, label), color in zip(STAGES, colors):
                value = (parts(summary[system]) or {}).get(stage) or 0.0
                ax.bar(i, value, bottom=bottom, color=color, label=label if i == 0 else None)
                bottom += value
            total = summary[system][key]
            if total is None:
                continue
            top = max(top, bottom, total)
            text = f"{total:.3g} s"
            if base and base[key] and system != "gnnsys":
                text += f"\n{total / base[key]:.1f}x gnnsys"
            ax.text(i, max(bottom, total), text, ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(len(systems)), systems)
        ax.set_ylabel("seconds (median)")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 1.3 * top or 1.0)
        ax.legend(fontsize=8, loc="upper left")
    d, c = result["dataset"], result["config"]
    fig.suptitle(
        f"{d['name']}: {d['num_nodes']:,} nodes, {d['num_edges']:,} edges, dim {d['dim']}; "
        f"fanouts {c['fanouts']}, batch {c['batch_size']}, median of {c['reps']} runs",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    for name in argv if argv is not None else sys.argv[1:]:
        path = Path(name)
        plot(json.loads(path.read_text()), path.with_name(path.stem + ".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
