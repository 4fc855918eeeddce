"""bfloat16 in numba kernels: numba has no bf16 type, so kernels take bf16
tensors as uint16 arrays (`as_numpy`) and convert with these helpers.

A bf16 is the top half of a float32: `widen` shifts its bits up (exact),
`narrow` rounds a float32 to the nearest bf16, ties to even, as torch's
`.to(torch.bfloat16)` does (NaN stays NaN). `load(v)` and `store(a, i, v)`
are compile-time dispatched on the type: uint16 means bf16, any float type
is used as it is, so one kernel serves fp32, fp64 and bf16 arrays and its
fp32 and fp64 arithmetic is exactly that of a kernel written for them.
(They are plain overloads: with numba 0.68, `inline="always"` ones gave
wrong values inside a conditional expression.) numba's on-disk cache of a kernel does not
notice edits to this module: after changing it, delete the `*.nbi`/`*.nbc`
files of `gnnsys/__pycache__`.
"""

from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload


@intrinsic
def _f32_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def _bits_from_f32(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@njit(inline="always")
def widen(u):
    """The float32 value of the bf16 whose bits are the uint16 `u`."""
    return _f32_from_bits(np.uint32(u) << np.uint32(16))


@njit(inline="always")
def narrow(value):
    """The bits (uint16) of float32 `value` rounded to the nearest bf16, ties to even."""
    b = _bits_from_f32(np.float32(value))
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):  # NaN: keep it a (quiet) NaN
        return np.uint16((b >> np.uint32(16)) | np.uint32(0x40))
    return np.uint16((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


def load(v):
    """Element `v` of a kernel's input as a float (bf16 bits widened)."""
    raise NotImplementedError("numba-only")  # replaced in kernels by the overload below


def store(a, i, v):
    """a[i] = v, rounded to bf16 when `a` holds bf16 bits."""
    raise NotImplementedError("numba-only")


@overload(load)
def _load(v):
    if v == types.uint16:
        return lambda v: widen(v)
    return lambda v: v


@overload(store)
def _store(a, i, v):
    if a.dtype == types.uint16:

        def put_bf16(a, i, v):
            a[i] = narrow(v)

        return put_bf16

    def put(a, i, v):
        a[i] = v

    return put


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """The numpy view of a CPU tensor that kernels take: bf16 as its uint16 bits."""
    return (t.view(torch.uint16) if t.dtype == torch.bfloat16 else t).numpy()
