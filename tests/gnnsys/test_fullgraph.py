"""Single-process full-graph training and the in-process pipeline (one stage)."""

import pytest
import torch
from torch_geometric.data import Data

from gnnsys.datasets import Dataset
from gnnsys.errors import ConfigError
from gnnsys.models.dropout import hash_dropout
from gnnsys.models.units import InputProjection, build_units, full_forward, units_for
from gnnsys.parallel.partition import chunk_graph, relabel_csc
from gnnsys.parallel.ranks import Ranks
from gnnsys.samplers import Block
from gnnsys.trainers.fullgraph import train_fullgraph
from gnnsys.trainers.gnnpipe import PipelineStage, build_chunk_plans, plan_stages
from gnnsys.training.fullgraph_options import FullGraphOptions

FAST = dict(hidden=8, epochs=3, dropout=0.0, progress=False, seed=3, lr=0.02)


def tiny_dataset(n=90, edges=360, seed=0, classes=3):
    """A random undirected graph with planted labels."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, edges), generator=g)
    ei = torch.cat([ei, ei.flip(0)], 1)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 6, generator=g) + torch.nn.functional.one_hot(y, 6).float()
    perm = torch.randperm(n, generator=g)
    return Dataset.from_pyg(
        Data(x=x, edge_index=ei, y=y, train_idx=perm[:45], val_idx=perm[45:65], test_idx=perm[65:]), name="tiny"
    )


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
@pytest.mark.parametrize("layers", [2, 4])
def test_reference_learns(model, layers):
    r = train_fullgraph(tiny_dataset(), model=model, layers=layers, **dict(FAST, epochs=30))
    losses = [e["loss"] for e in r.epochs]
    assert losses[-1] < 0.9 * losses[0]
    assert r.config["input_proj"] == (layers >= 4) and r.config["norm"] == ("layer" if layers >= 4 else None)
    assert r.metric == "acc" and 0 <= r.test <= 1 and r.best_epoch is not None


def _stage_and_reference(model, chunks, method="rcm", dropout=0.0):
    ds = tiny_dataset()
    part = chunk_graph(ds.indptr, ds.indices, chunks, method)
    ip, ix = relabel_csc(ds.indptr, ds.indices, part.perm)
    x = ds.features[part.perm].float()
    torch.manual_seed(0)
    units = build_units(model, 6, 8, 3, 4, norm="layer", residual=True, dropout=dropout, input_proj=True)
    plans = build_chunk_plans(ip, ix, part.chunk_ptr, gcn=model == "gcn")
    train = torch.arange(0, 90, 2)
    stage = PipelineStage(
        list(units),
        plans,
        [u.in_dim for u in units],
        num_nodes=90,
        features=x,
        labels=ds.labels[part.perm],
        train_ids=train,
    )
    return stage, units, x, Block.full_graph(ip, ix), ds.labels[part.perm], train


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
@pytest.mark.parametrize("chunks", [1, 4])
def test_chunked_forward_is_exact_with_fresh_history(model, chunks):
    """The layer-wise exact pass equals the whole-graph forward; after it (no
    weight update) every chunk of a training forward in any order reads exact
    neighbour rows, so it equals the whole-graph forward too (dropout 0)."""
    stage, units, x, block, _, _ = _stage_and_reference(model, chunks)
    order = [2, 0, 3, 1] if chunks == 4 else [0]
    logits = stage.exact_pass()
    stage.exact_pass(refresh=True)  # warm-up: exact history, no weight update
    _, outputs, _ = stage.forward_pass(order)
    trained = torch.cat([outputs[-1][c] for c in range(chunks)]).detach()
    with torch.no_grad():
        expect = full_forward(units.eval(), x, block)
    torch.testing.assert_close(logits, expect, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trained, expect, atol=1e-5, rtol=1e-5)


def test_history_holds_training_mode_values_and_evaluation_leaves_it_alone():
    """With dropout p the warm-up stores what single-process training would
    read for a neighbour: the dropped-out input of every unit (zeros, the rest
    scaled by 1/(1-p)), not the eval-mode value; the training forward stores
    each chunk's dropped-out input; an evaluation pass changes nothing."""
    p = 0.5
    stage, units, x, _, _, _ = _stage_and_reference("sage", 4, dropout=p)
    with torch.no_grad():
        clean = torch.relu(units[0].lin(x))  # the input projection's eval-mode output = unit 1's input
    stage.exact_pass(refresh=True)
    warm = stage.hist[1].clone()
    kept = warm != 0
    torch.testing.assert_close(warm[kept], clean[kept] / (1 - p))
    dropped = (clean > 0) & ~kept
    assert 0.4 < dropped.sum() / (clean > 0).sum() < 0.6
    before = [h.clone() for h in stage.hist]
    stage.exact_pass()
    assert all(torch.equal(a, b) for a, b in zip(before, stage.hist))
    leaves, _, _ = stage.forward_pass([3, 1, 0, 2])
    for c, plan in enumerate(stage.plans):
        assert torch.equal(stage.hist[2][plan.start : plan.stop], leaves[2][c].detach())


