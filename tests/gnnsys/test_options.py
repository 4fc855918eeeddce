"""Typed options: defaults, checks when built, dataset completion, resume keys."""

import math

import pydantic
import pytest

from gnnsys.datasets import PrepareOptions
from gnnsys.datasets.synthetic import read_synthetic
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.options import MinibatchOptions


def test_options_are_frozen_and_round_trip_through_a_dict():
    o = MinibatchOptions(fanouts=[5, 4], checkpoint_dir=None)
    assert o.fanouts == (5, 4) and o.layers == 2 and o.lr == 0.005
    with pytest.raises(pydantic.ValidationError, match="frozen"):
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
        (FullGraphOptions, {"fanouts": [2]}, "fanouts"),
        (MinibatchOptions, {"lr": -0.01}, "lr"),
        (MinibatchOptions, {"lr": float("nan")}, "lr"),
        (FullGraphOptions, {"weight_decay": -1}, "weight_decay"),
        (MinibatchOptions, {"device": "banana"}, "device"),
        (FullGraphOptions, {"device": "meta"}, "device"),
        (MinibatchOptions, {"input_dropout": -0.1}, "input_dropout"),
        (FullGraphOptions, {"input_dropout": 1.0}, "input_dropout"),
        (MinibatchOptions, {"hidden": 2**31}, "hidden"),
        (MinibatchOptions, {"seed": 2**64}, "seed"),
        (MinibatchOptions, {"fanouts": [5, 0]}, "fanouts"),
        (MinibatchOptions, {"runs": 101}, "runs"),
        (MinibatchOptions, {"cache_gb": 1e13}, "cache_gb"),
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


@pytest.mark.parametrize(
    "keywords, option",
    [
        (dict(lr_schedule="cosine", lr_gamma=0.1), "lr_gamma"),  # the default value, where it does not apply
        (dict(lr_min=0.0), "lr_min"),
        (dict(lr_schedule="step", lr_patience=10), "lr_patience"),
        (dict(lr_step_size=10), "lr_step_size"),
        (dict(lookahead=0), "lookahead"),
        (dict(cache_policy="static"), "cache_policy"),
        (dict(replicate_frac=0.0, cache_rows=10), "replicate_frac"),
        (dict(eval="sampled", inference_dtype="float32"), "inference_dtype"),
        (dict(cache_rows=0, cache_gb=1.0), "cache_gb"),
    ],
)
def test_an_option_that_does_not_apply_is_refused_whatever_its_value(keywords, option):
    with pytest.raises(ConfigError, match=f"^{option}: "):
        MinibatchOptions(**keywords)


def test_a_user_model_refuses_the_shape_options_at_their_default_values():
    with pytest.raises(ConfigError, match="^hidden: "):
        MinibatchOptions(model="module:Net", hidden=256)
    with pytest.raises(ConfigError, match="^runs: "):
        FullGraphOptions(workers=2, runs=1)


def test_none_is_an_option_not_given():
    o = MinibatchOptions(lr_schedule="cosine", lr_gamma=None, lookahead=None, hidden=None)
    assert (o.lr_gamma, o.lookahead, o.hidden) == (0.1, 0, 256)
    assert not o.given("lr_gamma") and o.given("lr_schedule")


def test_given_options_survive_replace_and_a_dict_round_trip():
    o = MinibatchOptions(lr_schedule="cosine")
    assert o.to_dict()["lr_gamma"] is None and o.to_dict()["lookahead"] is None  # they do not apply
    assert o.replace(seed=3).seed == 3  # the defaults replace keeps are not "given"
    assert MinibatchOptions(**o.to_dict()) == o
    with pytest.raises(ConfigError, match="^lr_gamma: "):
        o.replace(lr_gamma=0.5)


def test_every_float_option_of_every_command_takes_finite_numbers_only():
    import argparse

    from gnnsys.cli import build_parser
    from gnnsys.numbers import gigabytes, number

    def actions(parser):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    yield from actions(sub)
            else:
                yield a

    floats = [a for a in actions(build_parser()) if a.type in (float, number, gigabytes)]
    assert [a.dest for a in floats if a.type is float] == []
    assert {"lr", "scale", "degree_exponent", "max_degree_factor", "mem_limit"} <= {a.dest for a in floats}
    for text in ("inf", "nan", "-inf", "1e300"):
        with pytest.raises(argparse.ArgumentTypeError):
            number(text)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PrepareOptions(mem_limit=1e308).check(),
        lambda: read_synthetic("arxiv", degree_exponent=math.inf),
        lambda: read_synthetic("arxiv", max_degree_factor=math.inf),
        lambda: read_synthetic("arxiv", scale=1e300),
    ],
)
def test_the_python_api_of_prepare_refuses_non_finite_and_huge_floats(make):
    with pytest.raises(DatasetError, match="must be a"):
        make()


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"cache_policy": "lr"}, "cache_policy: must be one of static, .*, got 'lr' \\(did you mean 'lru'\\?\\)"),
        ({"norm": "btch"}, "norm: must be one of batch, layer or None, got 'btch' \\(did you mean 'batch'\\?\\)"),
        ({"hiden": 3}, "hiden: is not an option of MinibatchOptions \\(did you mean 'hidden'\\?\\)"),
        ({"features": "zzz"}, "features: must be one of auto, gpu, pinned, cpu-gather, ssd, packed, got 'zzz'$"),
    ],
)
def test_a_mistyped_name_or_choice_is_answered_with_the_nearest(keywords, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        MinibatchOptions(**keywords)


def test_a_checkpoint_lacking_options_is_completed_from_the_schema():
    saved = MinibatchOptions.saved({"hidden": 16, "an_option_of_old": 1})
    assert saved["hidden"] == 16 and saved["lr"] == 0.005 and "an_option_of_old" not in saved
    assert saved["precision"] == "32"  # what runs from before the option trained in
    assert set(saved) == set(MinibatchOptions.model_fields)
