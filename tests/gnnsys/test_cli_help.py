"""Every help text of every (sub)command agrees with the defaults: a default
that is a value is shown through argparse's %(default)s (or, for `train`,
whose flags have no argparse defaults, generated from each mode's options),
and nothing else in a help text names a default."""

import argparse
import re

import pytest

from gnnsys.cli import build_parser
from gnnsys.inference.prediction_options import PredictOptions
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.hetero_options import HeteroOptions
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.schema import cli_info

MENTION = re.compile(r"\(default[^()]*\)")
TRAIN_MENTION = re.compile(r"\(default: (?P<mini>[^;()]*)(; --mode fullgraph: (?P<full>[^()]*))?\)")
FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


def parsers(parser, words=()):
    """(words, parser) of `parser` and every (sub)command under it."""
    yield " ".join(words), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*words, name))


def documented_actions():
    return [
        pytest.param(parser, action, id=f"{words} {action.option_strings[0] if action.option_strings else action.dest}")
        for words, parser in parsers(build_parser())
        for action in parser._actions
        if action.help not in (None, argparse.SUPPRESS)
        and not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
    ]


def shown(info) -> str | None:
    """What a help text must say of the default of an option (its schema field `info`)."""
    value, described = info.default, cli_info(info)["shown"]
    if described:
        assert value in (None, "auto"), f"{info}: {value!r} is a value; show it, not a description"
        return described
    if isinstance(value, bool):
        return "on" if value else "off"
    return None if value is None else ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


MODES = {
    mode: cls.model_fields
    for mode, cls in (
        ("minibatch", MinibatchOptions),
        ("heterogeneous", HeteroOptions),
        ("fullgraph", FullGraphOptions),
    )
}
COMMANDS = {"gnnsys train": MODES, "gnnsys predict": {"minibatch": PredictOptions.model_fields}}  # their options
NOT_OPTIONS = {"gnnsys train": {"mode": "minibatch"}, "gnnsys predict": {"nodes": "every node"}}  # and defaults


@pytest.mark.parametrize("parser, action", documented_actions())
def test_a_help_text_names_the_default_it_has(parser, action):
    text = parser._get_formatter()._expand_help(action)
    mentions = MENTION.findall(text)
    assert not re.search(r"\bdefault\b", MENTION.sub("", text)), f"a default named outside '(default ...)': {text}"
    assert len(mentions) <= 1, text
    if action.default is argparse.SUPPRESS:  # `train`, `predict`: their options hold the defaults
        modes = COMMANDS[parser.prog]
        defaults = {mode: shown(d[action.dest]) for mode, d in modes.items() if action.dest in d}
        if "heterogeneous" in defaults:  # shown as minibatch's, which an option of heterogeneous datasets shares
            defaults.setdefault("minibatch", defaults.pop("heterogeneous"))
            defaults.pop("heterogeneous", None)
        if action.dest in NOT_OPTIONS[parser.prog]:
            defaults = {"minibatch": NOT_OPTIONS[parser.prog][action.dest]}
        mini, full = defaults.get("minibatch"), defaults.get("fullgraph")
        differ = "minibatch" in defaults and full is not None and full != mini
        if not mentions:
            assert (mini or full) is None or (isinstance(action, FLAGS) and not differ), f"no default shown: {text}"
            return
        said = TRAIN_MENTION.fullmatch(mentions[0])
        assert said, mentions[0]
        assert said["mini"] == (mini or "none" if differ else mini or full), text
        assert said["full"] == (full if differ else None), text
    elif action.default is None or isinstance(action, FLAGS):
        assert "%(default)s" not in action.help, text
        assert all(m.startswith("(default: ") for m in mentions), text  # a description of what happens
        assert not (isinstance(action, FLAGS) and mentions), text
    else:  # a value: shown by argparse, never as a literal that could drift
        assert "(default: %(default)s)" in action.help, f"default {action.default!r} not shown: {text}"
        assert mentions == [f"(default: {action.default})"], text
