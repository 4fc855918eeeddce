"""The Triton row-gather kernel: rows of a byte table -> a dense device tensor.

The table is a [num_rows, row_stride] uint8 tensor in GPU memory or in pinned
host memory; for pinned memory the GPU reads the rows itself over PCIe through
unified virtual addressing (zero-copy, PyTorch-Direct), with no staging copy.
The kernel copies bits, so float32/float16/bfloat16 rows are all the same to it.
How it is launched is decided in storage/gather_plan.py:

- loads and stores have their own vector width: 16 bytes where the table's
  row stride and pointer allow (loads) and where the output's row bytes and
  pointer allow (stores), else the widest power of two that divides them
  (GraphBolt). Sizes and offsets reach the kernel in units of those vectors,
  so Triton knows their divisibility and emits 128-bit `ld.global.v4` /
  `st.global.v4`;
- each row is loaded whole, padding included, up to the next load vector
  (the stride always has room for it); only the store is cut to the row;
- when a row may start inside a 128-byte line (in-memory tables whose stride
  is not a multiple of 128, or a table starting off a line), each row's
  column window is shifted back to the line boundary and the first threads
  idle (Min et al. / DGL), so every warp's reads begin on a 128-byte
  boundary; the tile is as wide as that rotated span, so a row is one step
  (one round trip), not two;
- a tile holds many rows (tens for rows of a few hundred bytes) and the grid
  is a thread budget (threads a multiprocessor, LaunchConfig); its programs
  loop over the tiles, and each loads the next tile's ids before this tile's
  rows, so the id round trip hides behind the row loads;
- an id outside [0, num_rows) is never read: its load is masked, its output
  row is zero; each program keeps the first offending position it saw in
  registers and, after its last tile, one atomic records the smallest in
  `err` for the caller to report (no atomic or barrier inside the loop);
- optionally (LaunchConfig.sort, chosen per GPU by the sweep) the ids are
  sorted on the device first, so rows are read in address order, and each
  row is stored through the permutation to its caller's position.

What is verified where: the semantics (bit-exact rows, masking, rotation,
strided ids, every row size) in Triton's interpreter on the CPU (tests/storage/
test_triton_gather.py); the instructions in the PTX Triton compiles for
sm_90 without a GPU (tests/storage/test_gather_ptx.py: vector widths,
registers, spills); speed only on a GPU (benchmarks/bench_gather_gpu.py,
benchmarks/sweep_gather_gpu.py).

Import this module only when a kernel is about to run (see gnnsys._capabilities).
"""

from __future__ import annotations

import functools
import logging
from contextlib import nullcontext

import torch
import triton
import triton.language as tl

from .gather_plan import LaunchConfig, SMLimits, config_for, plan_gather, read_tuning, resident_programs, tile_shape

log = logging.getLogger(__name__)

INTERPRETER_PROGRAMS = 4  # the grid in Triton's interpreter (programs run one after another)
MAX_IDS = 1 << 29  # ids a gather: positions stay int32 in the kernel (registers), with room for a tile past the end
_ELEM_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


