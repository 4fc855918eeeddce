"""Fixtures shared by every test folder (small random graphs and datasets), the
`gpu` marker, and the order the tests run in."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

# Without CUDA, Triton kernels run in Triton's interpreter. The variable is read
# when triton is first imported, so it is set here, before any test module.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# `--precision auto` resolves by the CPU; the suite, its subprocesses included,
# runs as on a CPU without native bf16 (fp32) on every machine. Tests of the
# bf16 paths inject a CPU that has it (tests/gnnsys/test_precision.py).
os.environ.setdefault("GNNSYS_CPU_BF16", "0")

from gnnsys.datasets import GraphSource, PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.source import array_edge_chunks, array_feature_chunks

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def random_source(num_nodes=60, num_edges=400, dim=7, num_classes=3, seed=0, name="tiny"):
    """A GraphSource of a random graph with random features, labels and a split,
    and the arrays it was made from (src, dst, x, y)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    x = rng.standard_normal((num_nodes, dim)).astype(np.float32)
    y = rng.integers(0, num_classes, num_nodes)
    perm = rng.permutation(num_nodes)
    a, b = int(num_nodes * 0.5), int(num_nodes * 0.7)
    return GraphSource(
        name=name,
        kind="arrays",
        num_nodes=num_nodes,
        feature_dim=dim,
        edge_chunks=array_edge_chunks(src, dst, 97),
        feature_chunks=array_feature_chunks(x, 13),
        labels=y,
        splits={"train": perm[:a], "valid": perm[a:b], "test": perm[b:]},
        num_classes=num_classes,
    ), {"src": src, "dst": dst, "x": x, "y": y}


@pytest.fixture
def make_dataset(tmp_path):
    """make_dataset(**random_source kwargs, options=PrepareOptions) -> (Dataset, arrays)."""
    count = [0]

    def make(options=None, **kwargs):
        source, arrays = random_source(**kwargs)
        count[0] += 1
        path = write_dataset(source, tmp_path / f"ds{count[0]}", options or PrepareOptions(progress=False))
        return load_dataset(path), arrays

    return make


def pytest_collection_modifyitems(config, items):
    """The docs test first: its one fixture runs every documented command (the
    longest single job of the suite), so under pytest-xdist's `--dist loadfile`
    it starts at once on one worker while the others share the other files.
    Skip the tests marked `gpu` when CUDA is not available."""
    items.sort(key=lambda item: Path(str(item.path)).name != "test_docs.py")
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
