"""The CUDA smoke cases of benchmarks/gpu_check.sh: one tiny run of each path
that only a GPU executes, one function per case.

    python benchmarks/gpu_smoke.py --root DIR --out cases.jsonl [--case NAME ...] [--list]

Each case's result ({"case", "status": "passed" | "failed" | "skipped",
"seconds", "detail"}) is appended to --out as one JSON line the moment the
case ends, so a run killed for time keeps every finished case. A tiny
synthetic dataset (arxiv-shaped x0.01) is prepared under --root first.
Exit status 0 when no case failed, 1 otherwise, 2 without CUDA.
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

MULTI_GPU = "NCCL multi-rank needs two GPUs"


def tiny_train(path, **options) -> str:
    """A 2-epoch train() on CUDA with `options`; the epoch losses, checked finite."""
    import gnnsys

    result = gnnsys.train(
        path, epochs=2, fanouts=(5, 5), batch_size=256, hidden=32, device="cuda", progress=False, **options
    )
    losses = [e["loss"] for e in result.epochs]
    assert all(math.isfinite(x) for x in losses), losses
    return f"losses {losses}"


def case_tiers_cpu_sampler(path):
    """SSD tier + GPU cache + victim buffer + lookahead window, CPU sampler."""
    return tiny_train(path, features="ssd", cache_gb=0.0005, victim_rows=512, lookahead=2, sampler="cpu")


def case_tiers_gpu_sampler(path):
    """As case_tiers_cpu_sampler with the GPU sampler (window ids copied from the GPU)."""
    return tiny_train(path, features="ssd", cache_gb=0.0005, victim_rows=512, lookahead=2, sampler="gpu")


def case_bf16_mixed(path):
    """bf16-mixed training on CUDA (aggregation in fp32 sums, rounded to bf16)."""
    return tiny_train(path, precision="bf16-mixed", sampler="gpu", features="gpu")


def case_fp16_mixed(path):
    """16-mixed training on CUDA (fp16 autocast with a gradient scaler)."""
    return tiny_train(path, precision="16-mixed", sampler="gpu", features="gpu")


def case_cache_gather(path):
    """A CUDA cache over pinned rows: gathers (repeats, misses, evictions) equal x[ids]."""
    import gnnsys
    from gnnsys.storage.cache import CachedFeatures, VictimBuffer, out_degree
    from gnnsys.storage.placement import unified

    ds = gnnsys.load_dataset(path)
    x = ds.features.gather(torch.arange(ds.num_nodes))
    base = VictimBuffer(unified(ds.features, "pinned", "cuda", progress=False).source, 256)
    score = out_degree(ds.indices.numpy(), ds.num_nodes)
    cache = CachedFeatures(base, ds.num_nodes // 10, "hybrid", score=score, device="cuda")
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, ds.num_nodes, (1000,), generator=g) for _ in range(6)]
    for j, ids in enumerate(batches):
        cache.set_window(batches[j + 1 : j + 3])
        got = cache.gather(ids.cuda() if j % 2 else ids)
        assert got.device == torch.device("cuda", torch.cuda.current_device()), got.device
        assert torch.equal(got.cpu(), x[ids]), f"batch {j}"
    cache.close()
    return f"stats {cache.stats()}, victim {base.stats()}"


def case_shared_cache_one_rank(path):
    """SharedCachedFeatures in a group of one rank: its wire device (ids and rows
    exchanged) decided for CUDA, gathers equal to x[ids]."""
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
            got = cache.gather(ids.cuda())
            assert torch.equal(got.cpu(), x[ids])
            return f"stats {cache.stats()}"
        finally:
            dist.destroy_process_group()


def cli_train(path, *args) -> str:
    """`gnnsys train PATH --device cuda ARGS` in a subprocess; its last output line."""
    import subprocess

    run = subprocess.run(
        [sys.executable, "-m", "gnnsys", "train", str(path), "--device", "cuda", "--epochs", "2", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    tail = (run.stdout + run.stderr).strip().splitlines()[-1:] or [""]
    assert run.returncode == 0, f"exit {run.returncode}: {(run.stdout + run.stderr)[-2000:]}"
    return tail[0]


def case_data_parallel_w2(path):
    """Data-parallel training, two ranks over NCCL."""
    return cli_train(path, "--workers", "2", "--fanouts", "5,5", "--batch-size", "256")


def case_shared_cache_w2(path):
    """Data-parallel training with the shared cache, two ranks over NCCL."""
    return cli_train(path, "--workers", "2", "--fanouts", "5,5", "--batch-size", "256", "--cache-gb", "0.001")


def case_gnnpipe_w2(path):
    """GNNPipe layer-parallel full-graph training, two workers."""
    return cli_train(path, "--mode", "fullgraph", "--workers", "2", "--layers", "4")


SINGLE = [
    case_tiers_cpu_sampler,
    case_tiers_gpu_sampler,
    case_bf16_mixed,
    case_fp16_mixed,
    case_cache_gather,
    case_shared_cache_one_rank,
]
MULTI = [case_data_parallel_w2, case_shared_cache_w2, case_gnnpipe_w2]
CASES = {f.__name__.removeprefix("case_"): f for f in SINGLE + MULTI}


def run_case(name: str, path: Path, out: Path) -> dict:
    """Run case `name` on the dataset at `path`; append its result to `out` (JSON lines)."""
    began = time.perf_counter()
    if CASES[name] in MULTI and torch.cuda.device_count() < 2:
        status, detail = "skipped", f"{MULTI_GPU}; this machine has {torch.cuda.device_count()}"
    else:
        try:
            status, detail = "passed", CASES[name](path)
        except Exception:  # noqa: BLE001 -- recorded, the next case runs
            status, detail = "failed", traceback.format_exc()[-3000:]
    result = {"case": name, "status": status, "seconds": round(time.perf_counter() - began, 1), "detail": detail}
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(f"{name}: {status} ({result['seconds']}s)" + ("" if status == "passed" else f": {detail}"), flush=True)
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
    p.add_argument("--case", action="append", choices=list(CASES), help="run only these cases (repeatable)")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    if not torch.cuda.is_available():
        print("gpu_smoke: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    if torch.cuda.device_count() < 2:
        print(f"gpu_smoke: one GPU: the two-rank cases are skipped ({MULTI_GPU})", flush=True)
    os.environ.setdefault("GNNSYS_LOG", "warning")
    path = prepare(args.root)
    results = [run_case(name, path, args.out) for name in args.case or CASES]
    return int(any(r["status"] == "failed" for r in results))


if __name__ == "__main__":
    sys.exit(main())
