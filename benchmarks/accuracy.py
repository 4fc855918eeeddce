"""Test-set accuracy of `gnnsys.train`, mean over seeds, against targets.

Cora (embedded Planetoid copy, standard split) with GraphSAGE and GCN at
`gnnsys.train`'s defaults; tolokers (undirected, split 0) with GraphSAGE,
ROC AUC, with the options below. Prepares the datasets into --data once,
trains each case with seeds 0..N-1 and writes benchmarks/results/accuracy.json.

    python benchmarks/accuracy.py --data /tmp/gnnsys-accuracy --seeds 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tqdm.auto import tqdm

import gnnsys
from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.datasets.prepare import prepare_npz, prepare_planetoid
from gnnsys.training.result import machine_info

HERE = Path(__file__).resolve().parent
TOLOKERS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "heterophilous" / "tolokers.npz"
TOLOKERS_OPTIONS = dict(fanouts=[10, 10], batch_size=256, norm="layer", residual=True, dropout=0.2,
                        lr=0.003, weight_decay=0.0, epochs=50, eval_every=5)
# (name, dataset, target, train options beyond the defaults)
CASES = [("cora-sage", "cora", 0.79, dict(model="sage")),
         ("cora-gcn", "cora", 0.80, dict(model="gcn")),
         ("tolokers-sage", "tolokers", 0.80, dict(model="sage", **TOLOKERS_OPTIONS))]


def prepare(data: Path, dataset: str) -> Path:
    """The path of prepared `dataset` ("cora" or "tolokers") under `data`,
    written if missing."""
    path = Path(data) / dataset
    if not path.exists():
        if dataset == "cora":
            prepare_planetoid(path, name="cora", progress=False)
        else:
            prepare_npz(TOLOKERS, path, to_undirected=True, progress=False)
    return path


def run_case(path, options: dict, seeds: int, bar=None) -> dict:
    """Train with seeds 0..seeds-1; the test metric of each and their summary."""
    dataset = gnnsys.load_dataset(path)
    tests, times, result = [], [], None
    for seed in range(seeds):
        began = time.perf_counter()
        result = gnnsys.train(dataset, seed=seed, progress=False, **options)
        times.append(time.perf_counter() - began)
        tests.append(result.test)
        if bar is not None:
            bar.update()
    config = {k: v for k, v in result.config.items() if k != "seed"}
    return {"metric": result.metric, "tests": tests, "mean": statistics.mean(tests),
            "std": statistics.stdev(tests) if seeds > 1 else 0.0, "median_run_s": statistics.median(times),
            "config": config}


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
            r = run_case(prepare(args.data, dataset), options, args.seeds, bar)
            results[name] = {"dataset": dataset, "target": target, "passed": r["mean"] >= target, **r}
            tqdm.write(f"{name}: test {r['metric']} {r['mean']:.4f} +- {r['std']:.4f} (target {target})")
    report = {"seeds": args.seeds, "cases": results, "machine": machine_info("cpu")}
    atomic_write_bytes(args.out, (json.dumps(report, indent=2) + "\n").encode())
    print(f"written to {args.out}")
    return 0 if all(r["passed"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