def test_evaluating_more_often_does_not_change_pipelined_training():
    ds = tiny_dataset()
    runs = [
        train_fullgraph(ds, model="gcn", layers=4, chunks=4, eval_every=every, **dict(FAST, dropout=0.5, epochs=6))
        for every in (1, 3)
    ]
    assert [e["loss"] for e in runs[0].epochs] == [e["loss"] for e in runs[1].epochs]


def _pipeline_config(ds, **options) -> FullGraphOptions:
    """FullGraphOptions with `options`, completed for `ds` as the trainer does."""
    return FullGraphOptions(**options).for_dataset(ds)


def test_stages_draw_their_own_dropout_masks():
    """Every stage builds the same initial weights, then seeds its own dropout stream."""
    from gnnsys.trainers.gnnpipe import StageRunner, prepare_setup

    ds = tiny_dataset()
    config = _pipeline_config(ds, workers=2, chunks=2, layers=4, hidden=8, dropout=0.5)
    setup = prepare_setup(ds, config)
    draws, firsts = [], []
    for rank in (0, 1):
        run = StageRunner(setup, config, Ranks(rank, 2, "cpu", "gloo"))
        draws.append(torch.rand(16))
        firsts.append(run.stage.units[0].state_dict())
    assert not torch.equal(draws[0], draws[1])
    whole = units_for(config, ds.num_features, ds.num_classes)
    for rank in (0, 1):
        expect = whole[setup.stage_ptr[rank]].state_dict()
        assert all(torch.equal(expect[k], firsts[rank][k]) for k in expect)


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_one_chunk_gradients_match_reference(model):
    stage, units, x, block, y, train = _stage_and_reference(model, 1)
    order = [0]
    loss = stage.backward_pass(order, stage.forward_pass(order))
    mine = [p.grad.clone() for p in units.parameters()]
    units.zero_grad()
    ref = torch.nn.functional.cross_entropy(full_forward(units, x, block)[train], y[train])
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-6)
    for a, p in zip(mine, units.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("every", [0, 1])
def test_refresh_makes_every_training_forward_exact(every):
    """Without dropout, refresh_every=1 recomputes the history with the
    current weights before each epoch, so every epoch's training loss is the
    whole-graph loss of the weights it starts from; with stale history
    (every=0) only the first epoch's is."""
    from gnnsys.trainers.gnnpipe import StageRunner, prepare_setup

    ds = tiny_dataset()
    config = _pipeline_config(ds, chunks=4, layers=4, hidden=8, dropout=0.0, lr=0.05, refresh_every=every)
    setup = prepare_setup(ds, config)
    run = StageRunner(setup, config, Ranks.single("cpu"))
    run.stage.exact_pass(refresh=True)
    block, train = Block.full_graph(setup.indptr, setup.indices), setup.splits["train"]
    exact = []
    for epoch in range(3):
        with torch.no_grad():
            logits = full_forward(run.stage.units, setup.features, block)
        expect = torch.nn.functional.cross_entropy(logits[train], setup.labels[train]).item()
        exact.append(run.train_epoch(epoch)["loss"] == pytest.approx(expect, rel=1e-5))
    assert exact == [True, every == 1, every == 1]


def test_in_process_pipeline_with_one_chunk_equals_reference():
    ds = tiny_dataset()
    ref = train_fullgraph(ds, model="sage", layers=4, **FAST)
    one = train_fullgraph(ds, model="sage", layers=4, partition="range", chunks=1, workers=1, **FAST)
    pipe = train_fullgraph(ds, model="sage", layers=4, chunks=1, workers=1, warmup=False, **FAST)
    assert [e["loss"] for e in one.epochs] == [e["loss"] for e in ref.epochs]
    assert pipe.config["chunks"] == 1


@pytest.mark.parametrize("input_proj", [False, True])
def test_the_first_unit_drops_the_input_features(input_proj):
    units = build_units("gcn", 6, 8, 3, 4, input_proj=input_proj, input_dropout=0.3)
    assert [u.input_dropout.p for u in units] == [0.3] + [0.0] * (len(units) - 1)
    torch.manual_seed(0)
    proj = InputProjection(6, 8, input_dropout=0.5)
    x, block = torch.randn(5, 6), Block(torch.zeros(4, dtype=torch.long), torch.zeros(0, dtype=torch.long), 5, 3)
    torch.manual_seed(1)
    out = proj(x, block)
    torch.manual_seed(1)
    torch.testing.assert_close(out, torch.relu(proj.lin(hash_dropout(x[:3], 0.5))))


@pytest.mark.parametrize("pipeline", [{}, {"chunks": 2}])
def test_input_dropout_takes_effect_in_fullgraph_training(pipeline):
    """Reference and GNNPipe runs drop input features and record the option."""
    ds = tiny_dataset()
    plain = train_fullgraph(ds, model="gcn", **dict(FAST, **pipeline))
    dropped = train_fullgraph(ds, model="gcn", input_dropout=0.5, **dict(FAST, **pipeline))
    assert dropped.config["input_dropout"] == 0.5 and plain.config["input_dropout"] == 0.0
    assert dropped.epochs[0]["loss"] != plain.epochs[0]["loss"]


def test_chunked_training_stays_close_to_reference():
    ds = tiny_dataset()
    ref = train_fullgraph(ds, model="gcn", layers=4, **dict(FAST, epochs=40))
    pipe = train_fullgraph(ds, model="gcn", layers=4, chunks=4, **dict(FAST, epochs=40))
    assert abs(pipe.epochs[-1]["loss"] - ref.epochs[-1]["loss"]) < 0.1
    assert pipe.config["partition_used"] in ("metis", "rcm") and len(pipe.config["chunk_sizes"]) == 4


@pytest.mark.parametrize(
    "costs, stages, expect",
    [
        ([1, 1, 1, 1], 2, [0, 2, 4]),
        ([5, 1, 1, 1, 1, 1], 2, [0, 1, 6]),
        ([1, 2, 3, 4, 5], 3, [0, 3, 4, 5]),
        ([3], 1, [0, 1]),
    ],
)
def test_stage_plan_minimises_the_slowest_stage(costs, stages, expect):
    assert plan_stages(costs, stages) == expect


def test_reference_resumes_to_the_same_result(tmp_path):
    ds = tiny_dataset()
    full = train_fullgraph(ds, model="sage", layers=2, **FAST)
    train_fullgraph(ds, model="sage", layers=2, checkpoint_dir=tmp_path, **dict(FAST, epochs=2))
    resumed = train_fullgraph(ds, model="sage", layers=2, checkpoint_dir=tmp_path, resume=True, **FAST)
    assert [e["loss"] for e in resumed.epochs] == [e["loss"] for e in full.epochs]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"model": "mlp"}, "model"),
        ({"workers": 9, "layers": 2}, "workers"),
        ({"chunks": 3, "norm": "batch"}, "norm"),
        ({"resume": True}, "resume"),
        ({"partition": "kmeans"}, "partition"),
        ({"refresh_every": -1}, "refresh_every"),
        ({"chunks": 10_000}, "chunks"),
        ({"workers": 1.5}, "workers"),
        ({"input_dropout": 1.0}, "input_dropout"),
    ],
)
def test_bad_options_name_the_option(kwargs, name):
    with pytest.raises(ConfigError, match=f"^{name}:"):
        train_fullgraph(tiny_dataset(), **dict(FAST, **kwargs))