@triton.jit
def _gather_rows_kernel(
    table_ptr,
    ids_ptr,
    perm_ptr,
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
    PERMUTED: tl.constexpr,
):
    """out[i] = the first row_v * STORE_VEC elements of table row ids[i]; with
    PERMUTED (ids sorted), out[perm[i]]. Sizes ending in _v count vectors:
    src_stride_v and load_v load vectors (LOAD_VEC elements), row_v store
    vectors (STORE_VEC elements; the output's row stride)."""
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
    first = pid * BLOCK_R + r_ar  # positions are int32: gather_rows takes at most MAX_IDS ids
    ids = tl.load(ids_ptr + first, mask=first < n_ids, other=0)
    if PERMUTED:
        at = tl.load(perm_ptr + first, mask=first < n_ids, other=0).to(tl.int32)
    first_bad = tl.zeros([BLOCK_R], dtype=tl.int32) + n_ids  # per row slot: the first bad position it saw
    for tile in range(pid, num_tiles, nprog):
        pos = tile * BLOCK_R + r_ar
        next_pos = pos + nprog * BLOCK_R
        in_next = next_pos < n_ids
        next_ids = tl.load(ids_ptr + next_pos, mask=in_next, other=0)  # in flight during this tile's rows
        if PERMUTED:
            dst = at  # where in `out` (and in the caller's ids) this tile's rows go
            next_at = tl.load(perm_ptr + next_pos, mask=in_next, other=0).to(tl.int32)
        else:
            dst = pos
        in_batch = pos < n_ids
        ok = (ids >= 0) & (ids < num_rows)
        first_bad = tl.minimum(first_bad, tl.where(in_batch & ~ok, dst, n_ids))
        valid = in_batch & ok
        row_v_start = tl.where(ok, ids, 0).to(tl.int64) * src_stride_v  # bad ids: row 0, the load is masked
        src_row = row_v_start * LOAD_VEC
        dst_row = dst.to(tl.int64) * row_w
        if ROTATE:
            shift = ((base_off_v + row_v_start) % LINE_V) * LOAD_VEC  # elements back to the row's 128-byte line
        for c0 in range(0, span, BLOCK_W):  # one step unless the row is wider than a step
            if ROTATE:
                cols = c0 - shift[:, None] + c_ar[None, :]
                loaded = (cols >= 0) & (cols < load_w)
                stored = (cols >= 0) & (cols < row_w)
            else:
                cols = c0 + c_ar[None, :]
                loaded = cols < load_w
                stored = cols < row_w
            words = tl.load(table_ptr + src_row[:, None] + cols, mask=valid[:, None] & loaded, other=0)
            tl.store(out_ptr + dst_row[:, None] + cols, words, mask=in_batch[:, None] & stored)
        ids = next_ids
        if PERMUTED:
            at = next_at
    bad = tl.min(first_bad, axis=0)
    tl.atomic_min(err_ptr, bad.to(tl.int64), mask=bad < n_ids)


@functools.cache
def tuned_configs(device_index: int):
    """The measured launch configs of GPU `device_index` (gather_plan.read_tuning; None: none), read once."""
    return read_tuning(torch.cuda.get_device_name(device_index))


@functools.cache
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def launch_config(load_bytes: int, device: torch.device) -> LaunchConfig:
    """The config a gather of rows of `load_bytes` on `device` uses: the GPU's
    measured one (benchmarks/sweep_gather_gpu.py) where there is one, else the default."""
    return config_for(load_bytes, tuned_configs(device.index or 0) if device.type == "cuda" else None)


def grid_programs(device: torch.device, config: LaunchConfig) -> int:
    """Programs of the grid: the config's thread budget on a GPU, INTERPRETER_PROGRAMS in the interpreter."""
    return config.programs(_multiprocessors(device.index or 0)) if device.type == "cuda" else INTERPRETER_PROGRAMS


