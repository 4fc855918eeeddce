"""A sampled MiniBatch as numpy arrays and back, exactly (the packed tier
writes the batches it sampled ahead in this form, storage/packing.py, and the
loader takes them instead of sampling again)."""

from __future__ import annotations

import numpy as np
import torch

from gnnsys.samplers.block import Block, MiniBatch


def minibatch_arrays(mb: MiniBatch) -> dict:
    """{name: numpy array} of a sampled MiniBatch: its seeds, input nodes and
    each block's indptr, indices and (num_src, num_dst) ("sizes")."""
    arrays = {"seeds": mb.seeds.numpy(), "input_nodes": mb.input_nodes.numpy()}
    arrays["sizes"] = np.array([[b.num_src, b.num_dst] for b in mb.blocks], np.int64).reshape(-1, 2)
    for i, b in enumerate(mb.blocks):
        arrays[f"indptr{i}"], arrays[f"indices{i}"] = b.indptr.numpy(), b.indices.numpy()
    return arrays


def minibatch_from_arrays(arrays: dict) -> MiniBatch:
    """The MiniBatch `minibatch_arrays` gave `arrays` for (the same tensors, dtypes included)."""
    blocks = [
        Block(torch.from_numpy(arrays[f"indptr{i}"]), torch.from_numpy(arrays[f"indices{i}"]), int(src), int(dst))
        for i, (src, dst) in enumerate(arrays["sizes"])
    ]
    return MiniBatch(torch.from_numpy(arrays["seeds"]), torch.from_numpy(arrays["input_nodes"]), blocks)
