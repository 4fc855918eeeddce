"""The Triton row-gather kernel: rows of a byte table -> a dense device tensor.

The table is a [num_rows, row_stride] uint8 tensor in GPU memory or in pinned
host memory; for pinned memory the GPU reads the rows itself over PCIe through
unified virtual addressing (zero-copy, PyTorch-Direct), with no staging copy.
The kernel copies bits, so float32/float16/bfloat16 rows are all the same to it:

- word size = gcd(16, row stride, row bytes, both pointers' alignment)
  (GraphBolt); 16-byte words are int32 x 4 with alignment hints, so the
  compiler emits 128-bit vector loads;
- when a row may start inside a 128-byte line (in-memory tables whose stride
  is not a multiple of 128), each row's column window is shifted back to the
  line boundary and the first threads idle (Min et al. / DGL), so every
  warp's reads begin on a 128-byte boundary;
- the grid is capped (`max_programs`); programs stride over row tiles, so the
  gather leaves SMs to training kernels running beside it;
- an id outside [0, num_rows) is never read: its load is masked, its output
  row is zero, and the first offending position is recorded in `err` for
  the caller to report.

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
_MAX_BLOCK_W = 256  # words of one row handled per step
_TILE_WORDS = 1024  # words per program per step (BLOCK_R * BLOCK_W)
_WORD_DTYPES = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


@triton.jit
def _gather_rows_kernel(table_ptr, ids_ptr, out_ptr, err_ptr, n_ids, num_rows, src_stride_w, dst_stride_w,
                        row_w, span_w, base_off_w, LINE_W: tl.constexpr, ROTATE: tl.constexpr,
                        VEC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    r_ar = tl.arange(0, BLOCK_R)
    c_ar = tl.arange(0, BLOCK_W)
    num_tiles = (n_ids + BLOCK_R - 1) // BLOCK_R
    for tile in range(pid, num_tiles, nprog):
        pos = (tile * BLOCK_R + r_ar).to(tl.int64)
        in_batch = pos < n_ids
        ids = tl.load(ids_ptr + pos, mask=in_batch, other=0).to(tl.int64)
        ok = (ids >= 0) & (ids < num_rows)
        tl.atomic_min(err_ptr + r_ar * 0, pos, mask=in_batch & ~ok)
        valid = in_batch & ok
        src_row = tl.multiple_of(tl.where(ok, ids, 0) * src_stride_w, VEC)  # bad ids: in-table address, load masked
        dst_row = tl.multiple_of(pos * dst_stride_w, VEC)
        if ROTATE:
            shift = (base_off_w + src_row) % LINE_W  # words between the row start and its 128-byte line
        else:
            shift = src_row * 0
        for c0 in range(0, span_w, BLOCK_W):
            cols = c0 - shift[:, None] + c_ar[None, :]
            in_row = (cols >= 0) & (cols < row_w)
            words = tl.load(table_ptr + src_row[:, None] + cols, mask=valid[:, None] & in_row, other=0)
            tl.store(out_ptr + dst_row[:, None] + cols, words, mask=in_batch[:, None] & in_row)


@dataclass(frozen=True)
class GatherPlan:
    """How rows are copied: word size in bytes, words per 16-byte vector, and
    whether rows need the 128-byte rotation."""

    word: int
    vec: int
    rotate: bool
    row_w: int
    src_stride_w: int
    base_off_w: int

    @property
    def line_w(self) -> int:
        return LINE_BYTES // min(self.word, 4)

    @property
    def elem(self) -> int:
        """Bytes of the element type the kernel loads (at most 4; 16-byte words are 4 x int32)."""
        return min(self.word, 4)


def plan_gather(table_ptr: int, src_stride: int, out_ptr: int, row_bytes: int) -> GatherPlan:
    """The widest word that divides the row stride, the row bytes and both
    pointers (at most 16 bytes), and whether rows start off 128-byte lines."""
    word = math.gcd(16, src_stride, row_bytes, table_ptr, out_ptr)
    elem = min(word, 4)
    rotate = src_stride % LINE_BYTES != 0 or table_ptr % LINE_BYTES != 0
    return GatherPlan(word=word, vec=word // elem, rotate=rotate, row_w=row_bytes // elem,
                      src_stride_w=src_stride // elem, base_off_w=(table_ptr % LINE_BYTES) // elem)


def default_max_programs(device: torch.device) -> int:
    """The gather's grid cap: two programs per SM on a GPU (about 34K threads on
    an H100), so training kernels keep most SMs; 4 in the interpreter."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def gather_rows(table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor,
                max_programs: int | None = None) -> torch.Tensor:
    """out[i] = bytes of row ids[i] of `table` (a contiguous [num_rows, stride]
    uint8 tensor); `out` is a contiguous [len(ids), dim] tensor on the compute
    device. Returns `err`, a one-element int64 tensor on that device holding
    the first position whose id is outside the table, or len(ids) if none
    (reading it synchronises; the gather itself never reads outside the table)."""
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
    return _launch(table, ids.to(out.device, non_blocking=True), out, err, row_bytes,
                   max_programs or default_max_programs(out.device))


def _launch(table, ids, out, err, row_bytes, max_programs):
    plan = plan_gather(table.data_ptr(), table.shape[1], out.data_ptr(), row_bytes)
    word_dtype = _WORD_DTYPES[plan.elem]
    src = table.view(word_dtype)
    dst = out.view(torch.uint8).view(word_dtype)
    block_w = min(triton.next_power_of_2(plan.row_w), _MAX_BLOCK_W)
    block_r = max(1, _TILE_WORDS // block_w)
    span_w = plan.row_w + (plan.line_w - 1 if plan.rotate else 0)
    grid = (min(triton.cdiv(ids.shape[0], block_r), max_programs),)
    with torch.cuda.device(out.device) if out.device.type == "cuda" else nullcontext():
        _gather_rows_kernel[grid](src, ids, dst, err, ids.shape[0], table.shape[0], plan.src_stride_w, plan.row_w,
                                  plan.row_w, span_w, plan.base_off_w, LINE_W=plan.line_w, ROTATE=plan.rotate,
                                  VEC=plan.vec, BLOCK_R=block_r, BLOCK_W=block_w, num_warps=4)
    return err
