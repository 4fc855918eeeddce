"""Atomic checkpoints of tensors and plain data only (a pickled object is
refused and never runs), and resume ending exactly like an uninterrupted run."""

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys import DatasetError, train, train_fullgraph
from gnnsys.cli import main
from gnnsys.training.checkpoints import FILE, load_checkpoint, rng_state, save_checkpoint, set_rng_state

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=8, progress=False, prefetch=2, dropout=0.3)


def comparable(result):
    """Everything a rerun must reproduce: per-epoch loss and metrics, weights."""
    epochs = [{k: v for k, v in e.items() if k not in ("time_s", "breakdown")} for e in result.epochs]
    return epochs, result.best_epoch, result.test


def assert_same_run(a, b):
    assert comparable(a) == comparable(b)
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name


def draws():
    """One draw of every generator, Gaussian ones included (they cache a second value)."""
    return torch.rand(3).tolist(), np.random.rand(), np.random.randn(), random.random(), random.gauss(0, 1)


def test_rng_state_round_trips_through_a_checkpoint(tmp_path):
    np.random.randn(), random.gauss(0, 1)  # leave a cached Gaussian in both states
    save_checkpoint(tmp_path, {"rng": rng_state()})
    first = draws()
    set_rng_state(load_checkpoint(tmp_path)["rng"])
    assert draws() == first


def test_save_is_atomic_and_load(tmp_path):
    assert load_checkpoint(tmp_path) is None
    save_checkpoint(tmp_path, {"epoch": 1, "w": torch.arange(3)})
    save_checkpoint(tmp_path, {"epoch": 2, "w": torch.arange(4)})
    assert [p.name for p in tmp_path.iterdir()] == [FILE]  # no temporary left behind
    state = load_checkpoint(tmp_path)
    assert state["epoch"] == 2 and torch.equal(state["w"], torch.arange(4))


def test_truncated_checkpoint_is_one_line_error(tmp_path):
    save_checkpoint(tmp_path, {"epoch": 1, "w": torch.arange(1000)})
    data = (tmp_path / FILE).read_bytes()
    (tmp_path / FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=f"{FILE}: cannot read checkpoint"):
        load_checkpoint(tmp_path)


class Killed(Exception):
    pass


def kill_after(epoch):
    def hook(record):
        if record["epoch"] == epoch:
            raise Killed

    return hook


@pytest.mark.parametrize("model", ["sage", "gat"])
def test_resume_after_kill_equals_uninterrupted(make_dataset, tmp_path, model):
    ds, _ = make_dataset(num_nodes=80, num_edges=500)
    full = train(ds, model=model, epochs=3, heads=2, **FAST)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(Killed):  # dies after epoch 2's checkpoint
        train(ds, model=model, epochs=3, heads=2, checkpoint_dir=ckpt, on_epoch_end=kill_after(1), **FAST)
    assert load_checkpoint(ckpt)["epoch"] == 2
    resumed = train(ds, model=model, epochs=3, heads=2, checkpoint_dir=ckpt, resume=True, **FAST)
    assert_same_run(resumed, full)


def test_resume_with_more_epochs_equals_longer_run(make_dataset, tmp_path):
    ds, _ = make_dataset(num_nodes=80, num_edges=500)
    full = train(ds, epochs=3, **FAST)
    train(ds, epochs=1, checkpoint_dir=tmp_path, **FAST)
    resumed = train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **FAST)
    assert_same_run(resumed, full)
    again = train(ds, epochs=3, checkpoint_dir=tmp_path, resume=True, **FAST)  # nothing left to run
    assert_same_run(again, full)


