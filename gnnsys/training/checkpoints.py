"""Atomic training checkpoints: model, optimizer, RNG states, epoch, history,
the LR schedule, early stopping and the best epoch's weights.

A checkpoint is one file, `checkpoint.pt` in the checkpoint directory, written
with torch.save to a temporary sibling and renamed into place, so a kill at
any moment leaves either the previous complete checkpoint or the new one.
Every trainer saves the same `training_state` (plus its own extras, such as
GNNPipe's history buffers) and resumes with `restore_training_state`, which
refuses a checkpoint written with other options (TrainOptions.resume_key).

A checkpoint holds only tensors, numbers, strings, None, lists, tuples and
dicts (the RNG states converted to those), so it loads with
`torch.load(weights_only=True)`: a file that needs anything else (a pickled
object, which could run code while loading) is refused with a DatasetError,
and so is one without the entries of a `training_state` (`load_training_state`).
A run holds its checkpoint directory and what lies below it
(gnnsys.training.checkpoint_lock), so two runs never write into one.
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

from gnnsys.errors import DatasetError
from gnnsys.training.outputs import write_output

FILE = "checkpoint.pt"
PLAIN = (str, int, float, bool, type(None))  # exact types (numpy's float64 is a float, but pickles as numpy's)

log = logging.getLogger(__name__)


def rng_state() -> dict:
    """The state of every random generator a training step may draw from, as
    tensors, numbers, strings and lists (what a checkpoint may hold)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": keys.tolist(), "pos": pos, "has_gauss": has_gauss, "gauss": gauss},
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
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
    return write_output(Path(directory) / FILE, buf.getvalue())


def _check_plain(value, where: str):
    if type(value) in (dict, OrderedDict):  # state_dict() is an OrderedDict
        for k, v in value.items():
            _check_plain(k, f"{where} key")
            _check_plain(v, f"{where}[{k!r}]")
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif not (isinstance(value, torch.Tensor) or type(value) in PLAIN):
        raise TypeError(
            f"checkpoint {where} is a {type(value).__name__}: a checkpoint holds only tensors, "
            "numbers, strings, None, lists, tuples and dicts"
        )


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
            raise DatasetError(
                path,
                f"refused: needs {needs[1]}, but a checkpoint holds only tensors and plain "
                "data (loading this file could run code)",
            ) from e
        first = str(cause).strip().splitlines()
        raise DatasetError(path, f"cannot read checkpoint ({type(cause).__name__}: {first[0] if first else ''})") from e


SHAPE = {
    "epoch": int,
    "options": dict,
    "history": list,
    "model": dict,
    "optimizer": dict,
    "rng": dict,
    "extra": dict,
}  # what every training_state holds


def load_training_state(directory) -> dict | None:
    """The `training_state` saved in directory/checkpoint.pt (load_checkpoint),
    or None when there is none; DatasetError naming the file when it lacks
    an entry of SHAPE, has one of another type, or a negative epoch."""
    state = load_checkpoint(directory)
    return None if state is None else _check_shape(state, Path(directory) / FILE)


def _check_shape(state, path) -> dict:
    """`state` if it has the keys and types every `training_state` has (and
    a non-negative epoch); DatasetError naming `path` and the first misfit."""
    if not isinstance(state, dict):
        raise DatasetError(path, f"is not a gnnsys checkpoint: holds a {type(state).__name__}, not a dict")
    for key, kind in SHAPE.items():
        if key not in state:
            raise DatasetError(path, f"is not a gnnsys checkpoint: no {key!r} entry")
        if not isinstance(state[key], kind) or isinstance(state[key], bool):
            raise DatasetError(
                path, f"is not a gnnsys checkpoint: {key!r} is a {type(state[key]).__name__}, not a {kind.__name__}"
            )
    if state["epoch"] < 0:
        raise DatasetError(path, f"is not a gnnsys checkpoint: epoch {state['epoch']} is negative")
    for entry in ("model", "best_model"):
        for name, value in (state.get(entry) or {}).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise DatasetError(
                    path, f"its weights are not finite ({entry} {name} holds NaN or inf): refused; train again"
                )
    return state


