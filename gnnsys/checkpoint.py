"""Atomic training checkpoints: model, optimizer, RNG states, epoch, history.

A checkpoint is one file, `checkpoint.pt` in the checkpoint directory, written
with torch.save to a temporary sibling and renamed into place, so a kill at
any moment leaves either the previous complete checkpoint or the new one.
"""
from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import torch

from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.datasets.errors import DatasetError

FILE = "checkpoint.pt"


def rng_state() -> dict:
    """The state of every random generator a training step may draw from."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict):
    """Restore generators saved by `rng_state`."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory, state: dict) -> Path:
    """Write `state` (tensors, state dicts, plain data) atomically to
    directory/checkpoint.pt; returns the path."""
    buf = io.BytesIO()
    torch.save(state, buf)
    path = Path(directory) / FILE
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_checkpoint(directory) -> dict | None:
    """The state saved in directory/checkpoint.pt, or None when there is none."""
    path = Path(directory) / FILE
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated or foreign file: say which, in one line
        raise DatasetError(path, f"cannot read checkpoint ({type(e).__name__}: {e})") from e
