"""`Precision`: the one place a trainer asks how to run a step in a given
`--precision` (PyTorch Lightning's names).

- "32": fp32 everywhere; `autocast()` does nothing.
- "bf16-mixed": the forward runs under `torch.autocast(device, bfloat16)`
  (linear layers, and the SAGE/GCN aggregation through `gnnsys.aggregation`,
  in bf16); weights, their gradients, the optimizer and the loss stay fp32.
  Features stored as bf16 are fed as they are (no upcast copy).
- "16-mixed": fp16 autocast with a gradient scaler; CUDA only.

A trainer does, per step:

    with precision.autocast():
        logits = model(x, blocks)
    loss = F.cross_entropy(logits.float(), y)
    precision.backward_step(loss, optimizer)

and feeds features in `precision.input_dtype(stored_dtype)`.
"""
from __future__ import annotations

import contextlib

import torch

from gnnsys.errors import ConfigError

_COMPUTE = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # PyTorch Lightning's names
PRECISIONS = tuple(_COMPUTE)


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


def check_precision(name: str, device) -> None:
    """ConfigError naming `precision` unless `name` can run on `device`: an
    unknown name, 16-mixed off CUDA, bf16-mixed on a GPU without bf16."""
    device = torch.device(device)
    if name not in PRECISIONS:
        raise ConfigError("precision", f"must be one of {', '.join(PRECISIONS)}, got {name!r}")
    if name == "16-mixed" and device.type != "cuda":
        raise ConfigError("precision", f"16-mixed needs a CUDA device (fp16 has no fast CPU kernels), got {device}; "
                                       "use bf16-mixed")
    if name == "bf16-mixed" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("precision", f"bf16-mixed needs a GPU with bfloat16 (Ampere or newer), {device} has none; "
                                       "use 16-mixed")


def make_precision(name: str, device) -> Precision:
    """The Precision `name` ("32", "bf16-mixed", "16-mixed") on `device` (a str
    or torch.device), after `check_precision`."""
    check_precision(name, device)
    return Precision(name, torch.device(device))
