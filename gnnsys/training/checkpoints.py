"""Atomic training checkpoints: model, optimizer, RNG states, epoch, history.

A checkpoint is one file, `checkpoint.pt` in the checkpoint directory, written
with torch.save to a temporary sibling and renamed into place, so a kill at
any moment leaves either the previous complete checkpoint or the new one.
Every trainer saves the same `training_state` (plus its own extras, such as
GNNPipe's history buffers) and resumes with `restore_training_state`, which
refuses a checkpoint written with other options (TrainOptions.resume_key).

A checkpoint holds only tensors, numbers, strings, None, lists, tuples and
dicts (the RNG states converted to those), so it loads with
`torch.load(weights_only=True)`: a file that needs anything else (a pickled
object, which could run code while loading) is refused with a DatasetError.
"""
from __future__ import annotations

import io
import logging
import pickle
import random
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from gnnsys.datasets.atomic import atomic_write_bytes
from gnnsys.errors import DatasetError

FILE = "checkpoint.pt"
PLAIN = (str, int, float, bool, type(None))  # exact types (numpy's float64 is a float, but pickles as numpy's)

log = logging.getLogger(__name__)


def rng_state() -> dict:
    """The state of every random generator a training step may draw from, as
    tensors, numbers, strings and lists (what a checkpoint may hold)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": keys.tolist(), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
             "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict):
    """Restore generators saved by `rng_state`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory, state: dict) -> Path:
    """Write `state` (tensors, numbers, strings, None, lists, tuples, dicts)
    atomically to directory/checkpoint.pt; returns the path. TypeError for a
    value of another type, which `load_checkpoint` would refuse."""
    _check_plain(state, "state")
    buf = io.BytesIO()
    torch.save(state, buf)
    path = Path(directory) / FILE
    atomic_write_bytes(path, buf.getvalue())
    return path


def _check_plain(value, where: str):
    if type(value) in (dict, OrderedDict):  # state_dict() is an OrderedDict
        for k, v in value.items():
            _check_plain(k, f"{where} key")
            _check_plain(v, f"{where}[{k!r}]")
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif not (isinstance(value, torch.Tensor) or type(value) in PLAIN):
        raise TypeError(f"checkpoint {where} is a {type(value).__name__}: a checkpoint holds only tensors, "
                        "numbers, strings, None, lists, tuples and dicts")


def load_checkpoint(directory) -> dict | None:
    """The state saved in directory/checkpoint.pt, or None when there is none.
    Loads tensors and plain data only (weights_only): DatasetError naming the
    file when it holds anything else, or is truncated or not a checkpoint."""
    path = Path(directory) / FILE
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a pickled object, a truncated or a foreign file: say which, in one line
        cause = e.__context__ if isinstance(e, pickle.UnpicklingError) and e.__context__ else e  # torch's own words
        needs = re.search(r"GLOBAL (\S+)", str(cause))
        if needs:  # the weights-only unpickler stopped at the object; nothing was run
            raise DatasetError(path, f"refused: needs {needs[1]}, but a checkpoint holds only tensors and plain "
                                     "data (loading this file could run code)") from e
        first = str(cause).strip().splitlines()
        raise DatasetError(path, f"cannot read checkpoint ({type(cause).__name__}: "
                                 f"{first[0] if first else ''})") from e


def training_state(options, epochs_done: int, history: list, model, optimizer, precision=None, **extra) -> dict:
    """What a trainer checkpoints after an epoch: its options (the precision
    among them), the epochs done and their records, model and optimizer state,
    the gradient scaler's state (`precision`, a gnnsys.precision.Precision;
    empty without a scaler), RNG states, and `extra`."""
    return {"epoch": epochs_done, "options": options.to_dict(), "history": history, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "scaler": precision.state_dict() if precision else {},
            "rng": rng_state(), "extra": extra}


def restore_training_state(state: dict, file, options, model, optimizer, precision=None) -> tuple[int, list]:
    """Load a `training_state` into `model`, `optimizer`, `precision`'s gradient
    scaler and the RNGs; returns (epochs done, history). DatasetError naming
    `file` when it was written with another precision (naming both) or other
    options (those a resume may not change)."""
    saved = {k: v for k, v in state["options"].items() if k not in options.RESUMABLE}
    saved.setdefault("precision", "32")  # checkpoints from before the option trained in fp32
    ours = options.resume_key()
    if saved["precision"] != ours["precision"]:
        raise DatasetError(file, f"was written with precision {saved['precision']}, this run asks for "
                                 f"{ours['precision']}; resume with --precision {saved['precision']}")
    if saved != ours:
        diff = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
        raise DatasetError(file, f"was written with different options ({', '.join(diff)}); cannot resume")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if precision is not None:
        precision.load_state_dict(state.get("scaler", {}))
    set_rng_state(state["rng"])
    return int(state["epoch"]), list(state["history"])


def resume_training(options, model, optimizer, precision=None) -> tuple[int, list]:
    """For `options.resume`: (epochs done, history) of the checkpoint in
    options.checkpoint_dir, restored into `model`, `optimizer`, `precision`'s
    gradient scaler and the RNGs; (0, []) after `note_fresh_start` when there is none."""
    state = load_checkpoint(options.checkpoint_dir)
    if state is None:
        note_fresh_start(options.checkpoint_dir)
        return 0, []
    return restore_training_state(state, Path(options.checkpoint_dir) / FILE, options, model, optimizer, precision)


def note_fresh_start(directory):
    """Say in one line that a resume found no checkpoint in `directory` and
    starts from scratch: a warning on this module's logger, which Python
    prints to stderr unless logging is configured otherwise."""
    log.warning("resume: no checkpoint in %s; training from the first epoch", directory)
