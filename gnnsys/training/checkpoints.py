"""Atomic training checkpoints: model, optimizer, RNG states, epoch, history.

A checkpoint is one file, `checkpoint.pt` in the checkpoint directory, written
with torch.save to a temporary sibling and renamed into place, so a kill at
any moment leaves either the previous complete checkpoint or the new one.
Every trainer saves the same `training_state` (plus its own extras, such as
GNNPipe's history buffers) and resumes with `restore_training_state`, which
refuses a checkpoint written with other options (TrainOptions.resume_key).
"""
from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import torch

from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.errors import DatasetError

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


def training_state(options, epochs_done: int, history: list, model, optimizer, **extra) -> dict:
    """What a trainer checkpoints after an epoch: its options, the epochs done
    and their records, model and optimizer state, RNG states, and `extra`."""
    return {"epoch": epochs_done, "options": options.to_dict(), "history": history, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "rng": rng_state(), "extra": extra}


def restore_training_state(state: dict, file, options, model, optimizer) -> tuple[int, list]:
    """Load a `training_state` into `model` and `optimizer` and the RNGs;
    returns (epochs done, history). DatasetError naming `file` when it was
    written with different options (those a resume may not change)."""
    saved = {k: v for k, v in state["options"].items() if k not in options.RESUMABLE}
    ours = options.resume_key()
    if saved != ours:
        diff = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
        raise DatasetError(file, f"was written with different options ({', '.join(diff)}); cannot resume")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    return int(state["epoch"]), list(state["history"])
