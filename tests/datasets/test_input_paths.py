"""Every path a command reads is checked by one argparse type
(gnnsys.datasets.input_paths.input_path): a missing one is named as
missing, in one line, before anything runs."""

import argparse
import os

import pytest

from gnnsys.cli import build_parser, main
from gnnsys.cli.info import dataset_path
from gnnsys.datasets import load_dataset
from gnnsys.datasets.input_paths import input_path
from gnnsys.errors import DatasetError


def parsers(parser: argparse.ArgumentParser, words=()):
    """(words, parser) of `parser` and every (sub)command under it."""
    yield list(words), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*words, name))


def input_actions():
    return [
        (words, action)
        for words, parser in parsers(build_parser())
        for action in parser._actions
        if action.type in (input_path, dataset_path)
    ]


# every argument that names something the command reads (a dataset, a checkpoint, an input file)
READ = {
    ("info", "path"),
    ("train", "path"),
    ("train", "--config"),
    ("predict", "path"),
    ("predict", "--checkpoint"),
    ("predict", "--nodes"),
    ("prepare ogb", "root"),
    ("prepare planetoid", "--root"),
    ("prepare npz", "path"),
    *(("prepare arrays", f"--{name}") for name in ("edges", "features", "labels", "train", "valid", "test", "masks")),
}


def test_every_argument_a_command_reads_is_checked():
    assert {name(*w) for w in input_actions()} == {" ".join(r) for r in READ}


def name(words, action) -> str:
    return " ".join([*words, action.option_strings[0] if action.option_strings else action.dest])


@pytest.mark.parametrize("words, action", input_actions(), ids=[name(*w) for w in input_actions()])
def test_a_missing_path_is_named_missing_in_one_line(words, action, tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    given = [action.option_strings[0], missing] if action.option_strings else [missing]
    with pytest.raises(SystemExit) as e:
        main([*words, *given])
    err = capsys.readouterr().err.splitlines()
    assert e.value.code == 2 and err[-1].endswith(f"{missing}: no such file or directory"), err
    assert all(line.startswith(("usage:", " ")) for line in err[:-1])


@pytest.mark.parametrize("make", ["dangling link", "through a file"])
def test_a_dangling_link_or_a_path_through_a_file_is_missing(tmp_path, make):
    if make == "dangling link":
        os.symlink(tmp_path / "gone", tmp_path / "link")
        path = tmp_path / "link"
    else:
        (tmp_path / "file").write_text("")
        path = tmp_path / "file" / "ds"
    with pytest.raises(argparse.ArgumentTypeError, match="no such file or directory"):
        input_path(str(path))
    with pytest.raises(DatasetError, match=f"^{path}: no such file or directory$"):
        load_dataset(path)


def test_an_existing_path_passes(tmp_path):
    assert input_path(str(tmp_path)) == str(tmp_path)
