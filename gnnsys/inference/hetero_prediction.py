"""`predict` for a heterogeneous dataset: the R-GCN of a `gnnsys train
--checkpoint-dir` checkpoint, rebuilt from its options with the weights of
its best validation epoch, run by exact layer-wise inference
(gnnsys.inference.rgcn_layerwise) over the target type's nodes; class
scores, labels or a layer's output, as gnnsys.inference.prediction.predict gives them
for a homogeneous one. The layers are held in memory, so the streaming
options (scratch_dir, host_mem_budget, dtype) do not apply.
"""

from __future__ import annotations

from pathlib import Path

from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.inference.prediction_io import (
    atomic_npy,
    check_layer,
    check_nodes,
    load_weights,
    output_rows,
    read_checkpoint,
)
from gnnsys.inference.rgcn_layerwise import hetero_layerwise_logits
from gnnsys.trainers.hetero import build_hetero_model
from gnnsys.training.hetero_options import HeteroOptions

HETERO_MODEL_OPTIONS = ("hidden", "layers", "fanouts", "dropout", "input_dropout", "embedding_dim", "seed")


def predict_hetero(
    dataset: HeteroDataset, checkpoint, out, nodes, output: str, layer, batch_size: int, device, progress: bool
):
    """gnnsys.inference.prediction.predict's result for `nodes` of the target type of
    `dataset` (default all of them): scores, labels or the output of
    `layer`; the array, or the Path of `out` (.npy, written atomically)."""
    model = load_hetero_model(checkpoint, dataset, device)
    layer = check_layer(layer, len(model.layers), output)
    nodes = check_nodes(nodes, dataset.num_nodes(dataset.target))
    width = model.layers[layer - 1].out_dim
    shape, kind, transform = output_rows(output, dataset.task, nodes.shape[0], width)

    def rows():
        logits = hetero_layerwise_logits(model, dataset, nodes, batch_size, device, progress=progress, num_layers=layer)
        return (logits if transform is None else transform(logits)).numpy()

    if out is None:
        return rows().astype(kind, copy=False)
    with atomic_npy(out, shape, kind) as array:  # the output path is checked before the work
        array[:] = rows()
    return Path(out)


def load_hetero_model(checkpoint, dataset: HeteroDataset, device="cpu"):
    """The HeteroRGCN saved in `checkpoint` (a checkpoint directory or its
    checkpoint.pt of training on a heterogeneous dataset) built for
    `dataset` on `device` with the weights of its epoch of best validation;
    DatasetError naming the checkpoint when they do not fit."""
    state, file = read_checkpoint(checkpoint, dataset)
    saved = state["options"]
    options = HeteroOptions(**{k: saved[k] for k in HETERO_MODEL_OPTIONS if k in saved})
    model = build_hetero_model(dataset, options)
    types = ", ".join(f"{t} {dataset.feature_dim(t)}" for t in dataset.features)
    fits = f"dataset {dataset.name!r} (features: {types}; {dataset.num_classes} classes)"
    return load_weights(model, state, file, "R-GCN", fits).to(device).eval()
