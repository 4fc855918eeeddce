"""Non-finite numbers stop a run: a NaN or inf training loss (naming its
epoch and batch, unless allow_nonfinite_loss), a NaN validation metric is
never the best, and a checkpoint whose weights are not finite is refused."""

import math

import pytest
import torch

from gnnsys import DatasetError, train, train_fullgraph
from gnnsys.cli import main
from gnnsys.training.checkpoints import FILE, load_training_state
from gnnsys.training.control import EpochControl
from gnnsys.training.loop import NonFiniteLossError
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.result import best_record

FAST = dict(fanouts=[3, 2], hidden=8, batch_size=8, progress=False, prefetch=1, epochs=2)


@pytest.fixture
def tiny(make_dataset):
    return make_dataset(num_nodes=60)[0]


def nan_from_call(module, monkeypatch, first: int):
    """Make `module`'s task_loss NaN from its `first`-th call on."""
    real, calls = module.task_loss, []

    def loss(logits, y):
        calls.append(1)
        value = real(logits, y)
        return value * math.nan if len(calls) >= first else value

    monkeypatch.setattr(module, "task_loss", loss)
    return calls


def test_a_nan_loss_stops_training_naming_the_epoch_and_the_first_batch(tiny, monkeypatch):
    from gnnsys.trainers import minibatch

    calls = nan_from_call(minibatch, monkeypatch, 7)  # 4 batches an epoch: the 3rd of epoch 2
    with pytest.raises(NonFiniteLossError, match=r"^epoch 2, batch 3 of 4: the training loss is nan;"):
        train(tiny, **FAST)
    calls.clear()
    result = train(tiny, allow_nonfinite_loss=True, **FAST)
    assert math.isnan(result.epochs[1]["loss"]) and math.isfinite(result.epochs[0]["loss"])


def test_a_nan_fullgraph_loss_stops_training(tiny, monkeypatch):
    from gnnsys.trainers import fullgraph

    nan_from_call(fullgraph, monkeypatch, 2)
    with pytest.raises(NonFiniteLossError, match=r"^epoch 2: the training loss is nan"):
        train_fullgraph(tiny, epochs=3, hidden=8, progress=False)


def test_the_cli_says_it_in_one_line(tiny, capsys, monkeypatch):
    from gnnsys.trainers import minibatch

    nan_from_call(minibatch, monkeypatch, 1)
    argv = ["train", str(tiny.path), "--epochs", "3", "--fanouts", "3,2", "--hidden", "8"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "epoch 1, batch 1 of" in err and "--allow-nonfinite-loss" in err


def test_a_nan_validation_metric_is_never_best():
    history = [{"epoch": e, "valid": math.nan} for e in range(3)]
    assert best_record(history) is None
    history.append({"epoch": 3, "valid": 0.2})
    assert best_record(history)["epoch"] == 3


def test_early_stopping_counts_nan_validation_epochs():
    model = torch.nn.Linear(2, 2)
    control = EpochControl(MinibatchOptions(patience=2), model, torch.optim.Adam(model.parameters()))
    history = []
    for epoch in range(2):
        history.append({"epoch": epoch, "valid": math.nan})
        control.after_epoch(history)
    assert control.best_epoch is None and control.stopped


def test_a_checkpoint_with_nan_weights_is_refused(tiny, tmp_path, capsys):
    ckpt = tmp_path / "ck"
    train(tiny, checkpoint_dir=str(ckpt), **FAST)
    state = torch.load(ckpt / FILE, weights_only=True)
    name = next(iter(state["best_model"]))
    state["best_model"][name] = torch.full_like(state["best_model"][name], math.nan)
    torch.save(state, ckpt / FILE)
    with pytest.raises(DatasetError, match="weights are not finite"):
        load_training_state(ckpt)
    assert (
        main(["predict", str(tiny.path), "--checkpoint", str(ckpt), "--out", str(tmp_path / "p.npy"), "--no-progress"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weights are not finite" in err and not (tmp_path / "p.npy").exists()
    with pytest.raises(DatasetError, match="weights are not finite"):
        train(tiny, checkpoint_dir=str(ckpt), resume=True, **{**FAST, "epochs": 3})
