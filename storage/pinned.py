"""Pinned host placement: the GPU reads feature rows from host memory itself.

A writable, C-contiguous in-memory table that starts on a 128-byte line is
pinned in place with cudaHostRegister (no copy). Memory already pinned is
not registered again: a table another PinnedFeatures registered shares that
registration (counted), memory pinned by anyone else (torch's pinned
allocator) is used as it is. Anything else - a read-only memmap of
features.bin above all, or a table starting inside a line (torch and numpy
allocate on 64- or 16-byte boundaries; the gather would have to rotate every
row back to its line, see storage/triton_gather.py) - is copied chunk by
chunk into an exactly sized, page-aligned buffer (an anonymous mapping) that
is then registered (torch's pinned allocator rounds up to a power of two: a
14 GB table would take 16 GB). `in_place_refusal` is that decision, a pure
function of the array.
When pinning in place fails, the CUDA runtime's pending error is cleared
(else the next kernel launch would raise it) and a pinned copy is made, with
a one-line warning. A registration ends at close() or when the
PinnedFeatures is collected (weakref.finalize), and holds the host buffer
alive until then. Either way the Triton gather reads the rows over PCIe into
device memory with no staging copy (zero-copy through unified virtual
addressing).

The CUDA calls go through a `HostPinning` object, so every decision above is
tested on the CPU with a stand-in (tests/storage/test_pinned.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import threading
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from gnnsys._capabilities import require_cuda
from gnnsys.errors import GPUUnavailableError

from .gather_plan import LINE_BYTES
from .gpu_features import PendingGather, TableFeatures, as_row_table, copy_rows_into

log = logging.getLogger(__name__)


class HostPinning:
    """The CUDA runtime calls that pin host memory: torch.cuda.cudart()'s
    cudaHostRegister / cudaHostUnregister, and cudaGetLastError of the CUDA
    runtime library torch loaded."""

    def is_pinned(self, host: torch.Tensor) -> bool:
        """Whether `host`'s memory is page-locked already (by anyone)."""
        return host.is_pinned()

    def register(self, ptr: int, nbytes: int) -> int:
        """cudaHostRegister(ptr, nbytes); the CUDA error code (0: success)."""
        return int(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0))

    def unregister(self, ptr: int) -> int:
        """cudaHostUnregister(ptr); the CUDA error code (0: success)."""
        return int(torch.cuda.cudart().cudaHostUnregister(ptr))

    def clear_error(self) -> None:
        """Reset this thread's pending CUDA runtime error (cudaGetLastError of
        every CUDA runtime library loaded: torch's is among them)."""
        for runtime in _cuda_runtimes():
            runtime.cudaGetLastError()

    def synchronize(self) -> None:
        """Wait until no kernel can still read pinned memory."""
        torch.cuda.synchronize()


@functools.cache
def _cuda_runtimes() -> tuple:
    """The CUDA runtime libraries (libcudart) loaded in this process; each keeps its own last error."""
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "libcudart" in line.rsplit("/", 1)[-1]})
    if not paths:
        raise GPUUnavailableError(
            "placement 'pinned'",
            "cannot clear a failed cudaHostRegister: torch did not load libcudart as a shared library",
        )
    return tuple(ctypes.CDLL(p) for p in paths)


@dataclass(frozen=True, eq=False)
class Pin:
    """Pinned rows: `tensor` ([num_rows, stride] uint8 host memory), whether it is
    the caller's table pinned in place, and `key`, the start of the registration
    it uses (None: pinned by someone else, nothing to unregister)."""

    tensor: torch.Tensor
    in_place: bool
    key: int | None


_registrations: dict[int, list] = {}  # start address -> [bytes, number of Pins using it]
_registrations_lock = threading.Lock()


def _share(ptr: int, nbytes: int) -> int | None:
    """The key of a registration of ours that covers [ptr, ptr + nbytes), now used once more."""
    with _registrations_lock:
        for start, entry in _registrations.items():
            if start <= ptr and ptr + nbytes <= start + entry[0]:
                entry[1] += 1
                return start
    return None


def _register(pinning: HostPinning, ptr: int, nbytes: int) -> int:
    """Register [ptr, ptr + nbytes); the CUDA error code, the runtime's error cleared on failure."""
    rc = pinning.register(ptr, nbytes)
    if rc == 0:
        with _registrations_lock:
            _registrations[ptr] = [nbytes, 1]
    else:
        pinning.clear_error()
    return rc


