"""The CUDA cases of benchmarks/gpu_check.sh: one tiny run of each path that
only a GPU executes.

    python benchmarks/gpu_smoke.py --root DIR --out cases.jsonl [--case NAME ...] [--device cuda|cpu] [--list]

Cases: the SSD tier feeding the GPU through a cache in GPU memory with a
victim buffer and lookahead window (CPU and GPU sampler), fp32, bf16-mixed
and 16-mixed training, LABOR on the GPU sampler, the gpu-pinned sampler, a
CUDA cache's gathers against x[ids] and the shared cache on one rank; with
two or more GPUs also data-parallel, the shared cache and GNNPipe with two
ranks (with one GPU those are "skipped": NCCL with several ranks needs two
GPUs). Each case's result ({"case", "status": "passed" | "failed" |
"skipped", "seconds", "detail", "device", "precision", "options", and the
GPU, CUDA, torch and Triton of gpu_facts.py}) is appended to --out as one
JSON line the moment the case ends, so a run killed for time keeps every
finished case. "precision" is what a training case trained in (None for
the gather cases). A tiny synthetic dataset (arxiv-shaped x0.01) is
prepared under --root first.

--device cpu rehearses the cases on the CPU: each training case with its
CUDA-only values replaced by their CPU counterparts (CPU_TWIN), the gather
cases on CPU rows, the two-rank cases skipped; what only a GPU can prove is
left to the GPU, the rest of each case's code runs (the tests run it).
Exit status 0 when no case failed, 1 otherwise, 2 without CUDA (--device cuda).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from gpu_facts import gpu_facts

MULTI_GPU = "NCCL multi-rank needs two GPUs"
REHEARSAL = "the two-rank cases run on a machine with two GPUs only"
TIERS = dict(features="ssd", scratch_gb=0, cache_gb=0.0005, victim_rows=512, lookahead=2, cache_policy="hybrid")
TRAIN_CASES = {  # case -> (what it runs, its train() options on CUDA)
    "tiers_cpu_sampler": (
        "SSD tier -> GPU: cache rows in GPU memory, victim buffer, lookahead window; CPU sampler",
        TIERS | dict(sampler="cpu", precision="32"),
    ),
    "tiers_gpu_sampler": (
        "as tiers_cpu_sampler with the GPU sampler (window ids copied from the GPU)",
        TIERS | dict(sampler="gpu", precision="32"),
    ),
    "fp32": ("fp32 training, pinned rows read zero-copy", dict(precision="32", sampler="gpu", features="pinned")),
    "bf16_mixed": (
        "bf16-mixed training (aggregation in fp32 sums, rounded to bf16)",
        dict(precision="bf16-mixed", sampler="gpu", features="gpu"),
    ),
    "fp16_mixed": (
        "16-mixed training (fp16 autocast with a gradient scaler)",
        dict(precision="16-mixed", sampler="gpu", features="gpu"),
    ),
    "labor_gpu_sampler": (
        "LABOR-0 sampling on the GPU sampler",
        dict(sampling="labor", sampler="gpu", features="gpu", precision="32"),
    ),
    "gpu_pinned_sampler": (
        "the GPU sampler over the graph in pinned host memory",
        dict(sampler="gpu-pinned", features="pinned", precision="32"),
    ),
}
CPU_TWIN = {  # option -> {CUDA-only value: its CPU counterpart} for --device cpu
    "features": {"gpu": "cpu-gather", "pinned": "cpu-gather"},
    "sampler": {"gpu": "cpu", "gpu-pinned": "cpu"},
    "precision": {"16-mixed": "32"},
}


def on_device(options: dict, device: str) -> dict:
    """`options` as a case runs them on `device`: unchanged on CUDA, CPU_TWIN's values on the CPU."""
    if device == "cuda":
        return dict(options)
    return {k: CPU_TWIN.get(k, {}).get(v, v) for k, v in options.items()}


def tiny_train(path, device: str, options: dict) -> dict:
    """A 2-epoch train() with `options` on `device`; its losses checked finite."""
    import gnnsys

    result = gnnsys.train(
        path, epochs=2, fanouts=(5, 5), batch_size=256, hidden=32, device=device, progress=False, **options
    )
    losses = [e["loss"] for e in result.epochs]
    assert all(math.isfinite(x) for x in losses), losses
    tiers = result.epochs[-1].get("tiers")
    return {
        "precision": result.config["precision"],
        "detail": f"losses {losses}" + (f", tiers {tiers}" if tiers else ""),
    }