def training_state(
    options, epochs_done: int, history: list, model, optimizer, precision=None, control=None, **extra
) -> dict:
    """What a trainer checkpoints after an epoch: its options (the precision
    among them), the epochs done and their records, model and optimizer state,
    the gradient scaler's state (`precision`, a gnnsys.runtime.precision.Precision;
    empty without a scaler), RNG states, `control`'s state (an EpochControl:
    LR schedule, patience, stop; empty without one) with its best epoch's
    weights as "best_model" (what `gnnsys predict` loads; {} without one),
    and `extra`."""
    held = control.state_dict() if control is not None else {}
    best = held.pop("best_weights", {})
    return {
        "epoch": epochs_done,
        "options": options.to_dict(),
        "history": history,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": precision.state_dict() if precision else {},
        "control": held,
        "best_model": best,
        "rng": rng_state(),
        "extra": extra,
    }


def restore_training_state(
    state: dict, file, options, model, optimizer, precision=None, control=None
) -> tuple[int, list]:
    """Load a `training_state` into `model`, `optimizer`, `precision`'s gradient
    scaler, `control` (an EpochControl) and the RNGs; returns (epochs done,
    history). DatasetError naming `file` when it was written with another
    precision (naming both) or other options (those a resume may not
    change), or its weights do not fit the model."""
    filled = type(options).saved(state["options"])  # what it lacks, the run that wrote it used: the schema's
    saved = {k: v for k, v in filled.items() if k not in options.resumable()}
    ours = options.resume_key()
    for name in options.inapplicable & saved.keys():  # checkpoints from before these were written as None
        saved[name] = None
    if "dataset_id" in ours:
        if saved["dataset_id"] != ours["dataset_id"] and None not in (saved["dataset_id"], ours["dataset_id"]):
            raise DatasetError(
                file,
                f"was written for other data ({state['options'].get('dataset')}, identity {saved['dataset_id']}) "
                f"than this run's (identity {ours['dataset_id']}); cannot resume",
            )
        saved["dataset_id"] = ours["dataset_id"]  # checkpoints from before the option did not record their data
    if saved["precision"] != ours["precision"]:
        raise DatasetError(
            file,
            f"was written with precision {saved['precision']}, this run asks for "
            f"{ours['precision']}; resume with --precision {saved['precision']}",
        )
    if saved != ours:
        diff = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
        raise DatasetError(file, f"was written with different options ({', '.join(diff)}); cannot resume")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        why = " ".join(line.strip() for line in str(e).splitlines())
        raise DatasetError(file, f"its weights do not fit this model ({why[:300]})") from None
    optimizer.load_state_dict(state["optimizer"])
    if precision is not None:
        precision.load_state_dict(state.get("scaler", {}))
    history = list(state["history"])
    if control is not None:
        control.load_state_dict({**state.get("control", {}), "best_weights": state.get("best_model", {})}, history)
    set_rng_state(state["rng"])
    return int(state["epoch"]), history


def resume_training(options, model, optimizer, precision=None, control=None) -> tuple[int, list]:
    """For `options.resume`: (epochs done, history) of the checkpoint in
    options.checkpoint_dir, restored into `model`, `optimizer`, `precision`'s
    gradient scaler, `control` and the RNGs, or (0, []) when there is none;
    either said in one line (`note_resume`)."""
    state = load_training_state(options.checkpoint_dir)
    if state is None:
        note_resume(options.checkpoint_dir, 0, options.epochs)
        return 0, []
    done, history = restore_training_state(
        state, Path(options.checkpoint_dir) / FILE, options, model, optimizer, precision, control
    )
    note_resume(options.checkpoint_dir, done, options.epochs, control is not None and control.stopped)
    return done, history


def note_resume(directory, epochs_done: int, epochs: int, stopped: bool = False):
    """Say in one line where a resume from the checkpoint in `directory`
    starts: from the first epoch (no checkpoint), from epoch `epochs_done` +
    1 of `epochs`, or nowhere (every epoch done, or the run `stopped` early):
    a warning on this module's logger, which Python prints to stderr unless
    logging is configured otherwise."""
    if epochs_done == 0:
        log.warning("resume: no checkpoint in %s; training from the first epoch", directory)
    elif stopped or epochs_done >= epochs:
        why = "stopped early" if stopped else f"trained {epochs_done} of {epochs} epochs"
        log.warning("resume: the run checkpointed in %s %s; nothing left to train", directory, why)
    else:
        log.warning(
            "resume: continuing from epoch %d of %d, after the checkpoint of epoch %d in %s",
            epochs_done + 1,
            epochs,
            epochs_done,
            directory,
        )
