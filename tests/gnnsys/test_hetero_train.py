"""Training on a heterogeneous dataset: learning from a featureless type's
embeddings, exact resume, runs, the per-type feature tiers, the loader, and
the options that are refused."""

import warnings

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys import ConfigError, HeteroOptions, MinibatchOptions
from gnnsys.datasets.features_file import open_rows
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.loading.feature_store import open_feature_store, type_out_degree
from gnnsys.loading.loader import MinibatchLoader
from gnnsys.loading.options import BatchOptions, PipelineOptions, SamplingOptions
from gnnsys.storage.ssd import SSDFeatures
from gnnsys.storage.table import RowTable
from gnnsys.training.checkpoints import load_checkpoint
from tests.gnnsys.test_checkpoint import Killed, kill_after
from tests.gnnsys.test_training_runs import comparable
from tests.hetero_graphs import CITES, WRITES, WRITTEN_BY, csc, hetero_dataset

FAST = dict(fanouts=[3, 3], hidden=16, batch_size=16, progress=False, prefetch=2)


def authored(num_papers=240, num_authors=40, seed=0, features=None):
    """Papers written by one author each; a paper's label is its author's class
    (author % 2). Paper features are noise: only the authors' learned
    embeddings can tell the classes apart."""
    rng = np.random.default_rng(seed)
    author = rng.integers(0, num_authors, num_papers)
    cites = (rng.integers(0, num_papers, 2 * num_papers), rng.integers(0, num_papers, 2 * num_papers))
    types = {"paper": num_papers, "author": num_authors}
    relations = {
        WRITES: csc(author, np.arange(num_papers), num_papers),
        WRITTEN_BY: csc(np.arange(num_papers), author, num_authors),
        CITES: csc(*cites, num_papers),
    }
    x = torch.from_numpy(rng.standard_normal((num_papers, 4)).astype(np.float32))
    perm = torch.from_numpy(rng.permutation(num_papers))
    return HeteroDataset(
        name="authored",
        node_types=types,
        relations=relations,
        features={"paper": x if features is None else features(x)},
        target="paper",
        labels=torch.from_numpy(author % 2),
        splits={"train": perm[:120], "valid": perm[120:180], "test": perm[180:]},
        num_classes=2,
    )


def metrics(result):
    """Each epoch's loss and metrics."""
    return [(e["loss"], e["train"], e["valid"], e["test"]) for e in result.epochs]


def mapped(x: torch.Tensor, path) -> RowTable:
    """`x` written to `path` as aligned 512-byte rows, memory-mapped back (as a prepared dataset's table)."""
    rows = open_rows(path, x.shape[0], 512, mode="w+")
    rows[:] = 0
    rows[:, : x.shape[1] * 4] = x.numpy().view(np.uint8).reshape(x.shape[0], -1)
    rows.flush()
    return RowTable(open_rows(path, x.shape[0], 512), x.shape[1], torch.float32)


@pytest.mark.parametrize("sparse", [False, True], ids=["adam", "sparse-adam"])
def test_learns_labels_that_only_a_featureless_neighbour_type_carries(sparse):
    ds = authored()
    result = gnnsys.train(ds, epochs=8, lr=0.02, dropout=0.0, weight_decay=0, sparse_embeddings=sparse, **FAST)
    assert result.config["embedding_dim"] is None and result.model.embedding_types == ["author"]
    assert result.model.embeddings["author"].sparse == sparse
    assert result.test > 0.85, [e["test"] for e in result.epochs]  # chance: 0.5
    assert result.epochs[-1]["loss"] < result.epochs[0]["loss"]


@pytest.mark.parametrize("sparse", [False, True], ids=["adam", "sparse-adam"])
def test_resume_after_a_kill_equals_the_uninterrupted_run(tmp_path, sparse):
    ds = hetero_dataset()
    fast = {**FAST, "weight_decay": 0, "sparse_embeddings": sparse}
    full = gnnsys.train(ds, epochs=3, **fast)
    with pytest.raises(Killed):  # dies after epoch 2's checkpoint
        gnnsys.train(ds, epochs=3, checkpoint_dir=tmp_path, on_epoch_end=kill_after(1), **fast)
    assert load_checkpoint(tmp_path)["epoch"] == 2
    resumed = gnnsys.train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **fast)
    assert comparable(resumed) == comparable(full)
    for (name, p), q in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    with pytest.raises(gnnsys.DatasetError, match="different options.*embedding_dim"):
        gnnsys.train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **{**fast, "embedding_dim": 4})
    with pytest.raises(gnnsys.DatasetError, match="different options.*sparse_embeddings"):
        gnnsys.train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **{**fast, "sparse_embeddings": not sparse})


def test_runs_train_consecutive_seeds_with_their_own_checkpoints(tmp_path):
    ds = hetero_dataset()
    result = gnnsys.train(ds, epochs=2, runs=2, seed=5, checkpoint_dir=tmp_path, **FAST)
    assert [r["seed"] for r in result.runs] == [5, 6]
    assert set(result.summary) >= {"highest_valid", "final_test"} and result.summary["final_test"]["std"] is not None
    assert (tmp_path / "run-01" / "checkpoint.pt").is_file() and (tmp_path / "run-02" / "checkpoint.pt").is_file()
    single = gnnsys.train(ds, epochs=2, seed=6, **FAST)
    assert comparable(single)[0] == comparable(result)[3][1]["epochs"]  # run 2 is the run of seed 6


