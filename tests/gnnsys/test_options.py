"""Typed options: defaults, checks when built, dataset completion, resume keys."""

import dataclasses

import pytest

from gnnsys.errors import ConfigError
from gnnsys.training.options import FullGraphOptions, MinibatchOptions


def test_options_are_frozen_and_round_trip_through_a_dict():
    o = MinibatchOptions(fanouts=[5, 4], checkpoint_dir=None)
    assert o.fanouts == (5, 4) and o.layers == 2 and o.lr == 0.005
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.lr = 1.0
    assert MinibatchOptions(**o.to_dict()) == o
    assert o.to_dict()["fanouts"] == [5, 4]


@pytest.mark.parametrize("layers, deep", [(2, False), (4, True)])
def test_fullgraph_deep_defaults(layers, deep):
    o = FullGraphOptions(layers=layers)
    assert (o.input_proj, o.residual, o.norm) == (deep, deep, "layer" if deep else None)
    assert FullGraphOptions(layers=layers, norm=None, residual=False).norm is None
    assert FullGraphOptions(**o.to_dict()) == o


@pytest.mark.parametrize(
    "cls, keywords, option",
    [
        (MinibatchOptions, {"lr": "0.1"}, "lr"),
        (MinibatchOptions, {"residual": 1}, "residual"),
        (MinibatchOptions, {"hidden": True}, "hidden"),
        (MinibatchOptions, {"fanoutz": [1]}, "fanoutz"),
        (MinibatchOptions, {"prefetch": -1}, "prefetch"),
        (MinibatchOptions, {"sampler": "tpu"}, "sampler"),
        (FullGraphOptions, {"balance": "guess"}, "balance"),
        (FullGraphOptions, {"timeout_s": 0}, "timeout_s"),
        (FullGraphOptions, {"history_momentum": 1.0}, "history_momentum"),
        (FullGraphOptions, {"layers": None}, "layers"),
        (FullGraphOptions, {"fanouts": [2]}, "fanouts"),
        (MinibatchOptions, {"lr": -0.01}, "lr"),
        (MinibatchOptions, {"lr": float("nan")}, "lr"),
        (FullGraphOptions, {"weight_decay": -1}, "weight_decay"),
        (MinibatchOptions, {"device": "banana"}, "device"),
        (FullGraphOptions, {"device": "meta"}, "device"),
        (MinibatchOptions, {"input_dropout": -0.1}, "input_dropout"),
        (FullGraphOptions, {"input_dropout": 1.0}, "input_dropout"),
    ],
)
def test_bad_values_name_the_option(cls, keywords, option):
    with pytest.raises(ConfigError, match=f"^{option}: "):
        cls.build(keywords=keywords)


@pytest.mark.parametrize("cls", [MinibatchOptions, FullGraphOptions])
def test_both_trainers_take_input_dropout(cls):
    assert cls(input_dropout=0.5).to_dict()["input_dropout"] == 0.5 and cls().input_dropout == 0.0


def test_ints_are_accepted_for_floats():
    assert MinibatchOptions(lr=1, dropout=0).lr == 1.0


def test_for_dataset_resolves_the_metric(make_dataset):
    ds, _ = make_dataset(num_classes=2)
    o = MinibatchOptions().for_dataset(ds)
    assert o.metric == "auc" and o.dataset == str(ds.path)
    with pytest.raises(ConfigError, match="^metric: "):
        MinibatchOptions(metric="auc").for_dataset(make_dataset(num_classes=3)[0])


def test_resume_key_leaves_out_what_a_resume_may_change():
    a = MinibatchOptions(epochs=3, progress=False, features="cpu-gather")
    b = MinibatchOptions(epochs=9, checkpoint_dir="ckpt", resume=True)
    assert a.resume_key() == b.resume_key()
    assert a.resume_key() != MinibatchOptions(lr=0.1).resume_key()
    assert "timeout_s" not in FullGraphOptions().resume_key()


def test_checkpoint_dir_naming_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="^checkpoint_dir: .* exists and is not a directory"):
        MinibatchOptions(checkpoint_dir=tmp_path / "f")
    assert MinibatchOptions(checkpoint_dir=tmp_path).checkpoint_dir == str(tmp_path)