def case_cache_gather(path, device: str) -> dict:
    """A cache over rows in pinned memory (CPU rows with --device cpu), victim buffer and
    window: its gathers (repeats, misses, evictions, ids on either device) equal x[ids]."""
    import gnnsys
    from gnnsys.storage.cache import CachedFeatures, VictimBuffer, out_degree
    from gnnsys.storage.placement import unified

    ds = gnnsys.load_dataset(path)
    x = ds.features.gather(torch.arange(ds.num_nodes))
    placement = "pinned" if device == "cuda" else "cpu-gather"
    base = VictimBuffer(unified(ds.features, placement, device, progress=False).source, 256)
    score = out_degree(ds.indices.numpy(), ds.num_nodes)
    cache = CachedFeatures(base, ds.num_nodes // 10, "hybrid", score=score, device=device)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, ds.num_nodes, (1000,), generator=g) for _ in range(6)]
    want = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    for j, ids in enumerate(batches):
        cache.set_window(batches[j + 1 : j + 3])
        got = cache.gather(ids.to(device) if j % 2 else ids)
        assert got.device == want, got.device
        assert torch.equal(got.cpu(), x[ids]), f"batch {j}"
    cache.close()
    return {"precision": None, "detail": f"stats {cache.stats()}, victim {base.stats()}"}


def case_shared_cache_one_rank(path, device: str) -> dict:
    """SharedCachedFeatures in a group of one rank: its wire device (ids and rows
    exchanged) decided for `device`, gathers equal to x[ids]."""
    import torch.distributed as dist

    import gnnsys
    from gnnsys.storage.cache import SharedCachedFeatures, out_degree

    ds = gnnsys.load_dataset(path)
    x = ds.features.gather(torch.arange(ds.num_nodes))
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            score = out_degree(ds.indices.numpy(), ds.num_nodes)
            cache = SharedCachedFeatures(ds.features, ds.num_nodes // 10, "static", score=score)
            ids = torch.randint(0, ds.num_nodes, (500,), generator=torch.Generator().manual_seed(1))
            got = cache.gather(ids.to(device))
            assert torch.equal(got.cpu(), x[ids])
            return {"precision": None, "detail": f"stats {cache.stats()}"}
        finally:
            dist.destroy_process_group()


def train_argv(path, name: str) -> list[str]:
    """The `gnnsys` arguments of the two-rank case `name` on the dataset at `path`."""
    return ["train", str(path), "--device", "cuda", "--precision", "32", "--epochs", "2", *MULTI_ARGS[name]]


def cli_train(path, name: str) -> dict:
    """The two-rank case `name` (`gnnsys train`) in a subprocess; its last output line."""
    import subprocess

    run = subprocess.run(
        [sys.executable, "-m", "gnnsys", *train_argv(path, name)], capture_output=True, text=True, timeout=120
    )
    tail = (run.stdout + run.stderr).strip().splitlines()[-1:] or [""]
    assert run.returncode == 0, f"exit {run.returncode}: {(run.stdout + run.stderr)[-2000:]}"
    return {"precision": "32", "detail": tail[0]}


MULTI_ARGS = {  # two-rank cases -> their `gnnsys train` arguments
    "data_parallel_w2": ("--workers", "2", "--fanouts", "5,5", "--batch-size", "256"),
    "shared_cache_w2": ("--workers", "2", "--fanouts", "5,5", "--batch-size", "256", "--cache-gb", "0.001"),
    "gnnpipe_w2": ("--mode", "fullgraph", "--workers", "2", "--layers", "4"),
}
GATHER_CASES = {"cache_gather": case_cache_gather, "shared_cache_one_rank": case_shared_cache_one_rank}
CASES = [*TRAIN_CASES, *GATHER_CASES, *MULTI_ARGS]


def case_options(name: str, device: str) -> dict | None:
    """The train() options case `name` runs with on `device` (None: not a train() case)."""
    return on_device(TRAIN_CASES[name][1], device) if name in TRAIN_CASES else None


def run_case(name: str, path: Path, out: Path, device: str = "cuda", facts: dict | None = None) -> dict:
    """Run case `name` on `device` over the dataset at `path`; append its result to `out` (JSON lines)."""
    began = time.perf_counter()
    found = {"precision": None, "detail": ""}
    if name in MULTI_ARGS and device != "cuda":
        status, found["detail"] = "skipped", REHEARSAL
    elif name in MULTI_ARGS and torch.cuda.device_count() < 2:
        status, found["detail"] = "skipped", f"{MULTI_GPU}; this machine has {torch.cuda.device_count()}"
    else:
        try:
            if name in TRAIN_CASES:
                found = tiny_train(path, device, case_options(name, device))
            elif name in GATHER_CASES:
                found = GATHER_CASES[name](path, device)
            else:
                found = cli_train(path, name)
            status = "passed"
        except Exception:  # noqa: BLE001 -- recorded, the next case runs
            status, found["detail"] = "failed", traceback.format_exc()[-3000:]
    result = {"case": name, "status": status, "seconds": round(time.perf_counter() - began, 1), "device": device}
    result |= found | {"options": case_options(name, device)} | (facts or gpu_facts())
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    shown = "" if status == "passed" else f": {found['detail']}"
    print(f"{name}: {status} ({result['seconds']}s, precision {found['precision']}){shown}", flush=True)
    return result


def prepare(root: Path) -> Path:
    """A tiny arxiv-shaped synthetic dataset under `root` (made once)."""
    from gnnsys.datasets import PrepareOptions, write_dataset
    from gnnsys.datasets.synthetic import read_synthetic

    path = root / "arxiv-0.01"
    if not (path / "meta.json").is_file():
        write_dataset(read_synthetic("ogbn-arxiv", scale=0.01), path, PrepareOptions(progress=False))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "gnnsys-gpu-smoke")
    p.add_argument("--out", type=Path, default=Path("gpu_smoke.jsonl"))
    p.add_argument("--case", action="append", choices=CASES, help="run only these cases (repeatable)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: rehearse the cases on the CPU")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_smoke: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    if args.device == "cuda" and torch.cuda.device_count() < 2:
        print(f"gpu_smoke: one GPU: the two-rank cases are skipped ({MULTI_GPU})", flush=True)
    os.environ.setdefault("GNNSYS_LOG", "warning")
    path = prepare(args.root)
    facts = gpu_facts()
    results = [run_case(name, path, args.out, args.device, facts) for name in args.case or CASES]
    return int(any(r["status"] == "failed" for r in results))


if __name__ == "__main__":
    sys.exit(main())
