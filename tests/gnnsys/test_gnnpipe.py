"""GNNPipe over 2 and 4 gloo processes equals the same chunked schedule in
one process (forward, gradients, Adam steps), and with one chunk equals
single-process full-graph training."""

import pytest
import torch
from torch_geometric.data import Data

from gnnsys.datasets import Dataset
from gnnsys.trainers.fullgraph import train_fullgraph

FAST = dict(model="sage", layers=4, hidden=8, epochs=3, dropout=0.0, progress=False, seed=5, lr=0.02, timeout_s=60)


def tiny_dataset(n=80, edges=320):
    g = torch.Generator().manual_seed(1)
    ei = torch.randint(0, n, (2, edges), generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    perm = torch.randperm(n, generator=g)
    return Dataset.from_pyg(
        Data(
            x=torch.randn(n, 5, generator=g),
            edge_index=torch.cat([ei, ei.flip(0)], 1),
            y=y,
            train_idx=perm[:40],
            val_idx=perm[40:60],
            test_idx=perm[60:],
        ),
        name="tiny",
    )


def trajectory(result):
    return [(e["loss"], e["train"], e["valid"], e["test"]) for e in result.epochs]


@pytest.mark.parametrize("workers, chunks", [(2, 3), (4, 3)])
def test_pipeline_equals_the_same_schedule_in_one_process(workers, chunks):
    """Same losses and metrics every epoch: the p2p activations/gradients and
    per-stage Adam steps reproduce the single-process chunked run."""
    ds = tiny_dataset()
    one = train_fullgraph(ds, workers=1, chunks=chunks, **FAST)
    many = train_fullgraph(ds, workers=workers, chunks=chunks, **FAST)
    for a, b in zip(trajectory(one), trajectory(many)):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert len(many.config["stage_ptr"]) == workers + 1
    per_boundary = ds.num_nodes * FAST["hidden"] * 4 * 2  # activations forward + gradients back
    assert many.epochs[0]["bytes_sent"] == (workers - 1) * per_boundary


def test_pipeline_with_one_chunk_equals_full_graph_training():
    ds = tiny_dataset()
    ref = train_fullgraph(ds, **FAST)
    pipe = train_fullgraph(ds, workers=2, chunks=1, **FAST)
    for a, b in zip(trajectory(ref), trajectory(pipe)):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