def test_ssd_and_cache_tiers_serve_every_type_the_rows_of_its_table(tmp_path):
    ds = authored(features=lambda x: mapped(x, tmp_path / "paper.features.bin"))
    plain = gnnsys.train(ds, epochs=2, eval="sampled", **FAST)  # as features="ssd" evaluates by default
    for tiers in (dict(cache_rows=30, cache_policy="lru"), dict(cache_rows=30, cache_policy="hybrid", lookahead=2)):
        with warnings.catch_warnings():  # where tmp_path ignores O_DIRECT the SSD tier says so, and reads buffered
            warnings.simplefilter("ignore", RuntimeWarning)
            tiered = gnnsys.train(ds, epochs=2, features="ssd", **tiers, **FAST)
        assert metrics(tiered) == metrics(plain)  # the same rows, whatever served them
        counted = tiered.epochs[0]["tiers"]["paper"]
        assert counted["ssd"]["unique_rows"] > 0 and counted["cache"]["requested"] > 0
    with pytest.raises(ConfigError, match="features: 'ssd' reads each node type's features file; paper's are held"):
        gnnsys.train(hetero_dataset(), epochs=1, features="ssd", **FAST)


def test_the_ssd_tier_reads_a_memory_mapped_tables_file(tmp_path):
    x = torch.randn(50, 6)
    table = mapped(x, tmp_path / "rows.bin")
    with SSDFeatures(table, direct=False) as ssd:
        ids = torch.tensor([7, 0, 49, 7, 13])
        assert torch.equal(ssd.gather(ids), x[ids]) and ssd.shape == (50, 6)
    with pytest.raises(ConfigError, match="features"):
        SSDFeatures(RowTable.from_tensor(x))


def test_type_stacks_share_the_cache_and_score_by_out_degree():
    ds = hetero_dataset()
    options = HeteroOptions(fanouts=[2, 2], batch_size=8, cache_rows=12, cache_policy="static", progress=False)
    stacks = open_feature_store(ds, options, "cpu")
    assert set(stacks) == {"paper"} and stacks["paper"].name == "cache" and not stacks.homogeneous
    ids = torch.arange(0, 60, 7)
    assert torch.equal(stacks["paper"].gather(ids), ds.features["paper"][ids])
    indptr, indices = ds.relations[CITES]
    degree = type_out_degree(ds, "paper")  # cites + written_by (papers are the sources of both)
    expect = np.bincount(indices.numpy(), minlength=60) + np.bincount(ds.relations[WRITTEN_BY][1], minlength=60)
    assert np.array_equal(degree, expect)


def test_the_loader_gathers_each_featured_types_rows_and_labels():
    ds = hetero_dataset()
    fanouts = [{r: (0 if r == CITES else 2) for r in ds.edge_types}, 2]
    loader = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=fanouts), BatchOptions(batch_size=8, seed=3), PipelineOptions(prefetch=2)
    )
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    seen = torch.cat([mb.seeds for mb in batches])
    assert sorted(seen.tolist()) == sorted(ds.split("train").tolist())
    for mb in batches:
        assert set(mb.x) == {"paper"} and torch.equal(mb.x["paper"], ds.features["paper"][mb.input_nodes["paper"]])
        assert torch.equal(mb.y, ds.labels[mb.seeds])
        assert mb.blocks[-1].relations[CITES].num_edges == 0  # the output layer draws no citations
    synchronous = MinibatchLoader(
        ds, "train", SamplingOptions(fanouts=fanouts), BatchOptions(batch_size=8, seed=3), PipelineOptions(prefetch=0)
    )
    assert all(torch.equal(a.input_nodes["author"], b.input_nodes["author"]) for a, b in zip(batches, synchronous))
    with pytest.raises(ValueError, match="lookahead needs a feature stack with a cache"):
        MinibatchLoader(ds, "train", SamplingOptions(fanouts=[2]), pipeline=PipelineOptions(lookahead=1))
    with pytest.raises(ValueError, match="sampler 'gpu'"):
        MinibatchLoader(ds, "train", SamplingOptions(fanouts=[2], sampler="gpu"))


def test_relation_fanouts_reach_the_sampler():
    ds = hetero_dataset()
    options = HeteroOptions(fanouts=(3, 2), relation_fanouts={"paper__cites__paper": [0, -1]})
    per_layer = options.sampler_fanouts(ds.edge_types)
    assert per_layer[0][CITES] == 0 and per_layer[1][CITES] == -1 and per_layer[0][WRITES] == 3
    result = gnnsys.train(ds, epochs=1, relation_fanouts={"paper__cites__paper": [0, 1]}, **FAST)
    assert result.config["relation_fanouts"] == {"paper__cites__paper": [0, 1]}


