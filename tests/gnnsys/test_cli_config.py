"""`gnnsys train --config FILE` / `--print-config`, and flags generated from the options schema."""

import json
import re

import pytest
import yaml

from gnnsys.cli import main
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.options import MinibatchOptions

FAST = ["--fanouts", "4,3", "--hidden", "16", "--batch-size", "8", "--no-progress"]


def print_config(capsys, *argv) -> dict:
    assert main(["train", *argv, "--print-config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_print_config_gives_the_given_options_and_the_defaults(make_dataset, capsys):
    ds, _ = make_dataset()
    config = print_config(capsys, str(ds.path), "--lr", "0.01", "--fanouts", "5,5")
    assert config["mode"] == "minibatch" and config["lr"] == 0.01 and config["fanouts"] == [5, 5]
    assert config["precision"] == "auto" and config["layers"] is None  # resolved where the file is used
    assert config["lookahead"] is None  # does not apply without a cache
    assert set(config) == {"mode"} | {
        n for n in MinibatchOptions.model_fields if n not in ("dataset", "dataset_id", "epoch_table")
    }
    full = print_config(capsys, str(ds.path), "--mode", "fullgraph")
    assert full["mode"] == "fullgraph" and full["hidden"] == FullGraphOptions().hidden


def test_a_printed_config_trains_as_the_flags_do(make_dataset, tmp_path, capsys):
    ds, _ = make_dataset()
    flags = ["--epochs", "2", "--model", "gcn", "--lr", "0.01", *FAST]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(print_config(capsys, str(ds.path), *flags)))
    results = []
    for argv in (flags, ["--config", str(path), "--no-progress"]):
        out = tmp_path / f"r{len(results)}.json"
        assert main(["train", str(ds.path), *argv, "--json", str(out)]) == 0
        results.append(json.loads(out.read_text()))
    assert results[0]["config"] == results[1]["config"]
    assert [e["loss"] for e in results[0]["epochs"]] == [e["loss"] for e in results[1]["epochs"]]


def test_flags_win_over_the_config_file(make_dataset, tmp_path, capsys):
    ds, _ = make_dataset()
    path = tmp_path / "c.yaml"
    path.write_text("mode: fullgraph\nhidden: 8\nepochs: 3\nweight_decay: 5e-4\nlr: 1E-2\n")
    config = print_config(capsys, str(ds.path), "--config", str(path), "--epochs", "5")
    assert (config["mode"], config["hidden"], config["epochs"]) == ("fullgraph", 8, 5)
    assert (config["weight_decay"], config["lr"]) == (5e-4, 1e-2)  # numbers, as YAML 1.2 reads them


@pytest.mark.parametrize(
    "text, message",
    [
        ("hiden: 8\n", r"c.yaml: 'hiden' is not an option \(did you mean 'hidden'\?\)"),
        ("hidden: 0\n", r"c.yaml: hidden: must be >= 1, got 0"),
        ("hidden: [1\n", r"c.yaml: is not valid YAML at line 2"),
        ("- 1\n", r"c.yaml: must be a mapping of option names to values, got list"),
        ("chunks: 2\n", r"c.yaml: chunks: does not apply to --mode minibatch"),
        ("cache_policy: lr\ncache_rows: 5\n", r"cache_policy: must be one of .* \(did you mean 'lru'\?\)"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file(make_dataset, tmp_path, capsys, text, message):
    ds, _ = make_dataset()
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["train", str(ds.path), "--config", str(path), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cache-policy", "lr"], r"invalid choice: 'lr' \(choose from .*\) \(did you mean 'lru'\?\)"),
        (["--hidden", "0"], r"error: --hidden: must be >= 1, got 0$"),
        (["--lookahead", "2"], r"error: --lookahead: needs a cache"),
        (["--chunks", "2"], r"error: --chunks: does not apply to --mode minibatch"),
        (["--mode", "fullgraph", "--fanouts", "5"], r"error: --fanouts: does not apply to --mode fullgraph"),
        (["--host-mem-budget", "0"], r"argument --host-mem-budget: must be a number of GB > 0"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(make_dataset, capsys, argv, message):
    ds, _ = make_dataset()
    with pytest.raises(SystemExit) if argv[0] in ("--cache-policy", "--host-mem-budget") else _returns(2):
        assert main(["train", str(ds.path), *argv, "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gnnsys train: error: "), err
    assert re.search(message, err), err


class _returns:
    """A stand-in for pytest.raises where the command returns its status instead of exiting."""

    def __init__(self, status):
        self.status = status

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_options_reference_is_generated_from_the_schema():
    from pathlib import Path

    from gnnsys.cli.options_reference import reference_markdown

    page = Path(__file__).resolve().parents[2] / "docs" / "guides" / "options.md"
    assert page.read_text() == reference_markdown(), "run: python -m gnnsys.cli.options_reference > " + str(page)
