"""Effective bandwidth of feature gathers into GPU memory (needs a CUDA GPU).

For rows of 128 B .. 4 KiB, aligned (stride a multiple of 128 B, the
features.bin layout) and unaligned (stride = row bytes - 4, in-memory rows),
a batch of random row ids is gathered into device memory by:

  zero-copy    the Triton kernel reading pinned host rows over PCIe (PinnedFeatures)
  cpu-gather   numba gather into a pinned buffer + async copy (StagedFeatures)
  gpu-resident the Triton kernel reading rows already in GPU memory (GPUFeatures)
  memcpy       a pinned -> device cudaMemcpy of the same bytes, contiguous (the PCIe limit)

Each is timed with CUDA events, median of --repeats runs after a warm-up;
bandwidth = gathered bytes / time, and ratios to memcpy are in the same run.
Every method's rows are compared with the zero-copy gather's before timing.
Writes benchmarks/results/bench_gather_gpu.json and .png (no .png with
--no-plot or without matplotlib). Results of its run on an NVIDIA H200 (bf16-mixed, the default precision
there): benchmarks/results/gpu_check_h200/.

    python benchmarks/bench_gather_gpu.py [--row-bytes 128,512,4096] [--table-mib 2048]
    python benchmarks/bench_gather_gpu.py --row-bytes 512,2432 --table-mib 256 --batch 50000 --repeats 3  # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
from plotting import can_plot

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--row-bytes",
        default="128,256,512,1024,2048,4096",
        help="comma-separated row sizes in bytes (multiples of 128)",
    )
    p.add_argument("--table-mib", type=int, default=2048, help="size of the feature table")
    p.add_argument("--batch", type=int, default=200_000, help="row ids per gather")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-programs", type=int, default=None, help="gather grid cap (default: 2 per SM)")
    p.add_argument("--out", type=Path, default=RESULTS / "bench_gather_gpu.json")
    p.add_argument("--no-plot", action="store_true", help="write the JSON only")
    return p.parse_args(argv)


def timed(fn, repeats: int) -> float:
    """Median seconds of fn() over `repeats` runs (after one warm-up), by CUDA events."""
    fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def bench_case(row_bytes: int, aligned: bool, args) -> dict:
    """All methods for one row size and layout."""
    from gnnsys.storage import RowTable
    from gnnsys.storage.gpu_features import GPUFeatures
    from gnnsys.storage.pinned import PinnedFeatures
    from gnnsys.storage.staged import StagedFeatures

    dim = row_bytes // 4 - (0 if aligned else 1)
    num_rows = args.table_mib * 2**20 // row_bytes
    x = torch.randn(num_rows, dim)
    rows = RowTable.from_tensor(x) if not aligned else RowTable(_padded(x, row_bytes), dim, torch.float32)
    ids = torch.randint(0, num_rows, (args.batch,), device="cuda")
    nbytes = args.batch * dim * 4
    out = torch.empty(args.batch, dim, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    result = {
        "row_bytes": row_bytes,
        "aligned": aligned,
        "dim": dim,
        "stride": rows.table.shape[1],
        "batch": args.batch,
        "gathered_bytes": nbytes,
        "seconds": {},
    }
    result["seconds"]["memcpy"] = timed(lambda: dev.copy_(host, non_blocking=True), args.repeats)
    with PinnedFeatures(rows, max_programs=args.max_programs, progress=False) as pinned:
        want = pinned.gather(ids)
        result["seconds"]["zero-copy"] = timed(lambda: pinned.gather_async(ids, out), args.repeats)
        staged = StagedFeatures(rows)
        assert torch.equal(staged.gather(ids), want)
        result["seconds"]["cpu-gather"] = timed(lambda: staged.gather_async(ids, out), args.repeats)
        gpu = GPUFeatures.from_rows(rows, max_programs=args.max_programs, progress=False)
        assert torch.equal(gpu.gather(ids), want)
        result["seconds"]["gpu-resident"] = timed(lambda: gpu.gather_async(ids, out), args.repeats)
    result["gb_per_s"] = {k: nbytes / t / 1e9 for k, t in result["seconds"].items()}
    result["vs_memcpy"] = {k: result["seconds"]["memcpy"] / t for k, t in result["seconds"].items()}
    return result


def _padded(x: torch.Tensor, stride: int):
    table = torch.zeros(x.shape[0], stride, dtype=torch.uint8)
    table[:, : x.shape[1] * 4] = x.view(torch.uint8)
    return table.numpy()


def machine() -> dict:
    import triton

    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def plot(results: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, aligned in zip(axes, (True, False)):
        rs = [r for r in results if r["aligned"] == aligned]
        for method in rs[0]["gb_per_s"]:
            ax.plot([r["row_bytes"] for r in rs], [r["gb_per_s"][method] for r in rs], marker="o", label=method)
        ax.set(xscale="log", xlabel="row bytes", title="aligned (128 B stride)" if aligned else "unaligned")
    axes[0].set_ylabel("effective GB/s")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "bench_gather_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured", file=sys.stderr
        )
        return 2
    from gnnsys.atomic import atomic_write_bytes

    sizes = [int(s) for s in args.row_bytes.split(",")]
    results = []
    for row_bytes in sizes:
        for aligned in (True, False):
            results.append(bench_case(row_bytes, aligned, args))
            r = results[-1]
            print(
                f"{row_bytes:5d} B {'aligned  ' if aligned else 'unaligned'} "
                + "  ".join(f"{k} {v:6.1f} GB/s" for k, v in r["gb_per_s"].items()),
                flush=True,
            )
    report = {
        "benchmark": "bench_gather_gpu",
        "machine": machine(),
        "config": vars(args) | {"out": str(args.out)},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out, json.dumps(report, indent=2).encode())
    print(f"wrote {args.out}")
    if not args.no_plot and can_plot(args.out.with_suffix(".png")):
        plot(results, args.out.with_suffix(".png"))
        print(f"wrote {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