@pytest.mark.parametrize(
    "options, name",
    [
        (dict(model="gat"), "model"),
        (dict(heads=2), "heads"),
        (dict(norm="layer"), "norm"),
        (dict(residual=True), "residual"),
        (dict(sampler="gpu"), "sampler"),
        (dict(inference_dtype="bfloat16"), "inference_dtype"),
        (dict(eval="exact"), "eval"),
        (dict(workers=2), "workers"),
        (dict(embedding_dim=0), "embedding_dim"),
        (dict(sparse_embeddings=True, weight_decay=5e-4), "sparse_embeddings"),
        (dict(sparse_embeddings=1), "sparse_embeddings"),
        (dict(relation_fanouts={"paper__cites__paper": [1]}), "relation_fanouts"),
        (dict(relation_fanouts={"paper__likes__paper": [1, 1]}), "relation_fanouts"),
    ],
)
def test_options_that_do_not_apply_are_refused_in_one_line(options, name):
    with pytest.raises(ConfigError) as refused:
        gnnsys.train(hetero_dataset(), epochs=1, **{**FAST, **options})
    assert refused.value.option == name and "\n" not in str(refused.value)


def test_sparse_embeddings_need_a_type_without_features():
    ds = authored()
    ds = HeteroDataset(
        name="all-featured",
        node_types=ds.node_types,
        relations=ds.relations,
        features={"paper": ds.features["paper"], "author": torch.zeros(ds.node_types["author"], 2)},
        target="paper",
        labels=ds.labels,
        splits={s: ds.split(s) for s in ("train", "valid", "test")},
        num_classes=2,
    )
    with pytest.raises(ConfigError, match="has no embeddings") as refused:
        gnnsys.train(ds, epochs=1, weight_decay=0, sparse_embeddings=True, **FAST)
    assert refused.value.option == "sparse_embeddings"


def test_the_trainers_refuse_the_other_kind(make_dataset):
    with pytest.raises(ConfigError, match="user module"):
        gnnsys.train(hetero_dataset(), model=torch.nn.Linear(2, 2), **FAST)
    from gnnsys.trainers.hetero import train_hetero
    from gnnsys.trainers.minibatch import train

    with pytest.raises(ConfigError, match="heterogeneous"):
        train(hetero_dataset(), **FAST)
    homogeneous, _ = make_dataset()
    with pytest.raises(ConfigError, match="homogeneous"):
        train_hetero(homogeneous, **FAST)
    assert HeteroOptions.build(MinibatchOptions(hidden=8)).hidden == 8  # the CLI's options of either kind


@pytest.fixture(scope="module")
def prepared_mag(tmp_path_factory):
    """A prepared ogbn-mag-shaped dataset (the synthetic generator, 368 papers)."""
    from gnnsys.datasets import prepare_synthetic

    return prepare_synthetic(out=tmp_path_factory.mktemp("mag") / "mag", like="mag", scale=0.0005, progress=False)


CLI = ["--fanouts", "3,2", "--hidden", "8", "--batch-size", "64", "--epochs", "2", "--no-progress"]


def test_cli_trains_a_prepared_heterogeneous_dataset(prepared_mag, tmp_path, capsys):
    from gnnsys.cli import main

    out = tmp_path / "result.json"
    argv = ["train", str(prepared_mag), *CLI, "--embedding-dim", "4", "--relation-fanouts", "paper__cites__paper=0,1"]
    argv += ["--sparse-embeddings", "--weight-decay", "0"]
    assert main([*argv, "--runs", "2", "--verify", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Run 02:" in printed and "All runs:" in printed
    result = gnnsys.TrainResult.load(out)
    assert result.config["embedding_dim"] == 4 and result.config["relation_fanouts"] == {"paper__cites__paper": [0, 1]}
    assert result.config["sparse_embeddings"] is True
    assert len(result.runs) == 2 and len(result.epochs) == 2
    again = gnnsys.train(str(prepared_mag), epochs=2, fanouts=[3, 2], hidden=8, batch_size=64, progress=False)
    assert again.model.embedding_types == ["author", "institution", "field_of_study"]


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--mode", "fullgraph"], "--mode"),
        (["--model", "gat"], "--model"),
        (["--relation-fanouts", "paper__likes__paper=1,1"], "--relation-fanouts"),
        (["--scratch-dir", "/tmp"], "--scratch-dir"),
        (["--sparse-embeddings"], "--sparse-embeddings"),  # with the default weight decay
    ],
)
def test_cli_refuses_what_does_not_apply_in_one_line(prepared_mag, capsys, flags, flag):
    from gnnsys.cli import main

    assert main(["train", str(prepared_mag), *CLI, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {flag}:" in err


def test_cli_refuses_heterogeneous_flags_on_a_homogeneous_dataset(make_dataset, capsys):
    from gnnsys.cli import main

    ds, _ = make_dataset()
    assert main(["train", str(ds.path), *CLI, "--embedding-dim", "4"]) == 2
    assert "--embedding-dim: does not apply to a homogeneous dataset" in capsys.readouterr().err