def gather_rows(
    table: torch.Tensor,
    ids: torch.Tensor,
    out: torch.Tensor,
    max_programs: int | None = None,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """out[i] = bytes of row ids[i] of `table` (a contiguous [num_rows, stride]
    uint8 tensor); `out` is a contiguous [len(ids), dim] tensor on the compute
    device; `ids` any 1-D int32/int64 tensor (strided ones are made contiguous).
    `max_programs` caps the grid, `config` replaces launch_config's choice.
    Returns `err`, a one-element int64 tensor on that device holding the first
    position whose id is outside the table, or len(ids) if none (the gather
    itself never reads outside the table)."""
    if table.dtype != torch.uint8 or table.dim() != 2 or not table.is_contiguous():
        raise ValueError("table must be a contiguous 2-D uint8 tensor of rows")
    if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
        raise TypeError(f"ids must be a 1-D int32 or int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}")
    n = ids.shape[0]
    if n > MAX_IDS:
        raise ValueError(f"ids: {n} ids in one gather; at most {MAX_IDS}")
    row_bytes = out.shape[1] * out.element_size() if out.dim() == 2 else -1
    if out.shape[0] != n or not out.is_contiguous() or not 0 <= row_bytes <= table.shape[1]:
        raise ValueError(f"out must be a contiguous [{n}, dim] tensor with dim * itemsize <= {table.shape[1]}")
    err = torch.full((1,), n, dtype=torch.int64, device=out.device)
    if n == 0 or row_bytes == 0:
        return err
    grid, args, meta = launch_args(
        table, ids.to(out.device, non_blocking=True).contiguous(), out, err, max_programs, config
    )
    with torch.cuda.device(out.device) if out.device.type == "cuda" else nullcontext():
        _gather_rows_kernel[grid](*args, **meta)
    return err


def launch_args(
    table: torch.Tensor,
    ids: torch.Tensor,
    out: torch.Tensor,
    err: torch.Tensor,
    max_programs: int | None = None,
    config: LaunchConfig | None = None,
):
    """(grid, positional arguments, constexpr and launch keywords) of the kernel
    for a checked gather_rows call: the one place a launch is described (the PTX
    test and the benchmarks launch exactly this). With `config.sort` the ids are
    sorted here, on their device, and the kernel stores through the permutation.
    On a GPU the grid is cut to the programs its multiprocessors hold at once."""
    row_bytes = out.shape[1] * out.element_size()
    plan = plan_gather(table.data_ptr(), table.shape[1], out.data_ptr(), row_bytes)
    config = config or launch_config(plan.load_bytes, out.device)
    block_r, block_w = tile_shape(plan, config)
    elem_dtype = _ELEM_DTYPES[plan.elem]
    ids, perm = torch.sort(ids) if config.sort else (ids, ids)  # unsorted: perm is not read
    args = (
        table.view(elem_dtype),
        ids,
        perm,
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
        PERMUTED=config.sort,
        num_warps=config.warps,
    )
    programs = min(triton.cdiv(ids.shape[0], block_r), grid_programs(out.device, config))
    if out.device.type == "cuda":
        programs = min(programs, _multiprocessors(out.device.index or 0) * _resident(out.device, args, meta))
    return (min(programs, max_programs) if max_programs else programs,), args, meta


_RESIDENT: dict[tuple, int] = {}


def _resident(device: torch.device, args: tuple, meta: dict) -> int:
    """Programs of this launch a multiprocessor holds at once (gather_plan.resident_programs of the
    compiled kernel's registers and shared memory), once per device and constexpr set; when Triton
    does not tell the registers, what the multiprocessor's threads allow, with one warning."""
    key = (device.index, *sorted(meta.items()))
    if key not in _RESIDENT:
        props = torch.cuda.get_device_properties(device)
        limits = SMLimits(
            registers=getattr(props, "regs_per_multiprocessor", SMLimits.registers),
            threads=getattr(props, "max_threads_per_multi_processor", SMLimits.threads),
            shared_bytes=getattr(props, "shared_memory_per_multiprocessor", SMLimits.shared_bytes),
        )
        try:
            with torch.cuda.device(device):
                compiled = _gather_rows_kernel.warmup(*args, grid=(1,), **meta)  # compiles, launches nothing
                compiled._init_handles()  # loads it: sets n_regs
            registers, shared = int(compiled.n_regs), int(compiled.metadata.shared)
        except (AttributeError, TypeError) as e:  # a Triton without these internals
            log.warning("gather: the kernel's registers are unknown (%s); grid by threads alone", e)
            registers, shared = 0, 0
        _RESIDENT[key] = resident_programs(registers, meta["num_warps"], shared, limits)
    return _RESIDENT[key]
