"""Atomic checkpoints, and resume ending exactly like an uninterrupted run."""
import random

import numpy as np
import pytest
import torch

from gnnsys import DatasetError, train
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


def test_rng_state_round_trip():
    state = rng_state()
    first = (torch.rand(3), np.random.rand(), random.random())
    set_rng_state(state)
    again = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


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


def test_resume_without_checkpoint_starts_fresh(make_dataset, tmp_path):
    ds, _ = make_dataset()
    assert_same_run(train(ds, epochs=2, checkpoint_dir=tmp_path, resume=True, **FAST), train(ds, epochs=2, **FAST))


def test_resume_refuses_other_options(make_dataset, tmp_path):
    ds, _ = make_dataset()
    train(ds, epochs=1, checkpoint_dir=tmp_path, **FAST)
    with pytest.raises(DatasetError, match="different options \\(hidden, lr\\); cannot resume"):
        train(ds, epochs=2, checkpoint_dir=tmp_path, resume=True, **{**FAST, "hidden": 8, "lr": 0.1})
