"""What this machine can run, in one place: Triton, CUDA, Triton's interpreter
(a leaf module: every layer may import it; it imports only gnnsys.errors).

Nothing here imports triton at module import: `triton.jit` decides at the
kernel module's import whether kernels are compiled or interpreted, and the
standard library of `triton.language` is built the same way when triton is
first imported. Importing triton early (before a test sets TRITON_INTERPRET=1)
would fix the mode for the whole process, so the kernel modules are imported
only when a kernel is about to run.
"""

from __future__ import annotations

import importlib.util

import torch

from gnnsys import environment
from gnnsys.errors import ConfigError, GPUUnavailableError

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()
try:  # as set when gnnsys was imported
    TRITON_INTERPRET = environment.value("TRITON_INTERPRET") == "1"
except ConfigError:  # not 0 or 1: every command refuses it first (environment.check_environment)
    TRITON_INTERPRET = False


def triton_interpreting() -> bool:
    """True when triton (imported now if needed) runs kernels in its CPU interpreter."""
    if not HAS_TRITON:
        return False
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.cdiv, InterpretedFunction)


def require_cuda(what: str) -> None:
    """Raise a one-line GPUUnavailableError naming `what` when CUDA is not available."""
    if not HAS_CUDA:
        raise GPUUnavailableError(what, "needs a CUDA GPU, but torch.cuda.is_available() is False on this machine")


def require_triton(what: str, device: torch.device) -> None:
    """Raise a one-line GPUUnavailableError unless a Triton kernel can run for `device`:
    compiled on a CUDA device, or interpreted (TRITON_INTERPRET=1) on the CPU."""
    if not HAS_TRITON:
        raise GPUUnavailableError(what, "needs triton, which is not installed (pip install 'gnnsys[gpu]')")
    if device.type == "cuda":
        require_cuda(what)  # compiled, or interpreted with copies to the host and back
        return
    if not triton_interpreting():
        raise GPUUnavailableError(
            what,
            f"runs Triton kernels on a CUDA device, got device {device} "
            "(set TRITON_INTERPRET=1 before importing triton to run them on the CPU)",
        )


def normalize_device(device) -> torch.device:
    """`device` as one canonical torch.device ("cuda" -> "cuda:<current>"), so
    that devices compare equal when they are the same; ConfigError for a
    name torch does not know, GPUUnavailableError for CUDA without a GPU."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError("device", f"must be cpu, cuda or cuda:N, got {device!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError("device", f"must be cpu, cuda or cuda:N, got {str(device)!r}")
    if device.type == "cuda":
        require_cuda("device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device
