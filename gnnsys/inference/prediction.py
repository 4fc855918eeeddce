"""`predict(dataset, checkpoint, ...)`: a trained model's class scores,
predicted labels or a layer's embeddings, from a `gnnsys train
--checkpoint-dir` checkpoint, by streaming layer-wise inference
(gnnsys.inference.layerwise), so the features and hidden layers may exceed
memory; written atomically to a .npy file or returned as an array.

A checkpoint is refused (DatasetError naming it, one line) when it is not a
minibatch training checkpoint, when it was trained on other data (the
identity of a prepared dataset's data, a hash of its files' checksums, is
recorded in the checkpoint's options; the path is not compared, so a moved
or copied dataset directory still works), or when its weights do not fit
the model its options describe on this dataset. A checkpoint from before
identities were recorded, or of a dataset made in memory, is judged by its
weights' shapes alone (the feature and class counts).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np

from gnnsys._capabilities import normalize_device
from gnnsys.datasets import as_dataset
from gnnsys.datasets.finite_rows import check_finite_features
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.errors import ConfigError
from gnnsys.inference.layerwise import check_streaming, stream_inference
from gnnsys.inference.prediction_io import (
    OUTPUTS,
    atomic_npy,
    check_layer,
    check_nodes,
    load_weights,
    output_rows,
    read_checkpoint,
)
from gnnsys.inference.rows_io import ArraySink
from gnnsys.models.gnn import GNN, GNNLayer
from gnnsys.training.model import build_model
from gnnsys.training.options import MinibatchOptions

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
    default every node), in the order given. On a heterogeneous dataset the
    nodes are its target type's and the R-GCN runs by exact in-memory
    inference (gnnsys.inference.hetero_prediction): scratch_dir, host_mem_budget,
    dtype and return_stats are refused there.

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
    check_finite_features(dataset)
    if isinstance(dataset, HeteroDataset):
        from gnnsys.inference.hetero_prediction import predict_hetero

        given = dict(scratch_dir=scratch_dir, host_mem_budget=host_mem_budget, return_stats=return_stats or None)
        for name, value in {**given, "dtype": None if dtype == "float32" else dtype}.items():
            if value is not None:
                raise ConfigError(
                    name,
                    "belongs to streaming inference of a homogeneous graph; a heterogeneous graph's holds its "
                    "layers in memory",
                )
        return predict_hetero(dataset, checkpoint, out, nodes, output, layer, batch_size, device, progress)
    model = load_model(checkpoint, dataset, device)
    layer = check_layer(layer, model.num_layers, output)
    nodes = check_nodes(nodes, dataset.num_nodes)
    width = cast(GNNLayer, model.layers[layer - 1]).out_dim
    shape, kind, transform = output_rows(output, dataset.task, nodes.shape[0], width)
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


def load_model(checkpoint, dataset, device="cpu") -> GNN:
    """The GNN saved in `checkpoint` (a checkpoint directory or its
    checkpoint.pt) built for `dataset` on `device`, with the weights of its
    epoch of best validation (those of the last epoch in a checkpoint from
    before they were kept); DatasetError naming the checkpoint when it is
    not a minibatch checkpoint of a built-in model or its weights do not
    fit (another dataset's feature or class count, or another model)."""
    state, file = read_checkpoint(checkpoint, dataset)
    saved = state["options"]
    options = MinibatchOptions(**{k: saved[k] for k in MODEL_OPTIONS if k in saved})
    model = cast(GNN, build_model(dataset, options))  # a built-in model: user modules were refused
    fits = f"dataset {dataset.name!r} ({dataset.num_features} features, {dataset.num_classes} classes)"
    load_weights(model, state, file, options.model, fits)
    return model.to(device).eval()
