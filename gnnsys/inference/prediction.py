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
from gnnsys.inference.layerwise import stream_inference
from gnnsys.inference.prediction_io import (
    atomic_npy,
    check_layer,
    check_nodes,
    load_weights,
    output_rows,
    read_checkpoint,
)
from gnnsys.inference.prediction_options import HeteroPredictOptions, PredictOptions
from gnnsys.inference.rows_io import ArraySink
from gnnsys.models.gnn import GNN, GNNLayer
from gnnsys.storage.memory_plan import GB
from gnnsys.training.model import build_model
from gnnsys.training.options import MinibatchOptions

MODEL_OPTIONS = ("model", "hidden", "fanouts", "dropout", "input_dropout", "norm", "residual", "heads", "seed")


def predict(dataset, checkpoint, out=None, *, nodes=None, options=None, return_stats: bool = False, **keywords):
    """The outputs of the model in a `gnnsys train --checkpoint-dir` checkpoint for the nodes of a dataset.

    On a homogeneous dataset the model runs by streaming layer-wise
    inference; on a heterogeneous one, over its target type's nodes, the
    R-GCN runs by exact in-memory inference
    (gnnsys.inference.hetero_prediction), whose options have none of the
    streaming ones (`HeteroPredictOptions`).

    Args:
        dataset: a Dataset or HeteroDataset, or a prepared directory.
        checkpoint: the checkpoint directory of `gnnsys train --checkpoint-dir` or its checkpoint.pt.
        out: a .npy path, written atomically (a temporary sibling renamed into place when complete, its space
            reserved first); None returns the array itself.
        nodes: the node ids whose rows to give, in that order (default every node).
        options: a `PredictOptions` (or `HeteroPredictOptions`), instead of keywords.
        return_stats: also return the streaming inference's InferenceStats (homogeneous datasets).
        **keywords: the options as keywords (gnnsys.inference.prediction_options, the same as `gnnsys
            predict`'s flags): output ("scores": the last layer's logits, float32 [n, classes], before
            softmax; "labels": their argmax, int64 [n], for a multi-label dataset each task's 0/1 prediction,
            int8 [n, tasks]; "embeddings": the output of `layer`, 1-based, default the last, float32
            [n, width]), layer, batch_size, device, progress, and for streaming inference host_mem_budget
            (GB), scratch_dir and inference_dtype.

    Returns:
        The Path of `out`, or the array when `out` is None; with `return_stats`, (that, InferenceStats).
    """
    dataset = as_dataset(dataset)
    hetero = isinstance(dataset, HeteroDataset)
    o = (HeteroPredictOptions if hetero else PredictOptions).build(options, keywords)
    device = normalize_device(o.device)
    check_finite_features(dataset)
    if hetero:
        from gnnsys.inference.hetero_prediction import predict_hetero

        if return_stats:
            raise ConfigError("return_stats", "belongs to streaming inference; a heterogeneous graph's is in memory")
        return predict_hetero(dataset, checkpoint, out, nodes, o.output, o.layer, o.batch_size, device, o.progress)
    model = load_model(checkpoint, dataset, device)
    layer = check_layer(o.layer, model.num_layers, o.output)
    nodes = None if nodes is None else check_nodes(nodes, dataset.num_nodes)  # None: every node, holding no ids
    width = cast(GNNLayer, model.layers[layer - 1]).out_dim
    count = dataset.num_nodes if nodes is None else nodes.shape[0]
    shape, kind, transform = output_rows(o.output, dataset.task, count, width)
    run = dict(
        num_layers=layer,
        batch_size=o.batch_size,
        device=device,
        progress=o.progress,
        host_mem_budget=None if o.host_mem_budget is None else int(o.host_mem_budget * GB),
        scratch_dir=o.scratch_dir,
        dtype=o.inference_dtype,
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