def release_pin(pinning: HostPinning, pin: Pin) -> None:
    """Give up `pin`'s use of its registration; the last user unregisters it,
    after pending GPU work (a gather may still be reading it)."""
    if pin.key is None:
        return
    with _registrations_lock:
        entry = _registrations[pin.key]
        entry[1] -= 1
        if entry[1]:
            return
        del _registrations[pin.key]
    pinning.synchronize()
    rc = pinning.unregister(pin.key)
    if rc != 0:
        pinning.clear_error()
        log.warning("features: cudaHostUnregister failed with CUDA error %s", rc)


def pin_table(table: np.ndarray, pinning: HostPinning, progress: bool = True) -> Pin:
    """Pin the [num_rows, stride] uint8 rows of `table` (see the module docstring for the rules)."""
    refusal = in_place_refusal(table)
    if refusal is None:
        host = torch.from_numpy(table)
        ptr, nbytes = host.data_ptr(), host.numel()
        key = _share(ptr, nbytes)
        if key is not None:
            return Pin(host, True, key)
        if pinning.is_pinned(host):
            return Pin(host, True, None)
        rc = _register(pinning, ptr, nbytes)
        if rc == 0:
            return Pin(host, True, ptr)
        log.warning(
            "features: pinning the table in place failed (cudaHostRegister: CUDA error %s); pinning a copy instead", rc
        )
    else:
        log.info("features: pinning a page-aligned copy of the table (not pinned in place: %s)", refusal)
    return _pinned_copy(table, pinning, progress)


def _pinned_copy(table: np.ndarray, pinning: HostPinning, progress: bool) -> Pin:
    """A copy of `table` in an exactly sized anonymous mapping, registered with CUDA."""
    size = max(table.nbytes, 1)  # a mapping cannot be empty
    host = torch.frombuffer(mmap.mmap(-1, size), dtype=torch.uint8)
    rc = _register(pinning, host.data_ptr(), size)
    if rc != 0:
        raise GPUUnavailableError(
            "placement 'pinned'",
            f"cannot pin {size / 2**20:.1f} MiB of host memory (cudaHostRegister failed with CUDA error {rc})",
        )
    pin = Pin(host[: table.nbytes].view(table.shape), False, host.data_ptr())
    try:
        copy_rows_into(table, pin.tensor, progress=progress)
    except BaseException:
        release_pin(pinning, pin)
        raise
    return pin


def can_pin_in_place(table: np.ndarray) -> bool:
    """Whether `table` is pinned where it is (in_place_refusal finds no reason against)."""
    return in_place_refusal(table) is None


def in_place_refusal(table: np.ndarray) -> str | None:
    """Why `table`'s memory is not pinned where it is, None when it may be: it
    must be a writable, C-contiguous, non-empty array that is not a file
    mapping (a memmap's pages belong to the file; registering them would pin
    the whole file or fail) and starts on a 128-byte line."""
    base = table
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return "it is a file mapping"
        base = base.base
    if not table.flags.writeable:
        return "it is read-only"
    if not table.flags.c_contiguous:
        return "it is not C-contiguous"
    if table.size == 0:
        return "it is empty"
    offset = table.ctypes.data % LINE_BYTES
    if offset:
        return f"it starts {offset} bytes past a {LINE_BYTES}-byte line"
    return None


class PinnedFeatures(TableFeatures):
    """Rows in pinned host memory, gathered zero-copy into tensors on `device`.

    Use as a context manager or call close(): close() ends the registration of
    memory pinned in place (the caller's array is left as it was) or frees the
    pinned copy; a PinnedFeatures that is collected does the same. `pinning`:
    the CUDA calls (default HostPinning()).
    """

    placement = "pinned"

    def __init__(
        self,
        features,
        device="cuda",
        max_programs: int | None = None,
        progress: bool = True,
        pinning: HostPinning | None = None,
    ):
        require_cuda("placement 'pinned'")
        rows = as_row_table(features)
        pinning = pinning or HostPinning()
        pin = pin_table(rows.table, pinning, progress)
        self.pinned_in_place = pin.in_place
        self._release = weakref.finalize(self, release_pin, pinning, pin)
        self._release.atexit = False  # at exit the process gives everything back
        super().__init__(pin.tensor, rows.shape[1], rows.dtype, device, max_programs)

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self.table is None

    def gather_async(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> PendingGather:
        """TableFeatures.gather_async; RuntimeError once closed."""
        if self.closed:
            raise RuntimeError("PinnedFeatures is closed")
        return super().gather_async(ids, out)

    def close(self) -> None:
        """End the registration (after pending gathers finish); idempotent."""
        self._release()
        self.table = None

    def host_bytes(self) -> dict:
        """{"pinned_rows": bytes} of the pinned table (in place or a copy)."""
        return {} if self.closed else {"pinned_rows": self.nbytes}
