"""Checks and counts of node ids shared by datasets, samplers and feature sources (a leaf)."""

from __future__ import annotations

import numba
import numpy as np
import torch


def check_ids(ids: torch.Tensor, num_rows: int, name: str = "ids") -> torch.Tensor:
    """Raise IndexError naming the first id outside [0, num_rows)."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be int32 or int64, got {ids.dtype}")
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num_rows:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{name}: id {bad} out of range [0, {num_rows})")
    return ids


def index_to_ids(index, num_rows: int) -> torch.Tensor:
    """The row ids an index of `x[index]` selects: a slice, a boolean mask, or
    ids (a tensor, list or array); a Python int gives a 0-d tensor."""
    if isinstance(index, slice):
        return torch.arange(*index.indices(num_rows))
    ids = torch.as_tensor(index)
    if ids.dtype == torch.bool:
        return ids.nonzero().flatten()
    return ids


def gather_output(out, rows: int, dim: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """`out` checked to be a contiguous [rows, dim] tensor of `dtype` on
    `device`, or a new one there when `out` is None (a gather's destination)."""
    if out is None:
        return torch.empty((rows, dim), dtype=dtype, device=device)
    if out.shape != (rows, dim) or out.dtype != dtype or out.device != torch.device(device) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {dtype} tensor of shape {(rows, dim)} on {device}")
    return out


def indices_on(device, *arrays) -> list[torch.Tensor]:
    """The index arrays (numpy, any integer type) as int64 tensors on `device`:
    on the CPU views of them, elsewhere one copy of all of them together,
    from pinned memory on CUDA and without the host waiting for it, so a
    gather's few small index arrays cost one transfer instead of a blocking
    copy each."""
    device = torch.device(device)
    tensors = [torch.from_numpy(np.ascontiguousarray(a, np.int64)) for a in arrays]
    if device.type == "cpu":
        return tensors
    packed = torch.cat(tensors)
    if device.type == "cuda":
        packed = packed.pin_memory()
    return list(torch.split(packed.to(device, non_blocking=True), [t.shape[0] for t in tensors]))


def gather_distinct(ids, out, shape: tuple, dtype: torch.dtype, device, fill) -> torch.Tensor:
    """A gather of rows `ids` built on `fill(uniq, out, at)`, which writes the
    row of each distinct id uniq[i] into out[at[i]] (tensors; uniq sorted):
    `out` is checked or allocated (gather_output), each distinct id is read
    once into its first position, repeats are copied from there. So a tier
    reads each distinct row once, straight into the caller's rows, with no
    intermediate [distinct, dim] buffer."""
    out, uniq, inverse = distinct_request(ids, out, shape, dtype, device)
    if uniq is None:
        return out
    n = inverse.shape[0]
    first = np.empty(uniq.shape[0], np.int64)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)
    fill(torch.from_numpy(uniq), out, torch.from_numpy(first))
    if n > uniq.shape[0]:
        repeat = np.flatnonzero(first[inverse] != np.arange(n))
        dest, source = indices_on(out.device, repeat, first[inverse[repeat]])
        out[dest] = out[source]
    return out


def distinct_request(ids, out, shape: tuple, dtype: torch.dtype, device="cpu"):
    """The start of a gather of rows `ids` from a [num_rows, dim] source:
    (out, uniq, inverse) with the ids checked, `out` checked or allocated
    (gather_output), and the distinct ids sorted (int64 numpy) with each id's
    position among them; uniq is None for an empty request."""
    ids = check_ids(torch.as_tensor(ids), shape[0])
    out = gather_output(out, ids.shape[0], shape[1], dtype, device)
    if ids.shape[0] == 0:
        return out, None, None
    uniq, inverse = distinct_inverse(ids.cpu().numpy().astype(np.int64, copy=False))
    return out, uniq, inverse


def distinct_inverse(ids):
    """(the distinct values of the integer array `ids` sorted, each id's
    position among them): np.unique(ids, return_inverse=True)'s result, from
    one argsort (faster than np.unique in numpy 2.x)."""
    ids = np.asarray(ids)
    order = np.argsort(ids)
    ordered = ids[order]
    new = _run_starts(ordered)
    inverse = np.empty(ids.shape[0], np.intp)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _run_starts(ordered):
    """Where each run of equal values of the sorted array `ordered` starts (a boolean mask)."""
    starts = np.empty(ordered.shape[0], np.bool_)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return starts


@numba.njit(nogil=True, cache=True)
def count_ids(ids, counts):
    """counts[i] += how often id i occurs in `ids` (no int64 copy of `ids`, unlike np.bincount)."""
    for e in range(ids.shape[0]):
        counts[ids[e]] += 1


@numba.njit(nogil=True, cache=True)
def count_if_distinct(ids, counts):
    """counts[i] += 1 for every id i of `ids` and True, where no id repeats;
    else False with `counts` unchanged. Non-negative `counts` only: each id
    is marked by flipping its count's bits while the ids are walked (no
    array the size of `counts`, no sort)."""
    for e in range(ids.shape[0]):
        i = ids[e]
        if counts[i] < 0:  # i repeats: every id before it was marked once
            for f in range(e):
                counts[ids[f]] = ~counts[ids[f]] - 1
            return False
        counts[i] = ~(counts[i] + 1)
    for e in range(ids.shape[0]):
        counts[ids[e]] = ~counts[ids[e]]
    return True


def sorted_distinct(ids):
    """The distinct values of the integer array `ids`, sorted: np.unique's
    result, from one sort and a mask (np.unique of ids takes tens of times
    longer in numpy 2.x, which no longer sorts for it)."""
    ids = np.sort(np.asarray(ids))
    return ids if ids.shape[0] < 2 else ids[_run_starts(ids)]


@numba.njit(nogil=True, cache=True)
def take_most_counted(counts, k):
    """The ids of the (at most) `k` largest positive `counts`, ties to the
    lower id, sorted (int64); their counts are set to -1, so `counts[ids] >= 0`
    then says which ids were not taken. What a stable argsort of the counts
    would choose, from a histogram and one pass (no argsort, no temporaries
    the size of `counts`)."""
    top = 0
    for c in counts:
        top = max(top, c)
    hist = np.zeros(top + 1, np.int64)
    for c in counts:
        if c > 0:
            hist[c] += 1
    t, taken = top, 0  # every count above t is taken, and the lowest ids of count t up to k
    while t >= 1 and taken + hist[t] <= k:
        taken += hist[t]
        t -= 1
    quota = k - taken if t >= 1 else 0
    out = np.empty(taken + quota, np.int64)
    n = 0
    for i in range(counts.shape[0]):
        c = counts[i]
        if c > t or (c == t and quota > 0):
            if c == t:
                quota -= 1
            out[n] = i
            n += 1
            counts[i] = -1
    return out
