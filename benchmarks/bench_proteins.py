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
import sys
from pathlib import Path

import numpy as np
from helpers import SYSTEMS
from plotting import save_figure
from side_by_side import (
    accuracy_axes,
    add_subcommand,
    benchmark_parser,
    child_command,
    gnnsys_child,
    parse_benchmark_args,
    peer_command,
    print_accuracy,
    print_timing,
    result_paths,
    run_accuracy,
    time_configurations,
)

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
    """gnnsys.train of the recipe in the peers' record format: per-epoch
    times, then valid/test ROC-AUC (exact layer-wise)."""
    return gnnsys_child(argv, RECIPE, eval="layerwise")


def command(config: str, dataset: Path, args, seed: int) -> list:
    """The command line of one timed run of `config`."""
    if config == "dgl":
        recipe = ["--hidden", str(RECIPE["hidden"]), "--dropout", str(RECIPE["dropout"]), "--lr", str(RECIPE["lr"])]
        return peer_command(SYSTEMS["dgl"][1], dataset, args, seed, recipe)
    return child_command(__file__, dataset, args, seed, PRECISIONS[config])


def timing(args) -> dict:
    """Interleaved timed runs of every configuration (side_by_side.time_configurations); the result document."""
    import gnnsys

    dataset = gnnsys.load_dataset(args.dataset)
    facts = _dataset_facts(dataset)
    title = f"{facts['name']}: {facts['num_nodes']:,} nodes, {facts['num_edges']:,} edges"
    command_of = lambda config, rep: command(config, dataset.path, args, seed=rep)  # noqa: E731
    return time_configurations(
        "proteins_timing", args, RECIPE, facts, generator_references(dataset), command_of, "ROC-AUC", title
    )


# -- accuracy ------------------------------------------------------------------------------------
def accuracy(args) -> dict:
    """The recipe trained by gnnsys in this process; its ROC-AUC curve and
    OGB-Logger summary beside the generator's references."""
    import gnnsys

    dataset = gnnsys.load_dataset(args.dataset)
    paths = result_paths(args.out, f"proteins_accuracy_{Path(args.dataset).resolve().name}_{args.trainer}")
    references = generator_references(dataset)
    options = {**RECIPE, "epochs": args.epochs, "eval_every": EVAL_EVERY, "runs": args.runs}
    options.update(precision=args.precision, seed=0, progress=False)
    if args.trainer == "fullgraph":
        options.update(layers=LAYERS)
        trainer = gnnsys.train_fullgraph
    else:
        sampling = {"fanouts": [int(f) for f in args.fanouts.split(",")], "batch_size": args.batch_size}
        options.update(sampling, layers=len(sampling["fanouts"]), eval="layerwise")
        trainer = gnnsys.train
    train = lambda: trainer(dataset, **options).to_dict()  # noqa: E731
    head = {
        "trainer": args.trainer,
        "dataset": _dataset_facts(dataset),
        "options": {k: v for k, v in options.items() if k != "progress"},
    }
    return run_accuracy("proteins_accuracy", head, references, train, paths, plot_accuracy)


def plot_accuracy(document: dict, path: Path):
    """Valid and test ROC-AUC against the epoch, with the generator's references, as a PNG."""
    fig, ax = accuracy_axes(document, 4, alpha=0.8)
    for name, style in (("oracle", "--"), ("features_plug_in", ":")):
        ax.axhline(document["references"]["test"][name], color="black", linestyle=style, label=f"test {name}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("ROC-AUC (mean over tasks)")
    ax.set_title(f"{document['dataset']['name']}: SAGE 3 x 256, {document['trainer']}", fontsize=10)
    ax.legend(fontsize=8)
    save_figure(fig, path)


# -- shared --------------------------------------------------------------------------------------
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


def parse_args(argv=None) -> argparse.Namespace:
    p, sub = benchmark_parser(__doc__.split("\n\n")[0], "ogbn-proteins", CONFIGS, SAMPLING)
    a = add_subcommand(sub, "accuracy", "the OGB example's recipe trained by gnnsys", "ogbn-proteins")
    a.add_argument("--trainer", choices=TRAINERS, default="fullgraph")
    a.add_argument("--epochs", type=int, default=100)
    a.add_argument("--runs", type=int, default=1, help="runs, seeds 0, 1, ...")
    a.add_argument("--precision", default="32", help="gnnsys precision (the example trains in fp32)")
    a.add_argument("--fanouts", help=f"minibatch trainer only (default {SAMPLING['fanouts']})")
    a.add_argument("--batch-size", type=int, help=f"minibatch trainer only (default {SAMPLING['batch_size']})")
    args = parse_benchmark_args(p, argv, CONFIGS, SYSTEMS["dgl"][0])
    if args.command == "timing":
        return args
    if args.trainer == "fullgraph":
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
        print_timing(timing(args))
    else:
        print_accuracy(accuracy(args))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        print(json.dumps(child_gnnsys(sys.argv[2:])), flush=True)
    else:
        sys.exit(main())