TRAINERS = {
    "minibatch": lambda ds, **kw: train(ds, **FAST, **kw),
    "fullgraph": lambda ds, **kw: train_fullgraph(ds, layers=2, hidden=16, progress=False, **kw),
    "gnnpipe": lambda ds, **kw: train_fullgraph(ds, layers=2, hidden=16, chunks=2, progress=False, **kw),
}


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("made", [False, True])
def test_resume_without_checkpoint_says_so_and_starts_fresh(make_dataset, tmp_path, caplog, trainer, made):
    ds, _ = make_dataset()
    ckpt = tmp_path / "ckpt"
    if made:
        ckpt.mkdir()
    with caplog.at_level(logging.WARNING, logger="gnnsys.training.checkpoints"):
        resumed = TRAINERS[trainer](ds, epochs=2, checkpoint_dir=ckpt, resume=True)
    assert [r.getMessage() for r in caplog.records if r.name == "gnnsys.training.checkpoints"] == [
        f"resume: no checkpoint in {ckpt}; training from the first epoch"
    ]
    assert comparable(resumed) == comparable(TRAINERS[trainer](ds, epochs=2))


@pytest.mark.parametrize("trainer", TRAINERS)
def test_resume_says_where_it_continues_in_one_line(make_dataset, tmp_path, caplog, trainer):
    ds, _ = make_dataset()
    TRAINERS[trainer](ds, epochs=1, checkpoint_dir=tmp_path)
    for epochs, said in (
        (3, f"continuing from epoch 2 of 3, after the checkpoint of epoch 1 in {tmp_path}"),
        (3, f"the run checkpointed in {tmp_path} trained 3 of 3 epochs; nothing left to train"),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gnnsys.training.checkpoints"):
            TRAINERS[trainer](ds, epochs=epochs, checkpoint_dir=tmp_path, resume=True)
        assert [r.getMessage() for r in caplog.records] == [f"resume: {said}"]


def test_resume_of_a_run_stopped_early_says_so(make_dataset, tmp_path, caplog):
    ds, _ = make_dataset()
    first = train(ds, epochs=30, patience=1, checkpoint_dir=tmp_path, **FAST)
    assert len(first.epochs) < 30
    with caplog.at_level(logging.WARNING, logger="gnnsys.training.checkpoints"):
        train(ds, epochs=30, patience=1, checkpoint_dir=tmp_path, resume=True, **FAST)
    assert [r.getMessage() for r in caplog.records] == [
        f"resume: the run checkpointed in {tmp_path} stopped early; nothing left to train"
    ]


def test_resume_refuses_other_options(make_dataset, tmp_path):
    ds, _ = make_dataset()
    train(ds, epochs=1, checkpoint_dir=tmp_path, **FAST)
    with pytest.raises(DatasetError, match="different options \\(hidden, lr\\); cannot resume"):
        train(ds, epochs=2, checkpoint_dir=tmp_path, resume=True, **{**FAST, "hidden": 8, "lr": 0.1})


class Payload:
    """Pickles as a call of open(marker, "w"): loading it with pickle creates the file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_checkpoint_with_a_pickled_object_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "payload-ran"
    torch.save({"epoch": 1, "model": Payload(marker)}, tmp_path / FILE)
    with pytest.raises(DatasetError) as info:
        load_checkpoint(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / FILE}: refused: needs io.open, but a checkpoint holds only tensors and "
        "plain data (loading this file could run code)"
    )
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_resume_from_a_pickled_object_exits_2_in_one_line(make_dataset, tmp_path, capsys, mode):
    ds, _ = make_dataset()
    marker = tmp_path / "payload-ran"
    torch.save({"epoch": 1, "model": Payload(marker)}, tmp_path / FILE)
    argv = [
        "train",
        str(ds.path),
        "--mode",
        mode,
        "--epochs",
        "2",
        "--hidden",
        "8",
        "--no-progress",
        "--checkpoint-dir",
        str(tmp_path),
        "--resume",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gnnsys train: error: {tmp_path / FILE}: refused: needs io.open")
    assert not marker.exists()


@pytest.mark.parametrize(
    "value, kind", [(np.float64(0.5), "float64"), (np.arange(3), "ndarray"), (Path("x"), "PosixPath"), ({1, 2}, "set")]
)
def test_save_refuses_what_a_weights_only_load_would(tmp_path, value, kind):
    with pytest.raises(TypeError, match=f"^checkpoint state\\['history'\\]\\[0\\] is a {kind}: "):
        save_checkpoint(tmp_path, {"history": [value]})
    assert not (tmp_path / FILE).exists()
