"""Keep freed memory in the process instead of handing it back to the OS (glibc).

A training step allocates and frees tensors of tens of MB (activations and
their gradients). glibc serves blocks above its mmap threshold (at most 32 MB)
with fresh `mmap`s and unmaps them on free, so every step pays a page fault
per 4 KiB on first touch (the measured cost is in benchmarks/README.md,
"Measurements behind design choices").
`retain_freed_memory` stops glibc from using mmap for large blocks and from
trimming the heap below 1 GiB of free space, so the next step reuses the same
pages (PyTorch's CPU tuning guide gets the same effect by preloading jemalloc
or tcmalloc). The cost: the process keeps its peak heap instead of shrinking.
`release_freed_memory` hands freed heap memory back to the OS at once, for
a caller that holds to a memory budget (streaming inference, between its
blocks of destinations).
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_MAX = -4
_retained = False


def retain_freed_memory(trim_threshold: int = 1 << 30) -> bool:
    """Tell glibc's malloc to keep freed blocks for reuse: no mmap for large
    blocks, trim only beyond `trim_threshold` bytes of free heap. Returns True
    when applied (now or before), False where malloc is not glibc's."""
    global _retained
    if _retained:
        return True
    mallopt = _glibc("mallopt", (ctypes.c_int, ctypes.c_int))
    _retained = mallopt is not None and mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1
    return _retained


def retain_memory(options) -> bool:
    """`retain_freed_memory()` when a training run's `options` ask for it
    (their retain_memory, on by default); whether freed memory is retained."""
    return bool(options.retain_memory) and retain_freed_memory()


def release_freed_memory() -> bool:
    """Hand the heap's freed memory back to the OS now (glibc's
    malloc_trim(0): freed pages anywhere in the heap, not only at its top);
    False where malloc is not glibc's."""
    trim = _glibc("malloc_trim", (ctypes.c_size_t,))
    if trim is None:
        return False
    trim(0)
    return True


def _glibc(name: str, argtypes: tuple):
    """glibc's function `name` (returning int) taking `argtypes`, or None off Linux or where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function
