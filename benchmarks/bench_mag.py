"""ogbn-mag-shaped graph: gnnsys and DGL side by side with the same R-GCN, and the OGB example's recipe against the
generator.

The recipe is OGB's R-GCN example for ogbn-mag (examples/nodeproppred/mag/sampler.py):
2 layers, hidden 64, fanouts 25 then 20 (from the seeds out), batch 1024,
dropout 0.5, Adam lr 0.01 without weight decay, 128-wide learnable
embeddings for the featureless node types (author, institution,
field_of_study), 3 epochs; the graph with the reverse of every relation and
paper-cites-paper undirected (prepare with `--add-reverse-relations yes`,
the default for a heterogeneous graph). The model: gnnsys.models.rgcn.HeteroRGCN,
and in DGL benchmarks/peers/dgl_mag_epoch.py (HeteroGraphConv of GraphConv
"right" per relation plus a Linear per node type: the same layers).

`timing DATASET`: configurations gnnsys-fp32 (precision "32", the peer's),
gnnsys-auto (gnnsys's default precision), gnnsys-sparse (fp32, the
embeddings with sparse gradients and SparseAdam: `--sparse-embeddings`,
a different optimiser for them than the peer's Adam) and dgl, each run a fresh process,
interleaved (benchmarks/side_by_side.py: peak RSS, peak RssAnon, the load
average before and after each run): --epochs training epochs (the first
left out of the median when there are more), then valid/test accuracy on
minibatches sampled with the training fanouts (both systems; gnnsys also
scores a 20,000-node sample of train). Writes
results/mag_timing_<dataset dir>.json and .png.

`accuracy DATASET`: the recipe trained by gnnsys with --runs runs (seeds 0,
1, ...), --epochs each, evaluated every epoch by exact layer-wise inference
over every neighbour as the example evaluates (--eval sampled: on sampled
minibatches); OGB's Logger summary (test accuracy at the best validation
epoch, mean and std over the runs); --sparse-embeddings trains the
embeddings with SparseAdam. Writes results/mag_accuracy_<dataset dir>.json
and .png (..._sampled with --eval sampled, ..._sparse with --sparse-embeddings).

Both set the accuracy beside what the generator records
(datasets/synthetic_mag.py, meta.json's source.synthetic): the Monte Carlo
accuracy of the Bayes classifier that knows the model and sees a paper's
features only, with its citing papers', and with its citing and cited
papers' ("attainable at least": the other relations only add information),
and the label ceiling (1 - label noise, what no model can beat).

    gnnsys prepare synthetic --like ogbn-mag --scale 0.1 --seed 0 --out /work/bench-data/mag-0.1
    benchmarks/setup_peers.sh dgl
    python benchmarks/bench_mag.py timing /work/bench-data/mag-0.1 --reps 3 --epochs 2
    python benchmarks/bench_mag.py accuracy /work/bench-data/mag-0.1 --runs 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from helpers import PEERS
from plotting import save_figure
from side_by_side import (
    accuracy_axes,
    add_subcommand,
    benchmark_parser,
    child_command,
    gnnsys_child,
    machine_facts,
    parse_benchmark_args,
    peer_command,
    print_accuracy,
    print_timing,
    result_paths,
    run_accuracy,
    time_configurations,
)

HERE = Path(__file__).resolve().parent
DGL_PYTHON, DGL_SCRIPT = PEERS / "dgl" / "bin" / "python", HERE / "peers" / "dgl_mag_epoch.py"
RECIPE = {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 0.0, "embedding_dim": 128}
SAMPLING = {"fanouts": "25,20", "batch_size": 1024}
EPOCHS = 3  # the example's
PRECISIONS = {"gnnsys-fp32": "32", "gnnsys-auto": "auto", "gnnsys-sparse": "32"}
SPARSE = "--sparse-embeddings"  # gnnsys-sparse's child: the embeddings train with SparseAdam
CONFIGS = (*PRECISIONS, "dgl")
BAYES = ("features_only", "features_and_in_neighbours", "features_and_all_neighbours")


def generator_references(dataset) -> dict:
    """What the generator of a synthetic mag-shaped HeteroDataset records
    (meta.json's source.synthetic): {"bayes_accuracy": {...},
    "bayes_standard_error": {...}, "label_ceiling"}; SystemExit when the
    dataset is not one, or was not prepared with the reverse relations the
    recipe needs."""
    synth = dataset.meta.get("source", {}).get("synthetic", {})
    if synth.get("like") != "ogbn-mag":
        raise SystemExit(f"{dataset.path}: not prepared by `gnnsys prepare synthetic --like ogbn-mag`")
    if not dataset.meta.get("reverse_relations", {}).get("added"):
        raise SystemExit(f"{dataset.path}: prepared without the reverse relations (--add-reverse-relations yes)")
    return {
        "bayes_accuracy": {k: synth["bayes_accuracy"][k] for k in BAYES},
        "bayes_standard_error": {k: synth["bayes_standard_error"][k] for k in BAYES},
        "label_ceiling": synth["label_ceiling"],
        "bayes_method": synth["bayes_method"],
    }


# -- timing --------------------------------------------------------------------------------------
def child_gnnsys(argv: list) -> dict:
    """gnnsys.train of the recipe (with sparse embeddings after SPARSE) in
    the peers' record format: per-epoch times, then valid/test accuracy on
    sampled minibatches."""
    sparse = SPARSE in argv
    argv = [a for a in argv if a != SPARSE]
    return gnnsys_child(argv, RECIPE, eval="sampled", sparse_embeddings=sparse)  # eval as the DGL peer


def command(config: str, dataset: Path, args, seed: int) -> list:
    """The command line of one timed run of `config`."""
    if config == "dgl":
        recipe = [f"--{k.replace('_', '-')}={v}" for k, v in RECIPE.items() if k != "weight_decay"]
        return peer_command(DGL_SCRIPT, dataset, args, seed, recipe)
    sparse = [SPARSE] if config == "gnnsys-sparse" else []
    return child_command(__file__, dataset, args, seed, PRECISIONS[config]) + sparse


def timing(args) -> dict:
    """Interleaved timed runs of every configuration (side_by_side.time_configurations); the result document."""
    import gnnsys

    dataset = gnnsys.load_dataset(args.dataset)
    facts = _dataset_facts(dataset)
    nodes, edges, relations = sum(facts["num_nodes"].values()), facts["num_edges"], len(facts["relations"])
    title = f"{facts['name']}: {nodes:,} nodes, {edges:,} edges in {relations} relations"
    command_of = lambda config, rep: command(config, dataset.path, args, seed=rep)  # noqa: E731
    return time_configurations(
        "mag_timing", args, RECIPE, facts, generator_references(dataset), command_of, "accuracy", title
    )


# -- accuracy ------------------------------------------------------------------------------------
def accuracy(args) -> dict:
    """The recipe trained by gnnsys (--runs runs, every epoch evaluated) in
    this process; OGB's Logger summary beside the generator's references."""
    import gnnsys

    dataset = gnnsys.load_dataset(args.dataset)
    suffix = ("" if args.eval == "layerwise" else f"_{args.eval}") + ("_sparse" if args.sparse_embeddings else "")
    paths = result_paths(args.out, f"mag_accuracy_{Path(args.dataset).resolve().name}{suffix}")
    references = generator_references(dataset)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    options = {**RECIPE, "layers": len(fanouts), "fanouts": fanouts, "batch_size": args.batch_size}
    options.update(epochs=args.epochs, runs=args.runs, precision=args.precision, eval=args.eval, seed=0)
    options.update(sparse_embeddings=args.sparse_embeddings)
    train = lambda: gnnsys.train(dataset, **options, progress=False).to_dict()  # noqa: E731
    head = {"dataset": _dataset_facts(dataset), "options": options}
    return run_accuracy("mag_accuracy", head, references, train, paths, plot_accuracy)


def plot_accuracy(document: dict, path: Path):
    """Each run's valid and test accuracy per epoch, with the generator's references, as a PNG."""
    fig, ax = accuracy_axes(document, 4.5, alpha=0.6)
    refs = document["references"]
    styles = {"features_only": ":", "features_and_in_neighbours": "-.", "features_and_all_neighbours": "--"}
    for name, style in styles.items():
        ax.axhline(refs["bayes_accuracy"][name], color="black", linestyle=style, label=f"Bayes, {name}")
    ax.axhline(refs["label_ceiling"], color="tab:red", linestyle="-", label="label ceiling")
    ax.set_xticks(range(1, 1 + max(len(c["epochs"]) for c in document["curves"])))
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    logger = document["logger"]
    ax.set_title(
        f"{document['dataset']['name']}: R-GCN 2 x 64, {len(document['curves'])} runs, final test "
        f"{100 * logger['final_test']['mean']:.2f} ± {100 * logger['final_test']['std']:.2f}",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="center right")
    save_figure(fig, path)


# -- same model ----------------------------------------------------------------------------------
def export_same_model(dataset, path: Path, seeds: int) -> dict:
    """Write to `path` (npz) a freshly initialised HeteroRGCN of the recipe:
    its weights (embedding/T, layerI/rel/NAME [out, in], layerI/root/T/weight
    and /bias), the first `seeds` valid papers ("seeds") and their logits
    in eval mode over full-neighbour blocks ("logits"); returns {"seeds",
    "max_abs_logit"}."""
    import numpy as np
    import torch

    from gnnsys.datasets.hetero_dataset import relation_name
    from gnnsys.models.rgcn import HeteroRGCN
    from gnnsys.samplers.hetero import HeteroNeighborSampler

    torch.manual_seed(0)
    featured = {t: dataset.feature_dim(t) for t in dataset.features}
    model = HeteroRGCN(
        dataset.node_types,
        featured,
        dataset.edge_types,
        dataset.target,
        RECIPE["hidden"],
        dataset.num_classes,
        len(SAMPLING["fanouts"].split(",")),
        embedding_dim=RECIPE["embedding_dim"],
    ).eval()
    ids = dataset.split("valid")[:seeds]
    batch = HeteroNeighborSampler.from_dataset(dataset, [-1] * len(model.layers)).sample(ids)
    batch.x = {t: dataset.features[t][batch.input_nodes[t]].float() for t in featured}
    with torch.no_grad():
        logits = model(model.inputs(batch), batch.blocks)
    arrays = {"seeds": ids.numpy(), "logits": logits.numpy()}
    arrays.update({f"embedding/{t}": e.weight.detach().numpy() for t, e in model.embeddings.items()})
    for i, layer in enumerate(model.layers):
        for relation, conv in layer.convs.convs.items():
            arrays[f"layer{i}/rel/{relation_name(relation)}"] = conv.lin_l.weight.detach().numpy()
        for t, root in layer.roots.items():
            arrays[f"layer{i}/root/{t}/weight"] = root.weight.detach().numpy()
            arrays[f"layer{i}/root/{t}/bias"] = root.bias.detach().numpy()
    np.savez(path, **arrays)
    return {"seeds": int(ids.shape[0]), "max_abs_logit": float(logits.abs().max())}


def same_model(args) -> dict:
    """gnnsys's R-GCN and the DGL peer's on the same weights and full-neighbour
    blocks: the largest difference of their logits (the peer's --check-logits)."""
    import subprocess
    import tempfile

    import gnnsys
    from gnnsys.atomic import atomic_write_bytes

    dataset = gnnsys.load_dataset(args.dataset)
    generator_references(dataset)  # the recipe's graph: reverse relations added
    with tempfile.TemporaryDirectory() as scratch:
        exported = Path(scratch) / "rgcn.npz"
        record = export_same_model(dataset, exported, args.seeds)
        recipe = [f"--{k.replace('_', '-')}={v}" for k, v in RECIPE.items() if k not in ("weight_decay", "lr")]
        cmd = [str(DGL_PYTHON), str(DGL_SCRIPT), str(dataset.path), "--fanouts", SAMPLING["fanouts"], *recipe]
        done = subprocess.run([*cmd, "--check-logits", str(exported)], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{DGL_SCRIPT.name} --check-logits: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    record.update(json.loads(lines[-1]))
    record["same"] = record["max_abs_diff"] <= 1e-4 * max(1.0, record["max_abs_logit"])
    record["machine"] = machine_facts()
    json_path, _ = result_paths(args.out, f"mag_same_model_{Path(args.dataset).resolve().name}")
    atomic_write_bytes(json_path, (json.dumps(record, indent=1) + "\n").encode())
    return record


# -- shared --------------------------------------------------------------------------------------
def _dataset_facts(dataset) -> dict:
    return {
        "path": str(dataset.path),
        "name": dataset.name,
        "num_nodes": dict(dataset.node_types),
        "num_edges": sum(r["num_edges"] for r in dataset.meta["relations"]),
        "relations": {f"{r['src']}__{r['rel']}__{r['dst']}": r["num_edges"] for r in dataset.meta["relations"]},
        "num_classes": dataset.num_classes,
        "splits": {s: int(dataset.split(s).shape[0]) for s in ("train", "valid", "test")},
        "synthetic": dataset.meta["source"].get("synthetic"),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p, sub = benchmark_parser(__doc__.split("\n\n")[0], "ogbn-mag", CONFIGS, SAMPLING)
    m = add_subcommand(
        sub, "same-model", "gnnsys's R-GCN and DGL's on the same weights: their logits' difference", "ogbn-mag"
    )
    m.add_argument("--seeds", type=int, default=256, help="valid papers whose logits are compared")
    a = add_subcommand(sub, "accuracy", "the OGB example's recipe trained by gnnsys", "ogbn-mag")
    a.add_argument("--epochs", type=int, default=EPOCHS)
    a.add_argument("--runs", type=int, default=5, help="runs, seeds 0, 1, ...")
    a.add_argument("--precision", default="32", help="gnnsys precision (the example trains in fp32)")
    a.add_argument(
        "--eval",
        choices=("layerwise", "sampled"),
        default="layerwise",
        help="exact inference over every neighbour (the example's), or minibatches sampled with the training fanouts",
    )
    a.add_argument(SPARSE, action="store_true", help="the embeddings train with SparseAdam (--sparse-embeddings)")
    a.add_argument("--fanouts", default=SAMPLING["fanouts"])
    a.add_argument("--batch-size", type=int, default=SAMPLING["batch_size"])
    args = parse_benchmark_args(p, argv, CONFIGS, DGL_PYTHON)
    if args.command == "same-model" and not DGL_PYTHON.exists():
        p.error(f"same-model: needs {DGL_PYTHON}; run benchmarks/setup_peers.sh dgl first")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.command == "timing":
        print_timing(timing(args))
    elif args.command == "same-model":
        record = same_model(args)
        print(json.dumps(record))
        return 0 if record["same"] else 1
    else:
        print_accuracy(accuracy(args))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        print(json.dumps(child_gnnsys(sys.argv[2:])), flush=True)
    else:
        sys.exit(main())
