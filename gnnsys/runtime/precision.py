"""`Precision`: the one place a trainer asks how to run a step in a given
`--precision` (PyTorch Lightning's names).

- "32": fp32 everywhere; `autocast()` does nothing.
- "bf16-mixed": the forward runs under `torch.autocast(device, bfloat16)`
  (linear layers, and the SAGE/GCN aggregation through `gnnsys.models.aggregation`,
  in bf16); weights, their gradients, the optimizer and the loss stay fp32.
  Features stored as bf16 are fed as they are (no upcast copy).
- "16-mixed": fp16 autocast with a gradient scaler; CUDA only.
- "auto" (the default): the fastest of these that keeps fp32's accuracy on
  this machine, bf16-mixed where bf16 GEMMs are native (a CPU with
  AVX512-BF16 or AMX, by `gnnsys.runtime.cpu_features`; a GPU with bf16), else "32".

`resolve_precision` turns a requested name into the one that runs (options
record that one, and checkpoints compare it). An explicit bf16-mixed on a CPU
whose bf16 GEMMs are not native (torch's fallback runs them ~30x slower than
fp32) resolves to "32", with a one-line warning naming the CPU: features
stored as bf16 stay bf16 on disk, in caches and in the gather (half the bytes
read), the gathered batch is widened to fp32 (as under "32"), and the GEMMs
run in fp32.

A trainer does, per step:

    with precision.autocast():
        logits = model(x, blocks)
    loss = F.cross_entropy(logits.float(), y)
    precision.backward_step(loss, optimizer)

and feeds features in `precision.input_dtype(stored_dtype)`.
"""

from __future__ import annotations

import contextlib
import logging

import torch

from gnnsys.errors import ConfigError
from gnnsys.runtime import cpu_features

_COMPUTE = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # PyTorch Lightning's names
PRECISIONS = ("auto", *_COMPUTE)

log = logging.getLogger(__name__)


class Precision:
    """How a forward and an optimiser step run in precision `name` on `device`
    (build it with `make_precision`)."""

    def __init__(self, name: str, device: torch.device):
        self.name, self.device = name, device
        self.compute_dtype = _COMPUTE[name]
        self.scaler = torch.amp.GradScaler(device.type) if name == "16-mixed" else None

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype activations are kept and sent in: the compute dtype, float32 for "32"."""
        return self.compute_dtype or torch.float32

    def autocast(self):
        """A context manager: `torch.autocast` to the compute dtype, or nothing for "32"."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def backward_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """loss.backward() and optimizer.step(); with a gradient scaler for "16-mixed"
        (a step whose gradients overflowed is skipped and the scale lowered)."""
        self.scale(loss).backward()
        self.step(optimizer)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call backward on: scaled by the gradient scaler for "16-mixed",
        else `loss` itself (for trainers that run several backwards per step)."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step() after backwards of `scale(loss)`; with the scaler, unscaled,
        skipped when a gradient overflowed, and the scale updated."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def input_dtype(self, stored: torch.dtype) -> torch.dtype:
        """The dtype features stored as `stored` are fed to the model in (`input_dtype`)."""
        return input_dtype(self.name, stored)

    def state_dict(self) -> dict:
        """The gradient scaler's state (empty without one), for checkpoints."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)

    def __repr__(self) -> str:
        return f"Precision({self.name!r}, {self.device})"


def input_dtype(name: str, stored: torch.dtype) -> torch.dtype:
    """The dtype features stored as `stored` are fed to the model in under
    precision `name`: as stored when that is its compute dtype (bf16 features
    under bf16-mixed, fp16 under 16-mixed: no upcast copy), else float32."""
    return stored if stored == _COMPUTE[name] else torch.float32


def cuda_bf16_native() -> bool:
    """The current GPU computes in bf16 natively (Ampere or newer, not torch's emulation)."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # torch < 2.4: no emulation to tell apart
        return torch.cuda.is_bf16_supported()


def resolve_precision(name: str, device) -> str:
    """The precision a run asking for `name` on `device` runs in ("32",
    "bf16-mixed" or "16-mixed"; see the module docstring), after
    `check_precision`: "auto" is bf16-mixed where bf16 GEMMs are native, else
    "32"; bf16-mixed on a CPU without native bf16 GEMMs is "32", with a warning."""
    device = torch.device(device)
    check_precision(name, device)
    if name not in ("auto", "bf16-mixed"):
        return name
    if device.type == "cuda":
        return "bf16-mixed" if name == "bf16-mixed" or cuda_bf16_native() else "32"
    cpu = cpu_features.detect()
    if cpu.bf16_gemm:
        return "bf16-mixed"
    if name == "bf16-mixed":
        log.warning(
            "precision: bf16-mixed runs its matmuls in fp32 on this CPU, whose bf16 matmuls are not native "
            "(%s); bf16-stored features stay bf16",
            cpu.describe(),
        )
    return "32"


def check_precision(name: str, device) -> None:
    """ConfigError naming `precision` unless `name` can run on `device`: an
    unknown name, 16-mixed off CUDA, bf16-mixed on a GPU without bf16."""
    device = torch.device(device)
    if name not in PRECISIONS:
        raise ConfigError("precision", f"must be one of {', '.join(PRECISIONS)}, got {name!r}")
    if name == "16-mixed" and device.type != "cuda":
        raise ConfigError(
            "precision", f"16-mixed needs a CUDA device (fp16 has no fast CPU kernels), got {device}; use bf16-mixed"
        )
    if name == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            "precision", f"bf16-mixed needs a GPU with bfloat16 (Ampere or newer), {device} has none; use 16-mixed"
        )


def make_precision(name: str, device) -> Precision:
    """The Precision that `name` (one of PRECISIONS) runs in on `device` (a str
    or torch.device): `resolve_precision`'s."""
    return Precision(resolve_precision(name, device), torch.device(device))
