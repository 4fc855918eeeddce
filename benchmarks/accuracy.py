"""Test-set accuracy of `gnnsys.train` and `gnnsys.train_fullgraph`, mean over seeds, against targets.

Cora (embedded Planetoid copy, standard split) with GraphSAGE and GCN at
`gnnsys.train`'s defaults; Cora as in the GCN paper (Kipf & Welling 2017:
PyG's Planetoid graph, feature rows divided by their sums (`gnnsys prepare
--normalize-features row`, PyG's NormalizeFeatures), full-graph training of a
2-layer GCN, hidden 16, dropout and input dropout 0.5, lr 0.01, weight decay
5e-4, 200 epochs), next to PyG's own GCNConv model trained the same way on
the same data; tolokers (undirected, split 0) with GraphSAGE, ROC AUC, with
the options below. Prepares the datasets into --data once, trains each case
with seeds 0..N-1 and writes benchmarks/results/accuracy.json.

    python benchmarks/accuracy.py --data /tmp/gnnsys-accuracy --seeds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import gnnsys
from gnnsys.atomic import atomic_write_bytes
from gnnsys.datasets.prepare import prepare_npz, prepare_planetoid
from gnnsys.training.result import machine_info

HERE = Path(__file__).resolve().parent
TOLOKERS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "heterophilous" / "tolokers.npz"
TOLOKERS_OPTIONS = dict(
    fanouts=[10, 10],
    batch_size=256,
    norm="layer",
    residual=True,
    dropout=0.2,
    lr=0.003,
    weight_decay=0.0,
    epochs=50,
    eval_every=5,
)
KIPF_OPTIONS = dict(
    mode="fullgraph",
    model="gcn",
    layers=2,
    hidden=16,
    dropout=0.5,
    input_dropout=0.5,
    lr=0.01,
    weight_decay=5e-4,
    epochs=200,
)
# (name, dataset, target, train options beyond the defaults; mode "fullgraph": gnnsys.train_fullgraph)
CASES = [
    ("cora-sage", "cora", 0.79, dict(model="sage")),
    ("cora-gcn", "cora", 0.80, dict(model="gcn")),
    ("cora-gcn-kipf", "cora-row", 0.805, KIPF_OPTIONS),
    ("tolokers-sage", "tolokers", 0.80, dict(model="sage", **TOLOKERS_OPTIONS)),
]


def prepare(data: Path, dataset: str) -> Path:
    """The path of prepared `dataset` under `data`, written if missing:
    "cora" (PyG's Planetoid graph), "cora-row" (the same with feature rows
    divided by their sums, `--normalize-features row`, PyG's
    NormalizeFeatures) or "tolokers"."""
    path = Path(data) / dataset
    if not path.exists():
        if dataset == "cora":
            prepare_planetoid(path, name="cora", progress=False)
        elif dataset == "cora-row":
            prepare_planetoid(path, name="cora", normalize_features="row", progress=False)
        else:
            prepare_npz(TOLOKERS, path, to_undirected=True, progress=False)
    return path


def run_case(path, options: dict, seeds: int, bar=None) -> dict:
    """Train with seeds 0..seeds-1; the test metric of each and their summary."""
    dataset = gnnsys.load_dataset(path)
    options = dict(options)
    train = gnnsys.train_fullgraph if options.pop("mode", "minibatch") == "fullgraph" else gnnsys.train
    tests, times, result = [], [], None
    for seed in range(seeds):
        began = time.perf_counter()
        result = train(dataset, seed=seed, progress=False, **options)
        times.append(time.perf_counter() - began)
        tests.append(result.test)
        if bar is not None:
            bar.update()
    config = {k: v for k, v in result.config.items() if k != "seed"}
    return {
        "metric": result.metric,
        "tests": tests,
        "mean": statistics.mean(tests),
        "std": statistics.stdev(tests) if seeds > 1 else 0.0,
        "median_run_s": statistics.median(times),
        "config": config,
    }


def pyg_reference(path, options: dict, seeds: int) -> dict:
    """PyG's GCN (GCNConv layers as in torch_geometric's examples/gcn.py) on
    the same graph, features and split, with the case's hidden size, dropout,
    input dropout, Adam lr and weight decay (on every parameter, as gnnsys
    applies it) and epochs; per seed the test accuracy at the best validation
    epoch (the earliest of equals, as gnnsys picks it)."""
    from torch_geometric.nn import GCNConv

    dataset = gnnsys.load_dataset(path)
    x = dataset.features[torch.arange(dataset.num_nodes)].float()
    edge_index, y = dataset.edge_index(), dataset.labels
    train, valid, test = (dataset.split(s) for s in ("train", "valid", "test"))
    dims = [dataset.num_features] + [options["hidden"]] * (options["layers"] - 1) + [dataset.num_classes]
    tests = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        convs = torch.nn.ModuleList(GCNConv(a, b, cached=True) for a, b in zip(dims, dims[1:]))
        opt = torch.optim.Adam(convs.parameters(), lr=options["lr"], weight_decay=options["weight_decay"])

        def forward(training: bool) -> torch.Tensor:
            h = F.dropout(x, options["input_dropout"], training)
            for i, conv in enumerate(convs):
                h = conv(h, edge_index)
                if i < len(convs) - 1:
                    h = F.dropout(h.relu(), options["dropout"], training)
            return h

        best = (-1.0, None)
        for _ in range(options["epochs"]):
            opt.zero_grad()
            F.cross_entropy(forward(True)[train], y[train]).backward()
            opt.step()
            with torch.no_grad():
                pred = forward(False).argmax(1)
            acc = [(pred[ids] == y[ids]).float().mean().item() for ids in (valid, test)]
            if acc[0] > best[0]:
                best = (acc[0], acc[1])
        tests.append(best[1])
    return {"tests": tests, "mean": statistics.mean(tests), "std": statistics.stdev(tests) if seeds > 1 else 0.0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("/tmp/gnnsys-accuracy"), help="where datasets are prepared")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--cases", default=",".join(c[0] for c in CASES), help="comma-separated case names")
    p.add_argument("--out", type=Path, default=HERE / "results" / "accuracy.json")
    args = p.parse_args(argv)
    chosen = [c for c in CASES if c[0] in args.cases.split(",")]
    results = {}
    with tqdm(total=len(chosen) * args.seeds, desc="accuracy", unit="run") as bar:
        for name, dataset, target, options in chosen:
            data = prepare(args.data, dataset)
            r = run_case(data, options, args.seeds, bar)
            results[name] = {"dataset": dataset, "target": target, "passed": r["mean"] >= target, **r}
            tqdm.write(f"{name}: test {r['metric']} {r['mean']:.4f} +- {r['std']:.4f} (target {target})")
            if options.get("mode") == "fullgraph" and options["model"] == "gcn":
                ref = results[name]["pyg_gcnconv"] = pyg_reference(data, options, args.seeds)
                tqdm.write(f"{name}: PyG GCNConv, same data and recipe: test acc {ref['mean']:.4f} +- {ref['std']:.4f}")
    report = {"seeds": args.seeds, "cases": results, "machine": machine_info("cpu")}
    atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    print(f"written to {args.out}")
    return 0 if all(r["passed"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
