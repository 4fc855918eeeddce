"""`predict(dataset, checkpoint, ...)`: a trained model's class scores,
predicted labels or a layer's embeddings, from a `gnnsys train
--checkpoint-dir` checkpoint, by streaming layer-wise inference
(gnnsys.training.inference), so the features and hidden layers may exceed
memory; written atomically to a .npy file or returned as an array.

A checkpoint is refused (DatasetError naming it, one line) when it is not a
minibatch training checkpoint, or when its weights do not fit the model its
options describe on this dataset: the feature and class counts are what
identify the data a model can run on (the dataset's recorded path is not
compared, so a moved or copied dataset directory still works).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import cast

import numpy as np
import torch

from gnnsys._capabilities import normalize_device
from gnnsys.datasets import as_dataset
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.errors import ConfigError, DatasetError, naming
from gnnsys.minibatch import build_model
from gnnsys.models import GNN, GNNLayer, is_user_model
from gnnsys.training.checkpoints import FILE, load_training_state
from gnnsys.training.inference import check_streaming, stream_inference
from gnnsys.training.inference_io import ArraySink, reserve_space
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.outputs import check_output_file, new_file_mode

OUTPUTS = ("scores", "labels", "embeddings")
MODEL_OPTIONS = ("model", "hidden", "fanouts", "dropout", "input_dropout", "norm", "residual", "heads", "seed")


def predict(
    dataset,
    checkpoint,
    out=None,
    *,
    nodes=None,
    output: str = "scores",
    layer: int | None = None,
    scratch_dir=None,
    host_mem_budget: int | None = None,
    dtype: str = "float32",
    batch_size: int = 4096,
    device="cpu",
    progress: bool = False,
    return_stats: bool = False,
):
    """The outputs of the model in `checkpoint` on `dataset` for `nodes` (ids;
    default every node), in the order given.

    output: "scores" (the last layer's logits, float32 [n, classes], before
    softmax), "labels" (their argmax, int64 [n]; for a multi-label dataset
    each task's 0/1 prediction, int8 [n, tasks], 1 where the logit is positive) or "embeddings" (the output
    of layer `layer`, 1-based, default the last, float32 [n, width]).
    dataset: a Dataset or a prepared directory; checkpoint: the checkpoint
    directory of `gnnsys train --checkpoint-dir` or its checkpoint.pt.
    out: a .npy path, written atomically (a temporary sibling renamed into
    place when complete, its space reserved first); returns that Path, or the
    array itself when out is None. scratch_dir, host_mem_budget (bytes),
    dtype (of hidden layers' scratch files), batch_size, device, progress: as
    in `layerwise_inference`; with `return_stats`, (result, InferenceStats).
    """
    if output not in OUTPUTS:
        raise ConfigError("output", f"must be one of {', '.join(OUTPUTS)}, got {output!r}")
    check_streaming(batch_size, host_mem_budget, dtype)
    device = normalize_device(device)
    dataset = as_dataset(dataset)
    if isinstance(dataset, HeteroDataset):
        raise ConfigError(
            "dataset", f"{dataset.name} is heterogeneous: predicting with its R-GCN (layer-wise) is not implemented"
        )
    model = load_model(checkpoint, dataset, device)
    layer = _check_layer(layer, model.num_layers, output)
    nodes = _check_nodes(nodes, dataset.num_nodes)
    width = cast(GNNLayer, model.layers[layer - 1]).out_dim
    shape, kind, transform = _output_rows(output, dataset.task, nodes.shape[0], width)
    run = dict(
        num_layers=layer,
        batch_size=batch_size,
        device=device,
        progress=progress,
        host_mem_budget=host_mem_budget,
        scratch_dir=scratch_dir,
        dtype=dtype,
    )
    if out is None:
        array = np.empty(shape, kind)
        stats = stream_inference(model, dataset, nodes, ArraySink(array, transform), **run)
        return (array, stats) if return_stats else array
    with atomic_npy(out, shape, kind) as array:
        stats = stream_inference(model, dataset, nodes, ArraySink(array, transform), **run)
    return (Path(out), stats) if return_stats else Path(out)


def _output_rows(output: str, task: str, n: int, width: int):
    """(shape, dtype, transform of logit rows) of predict's result: scores
    (logits) or embeddings as float32 [n, width]; labels as the argmax class [n] (int64),
    or for a multi-label dataset every task's 0/1 prediction [n, tasks] (int8,
    1 where the logit is positive, i.e. probability above one half)."""
    if output != "labels":
        return (n, width), np.float32, None
    if task == "multilabel":
        return (n, width), np.int8, lambda rows: (rows > 0).to(torch.int8)
    return (n,), np.int64, lambda rows: rows.argmax(1)


def load_model(checkpoint, dataset, device="cpu") -> GNN:
    """The GNN saved in `checkpoint` (a checkpoint directory or its
    checkpoint.pt) built for `dataset` on `device`, with the weights of its
    epoch of best validation (those of the last epoch in a checkpoint from
    before they were kept); DatasetError naming the checkpoint when it is
    not a minibatch checkpoint of a built-in model or its weights do not
    fit (another dataset's feature or class count, or another model)."""
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
    if is_user_model(saved.get("model", "")):
        raise DatasetError(
            file, f"holds the weights of a user module ({saved['model']}): load its 'best_model' into that module"
        )
    options = MinibatchOptions(**{k: saved[k] for k in MODEL_OPTIONS if k in saved})
    model = cast(GNN, build_model(dataset, options))  # a built-in model: user modules were refused above
    ours, theirs = model.state_dict(), state.get("best_model") or state["model"]
    missing, unexpected = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if missing or unexpected:
        raise DatasetError(
            file,
            f"its weights do not match its {options.model} model (missing {missing[:3]}, unexpected {unexpected[:3]})",
        )
    for name, value in ours.items():
        if tuple(theirs[name].shape) != tuple(value.shape):
            raise DatasetError(
                file,
                f"does not fit dataset {dataset.name!r} ({dataset.num_features} features, "
                f"{dataset.num_classes} classes): {name} is {list(theirs[name].shape)}, "
                f"this dataset needs {list(value.shape)}",
            )
    model.load_state_dict(theirs)
    return model.to(device).eval()


def _check_layer(layer, num_layers: int, output: str) -> int:
    """The 1-based layer whose output is asked for (default the last)."""
    if layer is None:
        return num_layers
    if not 1 <= layer <= num_layers:
        raise ConfigError("layer", f"must be in 1..{num_layers} (the model's layers), got {layer}")
    if output != "embeddings" and layer != num_layers:
        raise ConfigError("layer", f"{output} come from the last layer ({num_layers}); use output 'embeddings'")
    return layer


def _check_nodes(nodes, num_nodes: int) -> torch.Tensor:
    """`nodes` as int64 ids (default every node); ConfigError when empty, out of range or not 1-D integers."""
    if nodes is None:
        return torch.arange(num_nodes)
    ids = torch.as_tensor(np.asarray(nodes))
    if ids.ndim == 1 and not ids.numel():
        raise ConfigError("nodes", "is empty: give at least one node id")
    if ids.ndim != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise ConfigError("nodes", f"must be a 1-D array of node ids, got {ids.ndim}-D {ids.dtype}")
    ids = ids.long()
    if int(ids.min()) < 0 or int(ids.max()) >= num_nodes:
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ConfigError("nodes", f"id {bad} out of range [0, {num_nodes})")
    return ids


@contextlib.contextmanager
def atomic_npy(path, shape: tuple, dtype):
    """Yield a writable memory-mapped .npy array of `shape` and `dtype` in a
    temporary sibling of `path` (its space reserved up front), renamed to
    `path` once the block completes; removed if it fails."""
    path = Path(path)
    if path.suffix != ".npy":
        raise ConfigError("out", f"must be a .npy file, got {path}")
    check_output_file(path, "out")
    with naming(path, "write"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".npy", dir=path.parent)
        os.close(fd)
    try:
        with naming(path, "write"):
            array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
            reserve_space(tmp, os.path.getsize(tmp))
        yield array
        with naming(path, "write"):
            array.flush()
            del array
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.chmod(tmp, new_file_mode())
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
