"""The leaderboard protocol (`runs`: seeds seed, seed + 1, ..., each run's
best-validation weights, mean ± std over runs as OGB's Logger reports them),
learning-rate schedules and early stopping, and a user's module as the model."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.nn import SAGEConv

from gnnsys import ConfigError, DatasetError, FullGraphOptions, train, train_fullgraph
from gnnsys.cli import main
from gnnsys.inference.layerwise import layerwise_inference
from gnnsys.training.checkpoints import load_checkpoint, save_checkpoint
from gnnsys.training.evaluation import eval_nodes, split_scores
from gnnsys.training.result import LOGGER_METRICS
from tests.gnnsys.test_checkpoint import Killed, kill_after

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import this module's model by name

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2)
USER = {k: v for k, v in FAST.items() if k != "hidden"}  # a user module has its own width
CLI_FAST = ["--fanouts", "4,3", "--hidden", "16", "--batch-size", "16", "--no-progress"]


def strip(epochs):
    """Epoch records less their timings."""
    return [{k: v for k, v in e.items() if k not in ("time_s", "breakdown")} for e in epochs]


def comparable(result):
    """What a resumed or repeated training must reproduce: every run's epochs
    (less timings), the best epoch, its test metric and the summaries."""
    runs = [{**r, "epochs": strip(r["epochs"])} for r in result.runs]
    return strip(result.epochs), result.best_epoch, result.test, runs, result.summary


def assert_same(a, b):
    assert comparable(a) == comparable(b)
    for ma, mb in zip(a.models, b.models, strict=True):
        for (name, p), q in zip(ma.state_dict().items(), mb.state_dict().values(), strict=True):
            assert torch.equal(p, q), name


@pytest.fixture
def easy(make_dataset):
    """200 nodes whose 2-class labels are the sign of feature 0 (learnable in a few epochs)."""
    ds, arrays = make_dataset(num_nodes=200, num_edges=800, dim=4, num_classes=2, seed=1)
    ds.labels = torch.from_numpy((arrays["x"][:, 0] > 0).astype("int64"))
    return ds


# -- best-validation weights --------------------------------------------------------------------


def test_result_model_holds_the_best_validation_epochs_weights(easy, tmp_path):
    """lr 2 overshoots: validation peaks at epoch 6 of 8. result.model has that
    epoch's checkpointed weights (not the last), and its predictions give the
    recorded validation accuracy."""
    ckpt = tmp_path / "ckpt"
    weights = {}

    def keep(record):  # after the epoch's checkpoint: that epoch's weights
        weights[record["epoch"]] = load_checkpoint(ckpt)["model"]

    result = train(easy, epochs=8, lr=2.0, metric="acc", dropout=0.0, checkpoint_dir=ckpt, on_epoch_end=keep, **FAST)
    assert result.best_epoch == 5 and len(result.epochs) == 8  # peaks early, training went on
    best = weights[result.best_epoch]
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, best[name]), name
    assert not all(torch.equal(v, weights[7][k]) for k, v in best.items())  # the last epoch's differ
    for name, value in load_checkpoint(ckpt)["best_model"].items():  # the checkpoint keeps them too
        assert torch.equal(value, best[name]), name
    splits = {s: easy.split(s) for s in ("train", "valid", "test")}
    logits = layerwise_inference(result.model, easy, eval_nodes(splits))
    scores = split_scores("acc", logits, easy.labels, splits)
    assert scores["valid"] == result.epochs[5]["valid"] and scores["test"] == result.test


# -- runs: seeds, statistics, output ------------------------------------------------------------


def test_runs_train_consecutive_seeds_and_report_mean_and_std(easy):
    result = train(easy, epochs=3, lr=0.05, runs=3, seed=7, **FAST)
    assert [r["seed"] for r in result.runs] == [7, 8, 9] and len(result.models) == 3
    second = train(easy, epochs=3, lr=0.05, seed=8, **FAST)  # run 1 is the single run of seed 8
    assert strip(second.epochs) == strip(result.runs[1]["epochs"])
    assert all(torch.equal(p, q) for p, q in zip(second.model.parameters(), result.models[1].parameters()))
    for run in result.runs:
        best = max((e for e in run["epochs"] if e["valid"] is not None), key=lambda e: e["valid"])
        assert run["best_epoch"] == best["epoch"] and run["final_test"] == best["test"]
        assert run["final_train"] == best["train"] and run["highest_valid"] == best["valid"]
        assert run["highest_train"] == max(e["train"] for e in run["epochs"])
    for name in LOGGER_METRICS:
        values = np.array([r[name] for r in result.runs])
        assert result.summary[name]["mean"] == pytest.approx(values.mean(), abs=1e-12)
        assert result.summary[name]["std"] == pytest.approx(values.std(ddof=1), abs=1e-12)
    chosen = result.runs[result.best_run]
    assert chosen["highest_valid"] == max(r["highest_valid"] for r in result.runs)
    assert result.test == chosen["final_test"] and result.model is result.models[result.best_run]


def test_one_run_keeps_its_fields_and_has_no_std(easy):
    result = train(easy, epochs=2, **FAST)
    assert len(result.runs) == 1 and result.best_run == 0 and result.config["runs"] == 1
    assert result.summary["final_test"] == {"mean": result.test, "std": None}


def test_cli_prints_the_ogb_logger_statistics_and_json_holds_every_run(easy, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["train", str(easy.path), "--epochs", "2", "--runs", "2", "--json", str(out), *CLI_FAST]
    assert main(argv) == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 2 and all(len(r["epochs"]) == 2 for r in data["runs"])
    for run in data["runs"]:
        block = f"Run {run['run'] + 1:02d}:\nHighest Train: {100 * run['highest_train']:.2f}\n"
        assert block in text and f"   Final Test: {100 * run['final_test']:.2f}\n" in text
    test = data["summary"]["final_test"]
    assert "All runs:\n" in text and f"   Final Test: {100 * test['mean']:.2f} ± {100 * test['std']:.2f}" in text


@pytest.mark.parametrize(
    "argv,option",
    [
        (["--runs", "0"], "--runs: must be in 1..100"),
        (["--runs", "-2"], "--runs: must be in 1..100"),
        (["--runs", "101"], "--runs: must be in 1..100"),
        (["--patience", "0"], "patience: must be >= 1"),
        (["--lr-gamma", "0.5"], "--lr-gamma: applies to lr_schedule step or plateau"),
        (["--lr-schedule", "step", "--lr-gamma", "2"], "--lr-gamma: must be in (0, 1)"),
        (["--lr-schedule", "cosine", "--lr-min", "1"], "--lr-min: must be in [0, lr"),
        (["--lr-schedule", "step", "--lr-step-size", "0"], "--lr-step-size: must be >= 1"),
        (["--lr-schedule", "plateau", "--lr-patience", "-1"], "--lr-patience: must be >= 0"),
    ],
)
def test_bad_options_are_one_line_and_leave_nothing(easy, tmp_path, capsys, argv, option):
    ckpt = tmp_path / "ckpt"
    assert main(["train", str(easy.path), *argv, "--checkpoint-dir", str(ckpt), *CLI_FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err
    assert not ckpt.exists()


def test_unknown_schedule_is_refused(easy, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", str(easy.path), "--lr-schedule", "exp"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="lr_schedule: must be one of none, step, cosine, plateau"):
        train(easy, lr_schedule="exp", **FAST)


def test_gnnpipe_refuses_runs_schedules_and_patience():
    for keywords in (dict(runs=2), dict(patience=3), dict(lr_schedule="step")):
        with pytest.raises(ConfigError, match="not supported by GNNPipe"):
            FullGraphOptions(workers=2, layers=2, **keywords)


def test_fullgraph_reference_trains_runs_with_a_schedule(easy):
    result = train_fullgraph(easy, epochs=4, runs=2, lr_schedule="step", lr_step_size=2, lr_gamma=0.5, progress=False)
    assert [r["seed"] for r in result.runs] == [0, 1]
    assert [e["lr"] for e in result.epochs] == [0.01, 0.01, 0.005, 0.005]


# -- checkpoints and resume with runs, schedules and patience ------------------------------------


def test_runs_resume_keeps_finished_runs_and_continues_the_unfinished(easy, tmp_path):
    whole = train(easy, epochs=3, runs=3, **FAST)
    ckpt = tmp_path / "ckpt"
    seen = []

    def second_run_dies(record):
        seen.append(record["epoch"])
        if len(seen) == 5:  # run 2's second epoch
            raise Killed

    with pytest.raises(Killed):
        train(easy, epochs=3, runs=3, checkpoint_dir=ckpt, on_epoch_end=second_run_dies, **FAST)
    assert sorted(p.name for p in ckpt.iterdir() if p.is_dir()) == ["run-01", "run-02"]
    assert load_checkpoint(ckpt / "run-01")["epoch"] == 3 and load_checkpoint(ckpt / "run-02")["epoch"] == 2
    again = []
    resumed = train(
        easy, epochs=3, runs=3, checkpoint_dir=ckpt, resume=True, on_epoch_end=lambda r: again.append(1), **FAST
    )
    assert len(again) == 1 + 3  # run 2's last epoch, run 3's three: run 1 was not trained again
    assert_same(whole, resumed)


def test_checkpoint_layouts_of_one_and_several_runs_are_not_mixed(easy, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(easy, epochs=1, checkpoint_dir=ckpt, **FAST)
    with pytest.raises(ConfigError, match="runs: .* holds the checkpoint of a single run"):
        train(easy, epochs=1, runs=2, checkpoint_dir=ckpt, resume=True, **FAST)
    many = tmp_path / "many"
    train(easy, epochs=1, runs=2, checkpoint_dir=many, **FAST)
    with pytest.raises(ConfigError, match="runs: .* holds the checkpoints of several runs"):
        train(easy, epochs=1, checkpoint_dir=many, resume=True, **FAST)


SCHEDULES = [
    dict(lr_schedule="step", lr_step_size=2, lr_gamma=0.5),
    dict(lr_schedule="cosine", lr_min=0.001),
    dict(lr_schedule="plateau", lr_patience=0, lr_gamma=0.5),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: s["lr_schedule"])
def test_resume_with_a_schedule_and_patience_equals_uninterrupted(easy, tmp_path, schedule):
    keywords = dict(epochs=6, lr=0.5, patience=3, dropout=0.3, **schedule, **FAST)
    whole = train(easy, **keywords)
    rates = [e["lr"] for e in whole.epochs]
    assert rates[0] == 0.5 and len(set(rates)) > 1  # the schedule changed the rate
    ckpt = tmp_path / "ckpt"
    with pytest.raises(Killed):
        train(easy, checkpoint_dir=ckpt, on_epoch_end=kill_after(2), **keywords)
    assert load_checkpoint(ckpt)["control"]["scheduler"]  # the schedule's state is checkpointed
    assert_same(whole, train(easy, checkpoint_dir=ckpt, resume=True, **keywords))


def test_step_schedule_follows_torch(easy):
    result = train(easy, epochs=5, lr=0.04, lr_schedule="step", lr_step_size=2, lr_gamma=0.5, **FAST)
    assert [e["lr"] for e in result.epochs] == pytest.approx([0.04, 0.04, 0.02, 0.02, 0.01])


def test_patience_stops_and_a_stopped_run_stays_stopped(easy, tmp_path):
    ckpt = tmp_path / "ckpt"
    result = train(easy, epochs=8, lr=2.0, metric="acc", dropout=0.0, patience=1, checkpoint_dir=ckpt, **FAST)
    run = result.runs[0]
    best = run["best_epoch"]
    assert run["stopped_early"] and run["epochs_trained"] == best + 2 < 8  # one epoch without improvement
    assert load_checkpoint(ckpt)["control"]["stopped"]
    trained = []
    again = train(
        easy,
        epochs=8,
        lr=2.0,
        metric="acc",
        dropout=0.0,
        patience=1,
        checkpoint_dir=ckpt,
        resume=True,
        on_epoch_end=trained.append,
        **FAST,
    )
    assert trained == [] and comparable(again) == comparable(result)


def test_resume_refuses_another_schedule(easy, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(easy, epochs=2, lr_schedule="cosine", checkpoint_dir=ckpt, **FAST)
    with pytest.raises(DatasetError, match="different options .*lr_schedule"):
        train(easy, epochs=3, checkpoint_dir=ckpt, resume=True, **FAST)
    with pytest.raises(DatasetError, match="different options .*epochs"):  # cosine anneals over the epochs
        train(easy, epochs=3, lr_schedule="cosine", checkpoint_dir=ckpt, resume=True, **FAST)


def test_a_checkpoint_from_before_the_control_resumes(easy, tmp_path):
    """A checkpoint without the new options and entries resumes (schedule none, no patience, one run)."""
    ckpt = tmp_path / "ckpt"
    whole = train(easy, epochs=3, **FAST)
    with pytest.raises(Killed):
        train(easy, epochs=3, checkpoint_dir=ckpt, on_epoch_end=kill_after(1), **FAST)
    state = load_checkpoint(ckpt)
    for name in ("runs", "patience", "lr_schedule", "lr_step_size", "lr_gamma", "lr_min", "lr_patience"):
        del state["options"][name]
    del state["control"], state["best_model"]
    save_checkpoint(ckpt, state)
    resumed = train(easy, epochs=3, checkpoint_dir=ckpt, resume=True, **FAST)
    assert comparable(resumed)[:3] == comparable(whole)[:3]


# -- a user's module ----------------------------------------------------------------------------


class BlockSage(nn.Module):
    """A user model of the blocks interface: mean-aggregating SAGE convs and a linear head."""

    def __init__(self, dim, classes, hidden=8):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(dim, hidden), SAGEConv(hidden, hidden)])
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, blocks):
        h = x
        for conv, block in zip(self.convs, blocks):
            h = torch.relu(conv((h, h[: block.num_dst]), block.adj_t()))
        return self.head(h)


class NoBlocks(BlockSage):
    def forward(self, x):
        return self.head(x)


class WrongWidth(BlockSage):
    def forward(self, x, blocks):
        return super().forward(x, blocks)[:, :1]


class Crashes(BlockSage):
    def forward(self, x, blocks):
        return blocks.missing


class NoParameters(nn.Module):
    def forward(self, x, blocks):
        return x


def test_a_user_module_trains_with_checkpoints_and_runs(easy, tmp_path):
    module = BlockSage(4, 2)
    given = {k: v.clone() for k, v in module.state_dict().items()}
    ckpt = tmp_path / "ckpt"
    result = train(easy, model=module, epochs=3, lr=0.02, runs=2, checkpoint_dir=ckpt, **USER)
    assert all(torch.equal(v, given[k]) for k, v in module.state_dict().items())  # the module passed is untouched
    assert all(isinstance(m, BlockSage) and m is not module for m in result.models)
    assert result.config["model"] == f"module:{BlockSage.__module__}.BlockSage"
    assert result.config["eval"] == "sampled"  # no GNNLayer `layers` to stream
    first, second = (m.state_dict() for m in result.models)
    assert not torch.equal(first["head.weight"], second["head.weight"])  # re-initialised per run
    for i, m in enumerate(result.models):  # each run's best weights are its checkpoint's
        kept = load_checkpoint(ckpt / f"run-{i + 1:02d}")["best_model"]
        assert all(torch.equal(v, kept[k]) for k, v in m.state_dict().items())
    again = train(easy, model=BlockSage(4, 2), epochs=3, lr=0.02, runs=2, **USER)  # another instance, same seeds
    assert_same(result, again)


def test_a_user_module_resumes_to_the_uninterrupted_result(easy, tmp_path):
    keywords = dict(epochs=3, lr=0.02, lr_schedule="step", lr_step_size=1, **USER)
    whole = train(easy, model=BlockSage(4, 2), **keywords)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(Killed):
        train(easy, model=BlockSage(4, 2), checkpoint_dir=ckpt, on_epoch_end=kill_after(1), **keywords)
    assert_same(whole, train(easy, model=BlockSage(4, 2), checkpoint_dir=ckpt, resume=True, **keywords))
    with pytest.raises(DatasetError, match="user module"):
        from gnnsys import predict

        predict(easy, ckpt)


@pytest.mark.parametrize(
    "module,keywords,message",
    [
        (NoBlocks(4, 2), {}, r"model: NoBlocks.forward\(x\) must take \(x, blocks\)"),
        (WrongWidth(4, 2), {}, r"model: WrongWidth.forward\(x, blocks\) must return .*\[2, 2\], got \(2, 1\)"),
        (Crashes(4, 2), {}, r"model: Crashes.forward\(x, blocks\) failed .*AttributeError"),
        (BlockSage(5, 2), {}, r"model: BlockSage.forward\(x, blocks\) failed .*4 input features"),
        (NoParameters(), {}, "model: NoParameters has no parameters"),
        (BlockSage(4, 2), dict(hidden=32), "hidden: shapes the built-in models"),
        (BlockSage(4, 2), dict(eval="layerwise"), "eval: layer-wise evaluation streams"),
        (nn.Sequential(), {}, "model: Sequential has no parameters"),
    ],
)
def test_a_wrong_module_is_refused_before_training(easy, tmp_path, module, keywords, message):
    ckpt = tmp_path / "ckpt"
    trained = []
    with pytest.raises(ConfigError, match=message):
        train(easy, model=module, epochs=1, checkpoint_dir=ckpt, on_epoch_end=trained.append, **{**USER, **keywords})
    assert trained == [] and not ckpt.exists()


def test_a_module_without_reset_parameters_cannot_repeat_runs(easy):
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(4, 2))

        def forward(self, x, blocks):
            return x[: blocks[-1].num_dst] @ self.w

    assert train(easy, model=Fixed(), epochs=1, **USER).model.w.shape == (4, 2)  # one run trains it as given
    with pytest.raises(ConfigError, match="runs: Fixed has no submodule with reset_parameters"):
        train(easy, model=Fixed(), epochs=1, runs=2, **USER)


def test_a_user_module_trains_data_parallel_runs(make_dataset, tmp_path):
    ds, _ = make_dataset(num_nodes=80, num_edges=500, dim=4, num_classes=2)
    ckpt = tmp_path / "ckpt"
    result = train(ds, model=BlockSage(4, 2), epochs=2, runs=2, workers=2, checkpoint_dir=ckpt, **USER)
    assert [r["seed"] for r in result.runs] == [0, 1] and all(isinstance(m, BlockSage) for m in result.models)
    assert result.summary["final_test"]["std"] is not None
    for i, model in enumerate(result.models):  # each run's model holds its best epoch's weights
        kept = load_checkpoint(ckpt / f"run-{i + 1:02d}")["best_model"]
        assert all(torch.equal(v, kept[k]) for k, v in model.state_dict().items())
