"""What `predict` does the same for a homogeneous and a heterogeneous graph
(gnnsys.inference.prediction, gnnsys.inference.hetero_prediction): reading a checkpoint and
loading its best weights into a model, checking the nodes and layer asked
for, the shape and dtype of each output, and writing it to a .npy file
atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from gnnsys.datasets.meta_schema import identity
from gnnsys.datasets.node_ids import node_ids
from gnnsys.errors import ConfigError, DatasetError, naming
from gnnsys.inference.rows_io import NoSpaceError, reserve_space
from gnnsys.models.names import is_user_model
from gnnsys.training.checkpoints import FILE, load_training_state
from gnnsys.training.outputs import check_output_file, new_file_mode

OUTPUTS = ("scores", "labels", "embeddings")


def read_checkpoint(checkpoint, dataset) -> tuple[dict, Path]:
    """(the training state, its file) of `checkpoint` (a checkpoint directory
    or its checkpoint.pt) to run on `dataset`; DatasetError naming it when it
    is neither, holds no state, is not a minibatch checkpoint, holds a user
    module, or was trained on other data than `dataset`'s (both identities
    known: a checkpoint from before they were recorded, or of a dataset made
    in memory, is judged by its weights' shapes alone)."""
    path = Path(checkpoint)
    if path.is_file() and path.name == FILE:
        path = path.parent
    if not path.is_dir():
        raise DatasetError(checkpoint, f"is not a checkpoint directory or its {FILE}")
    state = load_training_state(path)
    file = path / FILE
    if state is None:
        raise DatasetError(path, f"holds no {FILE}")
    saved = state.get("options", {})
    if "fanouts" not in saved:
        raise DatasetError(file, "is not a checkpoint of minibatch training (gnnsys train --mode minibatch)")
    theirs, ours = saved.get("dataset_id"), identity(dataset.meta)
    if theirs and ours and theirs != ours:
        raise DatasetError(
            file,
            f"was trained on other data ({saved.get('dataset')}, identity {theirs}) than dataset "
            f"{dataset.name!r} (identity {ours}); predict on the dataset it was trained on",
        )
    if is_user_model(saved.get("model", "")):
        raise DatasetError(
            file, f"holds the weights of a user module ({saved['model']}): load its 'best_model' into that module"
        )
    return state, file


def load_weights(model: torch.nn.Module, state: dict, file: Path, name: str, fits: str) -> torch.nn.Module:
    """`model` (a `name` model built for the data `fits` describes) with the
    weights of `state`'s epoch of best validation (those of the last epoch
    in a checkpoint from before they were kept); DatasetError naming `file`
    when they are another model's or another dataset's."""
    ours, theirs = model.state_dict(), state.get("best_model") or state["model"]
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected:
        raise DatasetError(
            file, f"its weights do not match its {name} model (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for key, value in ours.items():
        if tuple(theirs[key].shape) != tuple(value.shape):
            raise DatasetError(
                file,
                f"does not fit {fits}: {key} is {list(theirs[key].shape)}, this dataset needs {list(value.shape)}",
            )
    model.load_state_dict(theirs)
    return model


def output_rows(output: str, task: str, n: int, width: int):
    """(shape, dtype, transform of logit rows) of predict's result: scores
    (logits) or embeddings as float32 [n, width]; labels as the argmax class [n] (int64),
    or for a multi-label dataset every task's 0/1 prediction [n, tasks] (int8,
    1 where the logit is positive, i.e. probability above one half)."""
    if output != "labels":
        return (n, width), np.float32, None
    if task == "multilabel":
        return (n, width), np.int8, lambda rows: (rows > 0).to(torch.int8)
    return (n,), np.int64, lambda rows: rows.argmax(1)


def check_layer(layer, num_layers: int, output: str) -> int:
    """The 1-based layer whose output is asked for (default the last)."""
    if layer is None:
        return num_layers
    if not 1 <= layer <= num_layers:
        raise ConfigError("layer", f"must be in 1..{num_layers} (the model's layers), got {layer}")
    if output != "embeddings" and layer != num_layers:
        raise ConfigError("layer", f"{output} come from the last layer ({num_layers}); use output 'embeddings'")
    return layer


def check_nodes(nodes, num_nodes: int) -> torch.Tensor:
    """`nodes` as int64 ids (default every node); ConfigError when empty, out
    of range or not 1-D integers (gnnsys.datasets.node_ids checks them)."""
    if nodes is None:
        return torch.arange(num_nodes)
    try:
        ids = node_ids(nodes, "nodes", num_nodes)
    except DatasetError as e:
        raise ConfigError("nodes", e.problem) from None
    if not ids.size:
        raise ConfigError("nodes", "is empty: give at least one node id")
    return torch.from_numpy(ids)


def _no_room(path: Path, needed: int, free: int) -> NoSpaceError:
    return NoSpaceError(
        path, needed, free, "space for the output on its disk", "free some, or write it to another disk"
    )


@contextlib.contextmanager
def atomic_npy(path, shape: tuple, dtype):
    """Yield a writable memory-mapped .npy array of `shape` and `dtype` in a
    temporary file (its space reserved up front) that becomes `path` once
    the block completes: renamed to it (made beside it), or, for a pipe or
    a FIFO, streamed to it (made in the temporary directory); removed if
    the block fails. ConfigError("out") for a path no output may take
    (check_output_file)."""
    path = Path(path)
    if path.suffix != ".npy":
        raise ConfigError("out", f"must be a .npy file, got {path}")
    target = check_output_file(path, "out")
    folder = Path(tempfile.gettempdir()) if target.streamed else target.path.parent
    with naming(path, "write"):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".npy", dir=folder)
        os.close(fd)
    try:
        with naming(path, "write"):
            array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
            reserve_space(tmp, os.path.getsize(tmp), lambda _, needed, free: _no_room(path, needed, free))
        yield array
        with naming(path, "write"):
            array.flush()
            del array
            if target.streamed:
                target.write_file(tmp)
            else:
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.chmod(tmp, new_file_mode())
                os.replace(tmp, target.path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
