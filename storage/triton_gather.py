"""The Triton row-gather kernel: rows of a byte table -> a dense device tensor.

The table is a [num_rows, row_stride] uint8 tensor in GPU memory or in pinned
host memory; for pinned memory the GPU reads the rows itself over PCIe through
unified virtual addressing (zero-copy, PyTorch-Direct), with no staging copy.
The kernel copies bits, so float32/float16/bfloat16 rows are all the same to it:

- loads and stores have their own vector width: 16 bytes where the table's
  row stride and pointer allow (loads) and where the output's row bytes and
  pointer allow (stores), else the widest power of two that divides them
  (GraphBolt). Sizes and offsets reach the kernel in units of those vectors,
  so Triton knows their divisibility and emits 128-bit `ld.global.v4` /
  `st.global.v4` (tests/storage/test_gather_ptx.py compiles the kernel for
  sm_90 and checks the PTX);
- each row is loaded whole, padding included, up to the next load vector
  (the stride always has room for it); only the store is cut to the row;
- when a row may start inside a 128-byte line (in-memory tables whose stride
  is not a multiple of 128), each row's column window is shifted back to the
  line boundary and the first threads idle (Min et al. / DGL), so every
  warp's reads begin on a 128-byte boundary;
- the grid is capped (`max_programs`); programs stride over row tiles, so the
  gather leaves SMs to training kernels running beside it;
- an id outside [0, num_rows) is never read: its load is masked, its output
  row is zero, and the first offending position is recorded in `err` for
  the caller to report.

What is verified where: the semantics (bit-exact rows, masking, rotation,
strided ids) in Triton's interpreter on the CPU (tests/storage/
test_triton_gather.py); the instructions in the PTX Triton compiles for
sm_90 without a GPU; speed only on a GPU (benchmarks/bench_gather_gpu.py;
not measured yet).

Import this module only when a kernel is about to run (see gnnsys._capabilities).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

LINE_BYTES = 128  # PCIe read request / GPU cache line
_MAX_BLOCK_W = 256  # elements of one row handled per step
_TILE_ELEMS = 1024  # elements per program per step (BLOCK_R * BLOCK_W)
_ELEM_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


@triton.jit
def _gather_rows_kernel(
    table_ptr,
    ids_ptr,
    out_ptr,
    err_ptr,
    n_ids,
    num_rows,
    src_stride_v,
    row_v,
    load_v,
    base_off_v,
    LINE_V: tl.constexpr,
    ROTATE: tl.constexpr,
    LOAD_VEC: tl.constexpr,
    STORE_VEC: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    """out[i] = the first row_v * STORE_VEC elements of table row ids[i]. Sizes
    ending in _v count vectors: src_stride_v and load_v load vectors (LOAD_VEC
    elements), row_v store vectors (STORE_VEC elements; the output's row stride)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    r_ar = tl.arange(0, BLOCK_R)
    c_ar = tl.arange(0, BLOCK_W)
    row_w = row_v * STORE_VEC  # elements stored per row
    load_w = load_v * LOAD_VEC  # elements loaded per row: whole vectors, padding included
    if ROTATE:
        span = load_w + (LINE_V - 1) * LOAD_VEC
    else:
        span = load_w
    num_tiles = tl.cdiv(n_ids, BLOCK_R)
    for tile in range(pid, num_tiles, nprog):
        pos = (tile * BLOCK_R + r_ar).to(tl.int64)
        in_batch = pos < n_ids
        ids = tl.load(ids_ptr + pos, mask=in_batch, other=0).to(tl.int64)
        ok = (ids >= 0) & (ids < num_rows)
        tl.atomic_min(err_ptr + r_ar * 0, pos, mask=in_batch & ~ok)
        valid = in_batch & ok
        row_v_start = tl.where(ok, ids, 0) * src_stride_v  # bad ids: an in-table address, the load is masked
        src_row = row_v_start * LOAD_VEC
        dst_row = pos * row_w
        if ROTATE:
            shift = ((base_off_v + row_v_start) % LINE_V) * LOAD_VEC  # elements back to the row's 128-byte line
        else:
            shift = tl.zeros_like(src_row)
        for c0 in range(0, span, BLOCK_W):
            cols = c0 - shift[:, None] + c_ar[None, :]
            if ROTATE:
                loaded = (cols >= 0) & (cols < load_w)
                stored = (cols >= 0) & (cols < row_w)
            else:
                loaded = cols < load_w
                stored = cols < row_w
            words = tl.load(table_ptr + src_row[:, None] + cols, mask=valid[:, None] & loaded, other=0)
            tl.store(out_ptr + dst_row[:, None] + cols, words, mask=in_batch[:, None] & stored)


@dataclass(frozen=True)
class GatherPlan:
    """How rows are copied, in elements of `elem` bytes (1, 2 or 4): loads of
    `load_vec` elements, stores of `store_vec`; rows are `row_v` store vectors
    long and `load_v` load vectors are read of each (the row rounded up to a
    whole load vector); the table's stride is `src_stride_v` load vectors and
    its start `base_off_v` load vectors past a 128-byte line; `rotate`: rows
    may start inside a line."""

    elem: int
    load_vec: int
    store_vec: int
    rotate: bool
    row_v: int
    load_v: int
    src_stride_v: int
    base_off_v: int

    @property
    def line_v(self) -> int:
        """Load vectors per 128-byte line."""
        return LINE_BYTES // (self.elem * self.load_vec)


def plan_gather(table_ptr: int, src_stride: int, out_ptr: int, row_bytes: int) -> GatherPlan:
    """Load vectors: the widest power of two (at most 16 bytes) dividing the
    table's stride and pointer; store vectors: the widest dividing the row bytes
    and the output pointer; and whether rows start off 128-byte lines."""
    load_bytes = math.gcd(16, src_stride, table_ptr)
    store_bytes = math.gcd(16, row_bytes, out_ptr)
    elem = min(4, load_bytes, store_bytes)
    load_vec = load_bytes // elem
    row_w = row_bytes // elem
    return GatherPlan(
        elem=elem,
        load_vec=load_vec,
        store_vec=store_bytes // elem,
        rotate=src_stride % LINE_BYTES != 0 or table_ptr % LINE_BYTES != 0,
        row_v=row_bytes // store_bytes,
        load_v=-(-row_w // load_vec),
        src_stride_v=src_stride // load_bytes,
        base_off_v=(table_ptr % LINE_BYTES) // load_bytes,
    )


def default_max_programs(device: torch.device) -> int:
    """The gather's grid cap: two programs per SM on a GPU (about 34K threads on
    an H100), so training kernels keep most SMs; 4 in the interpreter."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def gather_rows(
    table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, max_programs: int | None = None
) -> torch.Tensor:
    """out[i] = bytes of row ids[i] of `table` (a contiguous [num_rows, stride]
    uint8 tensor); `out` is a contiguous [len(ids), dim] tensor on the compute
    device; `ids` any 1-D int32/int64 tensor (strided ones are made contiguous).
    Returns `err`, a one-element int64 tensor on that device holding the first
    position whose id is outside the table, or len(ids) if none (the gather
    itself never reads outside the table)."""
    if table.dtype != torch.uint8 or table.dim() != 2 or not table.is_contiguous():
        raise ValueError("table must be a contiguous 2-D uint8 tensor of rows")
    if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
        raise TypeError(f"ids must be a 1-D int32 or int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}")
    n = ids.shape[0]
    row_bytes = out.shape[1] * out.element_size() if out.dim() == 2 else -1
    if out.shape[0] != n or not out.is_contiguous() or not 0 <= row_bytes <= table.shape[1]:
        raise ValueError(f"out must be a contiguous [{n}, dim] tensor with dim * itemsize <= {table.shape[1]}")
    err = torch.full((1,), n, dtype=torch.int64, device=out.device)
    if n == 0 or row_bytes == 0:
        return err
    grid, args, meta = launch_args(
        table,
        ids.to(out.device, non_blocking=True).contiguous(),
        out,
        err,
        max_programs or default_max_programs(out.device),
    )
    with torch.cuda.device(out.device) if out.device.type == "cuda" else nullcontext():
        _gather_rows_kernel[grid](*args, **meta)
    return err


def launch_args(table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, err: torch.Tensor, max_programs: int):
    """(grid, positional arguments, constexpr and launch keywords) of the kernel
    for a checked gather_rows call: the one place a launch is described (the PTX
    test compiles exactly what would be launched)."""
    row_bytes = out.shape[1] * out.element_size()
    plan = plan_gather(table.data_ptr(), table.shape[1], out.data_ptr(), row_bytes)
    elem_dtype = _ELEM_DTYPES[plan.elem]
    block_w = min(triton.next_power_of_2(plan.load_v * plan.load_vec), _MAX_BLOCK_W)
    block_r = max(1, _TILE_ELEMS // block_w)
    grid = (min(triton.cdiv(ids.shape[0], block_r), max_programs),)
    args = (
        table.view(elem_dtype),
        ids,
        out.view(torch.uint8).view(elem_dtype),
        err,
        ids.shape[0],
        table.shape[0],
        plan.src_stride_v,
        plan.row_v,
        plan.load_v,
        plan.base_off_v,
    )
    meta = dict(
        LINE_V=plan.line_v,
        ROTATE=plan.rotate,
        LOAD_VEC=plan.load_vec,
        STORE_VEC=plan.store_vec,
        BLOCK_R=block_r,
        BLOCK_W=block_w,
        num_warps=4,
    )
    return grid, args, meta
