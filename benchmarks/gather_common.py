"""What bench_gather_gpu.py and sweep_gather_gpu.py share: the table layouts,
their flags and presets, the dry run's estimate, one pinned table carved into
a table per case, kernel timing by CUDA events around back-to-back launches,
the machine facts.

Imports torch only inside the functions that run on a GPU, so both scripts
plan (--dry-run, --help, argument errors) on any machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from dataclasses import dataclass

LINE = 128  # bytes of a GPU cache line / PCIe read request
PAGE = 4096
OFFSET_BYTES = 64  # where torch's CPU allocator leaves a table: 64 B past a line
LAYOUTS = {
    "aligned": "base and stride on 128-byte lines (the features.bin layout, a page-aligned pinned table)",
    "offset": f"stride on lines, base {OFFSET_BYTES} B past a line (a tensor from torch's allocator)",
    "packed": "rows of row_bytes - 4 bytes back to back (an unpadded in-memory tensor)",
}
ASSUMED_GB_PER_S = 25.0  # the dry run's transfer estimate: PCIe 4.0, the slowest host link of an H100/H200
COMPILE_S = 2.0  # the dry run's estimate of one Triton compile


@dataclass(frozen=True)
class Shape:
    """The table of a case (`row_bytes`, `layout`): `dim` float32 values a row, `stride` bytes a row,
    starting `offset` bytes past a page."""

    layout: str
    row_bytes: int
    dim: int
    stride: int
    offset: int

    def rows(self, table_bytes: int) -> int:
        """Rows of a table of at most `table_bytes` bytes (offset included)."""
        return (table_bytes - self.offset) // self.stride


def shape(row_bytes: int, layout: str) -> Shape:
    """The table of `layout` for rows of `row_bytes` bytes."""
    if layout == "packed":
        return Shape(layout, row_bytes, (row_bytes - 4) // 4, row_bytes - 4, 0)
    stride = -(-row_bytes // LINE) * LINE
    return Shape(layout, row_bytes, row_bytes // 4, stride, OFFSET_BYTES if layout == "offset" else 0)


def int_list(text: str, low: int, high: int, multiple: int = 1) -> list[int]:
    """Distinct comma-separated integers in low..high (an argparse type: its errors name the value)."""
    values = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not an integer") from None
        if not low <= value <= high or value % multiple:
            more = f", a multiple of {multiple}" if multiple > 1 else ""
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}{more}")
        values.append(value)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text} repeats a value")
    return values


def row_bytes_list(text: str) -> list[int]:
    """--row-bytes: float32 rows of 16 B .. 64 KiB."""
    return int_list(text, 16, 1 << 16, multiple=4)


def layout_list(text: str) -> list[str]:
    """--layouts: names of LAYOUTS."""
    names = text.split(",")
    bad = [n for n in names if n not in LAYOUTS]
    if bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct names among {', '.join(LAYOUTS)}")
    return names


def apply_preset(args: argparse.Namespace, presets: dict) -> argparse.Namespace:
    """Fill every flag left unset (None) from presets["quick" if args.quick else "full"]; flags given win."""
    for name, value in presets["quick" if args.quick else "full"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def estimate(moved: int, compiles: int) -> dict:
    """The dry run's estimate of a run that moves `moved` bytes over PCIe and
    compiles `compiles` kernels: {"pcie_bytes", "compiles", "estimate_s"}."""
    seconds = moved / (ASSUMED_GB_PER_S * 1e9) + compiles * COMPILE_S + 5
    return {"pcie_bytes": moved, "compiles": compiles, "estimate_s": round(seconds, 1)}


def describe_estimate(plan: dict, args) -> str:
    """The end of the dry run's plan line: the timed launches (args.calls,
    args.repeats) and `plan`'s estimate (from `estimate`)."""
    return (
        f"{args.calls} calls x (1 + {args.repeats}) runs; about {plan['estimate_s']:.0f} s on a GPU "
        f"({plan['pcie_bytes'] / 1e9:.0f} GB over PCIe at {ASSUMED_GB_PER_S:.0f} GB/s, {plan['compiles']} compiles)"
    )


def check_table(parser: argparse.ArgumentParser, args) -> None:
    """--table-mib must hold a row of every case and be larger than a GPU's L2 cache (64 MiB)."""
    if args.table_mib < 64:
        parser.error(f"--table-mib: {args.table_mib} MiB is below 64 (the table must not fit a GPU's L2 cache)")
    if args.batch < 1:
        parser.error(f"--batch: {args.batch} must be >= 1")


def cuda_or_exit(script: str) -> int | None:
    """None when CUDA is available; else prints one line and gives the exit status 2."""
    import torch

    if torch.cuda.is_available():
        return None
    print(f"{script}: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured", flush=True)
    return 2


class Tables:
    """One table of `table_bytes` (+ a page of slack), numbered int32 words,
    in pinned host memory and in GPU memory; `view(shape, where)` is a case's
    [rows, stride] uint8 table in it ("host" or "gpu"), its base checked."""

    def __init__(self, table_bytes: int):
        import torch

        self.table_bytes = table_bytes
        size = table_bytes + 2 * PAGE
        self.gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
        skip = (-self.gpu.data_ptr()) % PAGE
        self.gpu = self.gpu[skip : skip + table_bytes + PAGE]
        torch.arange(self.gpu.numel() // 4, dtype=torch.int32, device="cuda", out=self.gpu.view(torch.int32))
        raw = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        skip = (-raw.data_ptr()) % PAGE
        self.host = raw[skip : skip + table_bytes + PAGE]
        self.host.copy_(self.gpu)
        torch.cuda.synchronize()

    def view(self, s: Shape, where: str):
        """The [rows, stride] table of shape `s` in host or GPU memory (its base asserted)."""
        buf = self.host if where == "host" else self.gpu
        table = buf[s.offset : s.offset + s.rows(self.table_bytes) * s.stride].view(-1, s.stride)
        assert table.data_ptr() % PAGE == s.offset, (s, table.data_ptr())  # aligned: on a line; offset: 64 B past
        return table


def per_call(fn, calls: int, repeats: int) -> float:
    """Device seconds per call of fn(): CUDA events around `calls` back-to-back
    calls, the median of `repeats` such runs, after one warm-up run."""
    import torch

    times = []
    for i in range(repeats + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        if i:
            times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def host_per_call(fn, calls: int) -> float:
    """Host seconds per call of fn() (what a caller's thread spends issuing it), the GPU idle before."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return seconds


def same_rows(out, table, ids, s: Shape, sample: int = 4096) -> bool:
    """Whether the first `sample` gathered rows equal the table's rows (bit for bit)."""
    import torch

    idx = ids[:sample].cpu()
    want = table[idx.to(table.device)][:, : s.dim * 4].cpu()
    return torch.equal(out[:sample].view(torch.uint8).cpu(), want)


def machine() -> dict:
    """The GPU, its multiprocessors, torch, Triton, CUDA and the host."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "multiprocessors": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
