"""Property-based bad input: any value in a meta.json field, and any text
given to a numeric option of `gnnsys train` or `gnnsys info`, is either
accepted (the command completes) or refused with one line and status 2;
never a traceback (an exception out of `main` fails the test)."""

import json
import math
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gnnsys.cli import main
from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.numbers import FLOAT_MAX
from tests.conftest import random_source

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FIELDS = [
    "num_nodes",
    "num_edges",
    "name",
    "graph.indptr",
    "graph.indices",
    "features.dtype",
    "features.dim",
    "features.align",
    "features.row_stride",
    "features.file",
    "labels.num_classes",
    "labels.file",
    "splits.train",
    "order",
    "checksums",
    "graph",
    "version",
]
EDGE_INTS = [-1, 0, 1, 2, 7, 28, 32, 60, 61, 128, 400, 2**31, 2**63, 2**64, 10**20]
VALUES = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.integers(-10, 200),
    st.floats(allow_nan=True),
    st.sampled_from(
        ["", ".", "..", "x/y", "features.bin", "labels.npy", "order.npy", "bfloat16", "float16", "meta.json"]
    ),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(random_source()[0], tmp_path_factory.mktemp("fuzz") / "ds", PrepareOptions(progress=False))


def outcome(argv, capsys) -> int:
    """main(argv)'s status, after checking that a refusal is one error line."""
    capsys.readouterr()
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        status = e.code
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    if status == 2:
        assert lines and lines[-1].startswith("gnnsys ") and ": error: " in lines[-1], lines
        assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), lines
    else:
        assert status in (0, 1), (status, lines)
    return status


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), min_size=1, max_size=3), verify=st.booleans())
@example(edits=[("graph", -1), ("graph.indptr", None)], verify=False)  # a field under one an edit replaced
def test_meta_json_fields(dataset, tmp_path, capsys, edits, verify):
    copy = tmp_path / "ds"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(dataset, copy)
    meta = json.loads((copy / "meta.json").read_text())
    for field, value in edits:
        *parents, key = field.split(".")
        holder = meta
        for p in parents:
            if not isinstance(holder.get(p), dict):  # a parent an earlier edit replaced
                holder[p] = {}
            holder = holder[p]
        holder[key] = value
    text = json.dumps(meta)  # NaN and inf as JSON's extensions, as a hand edit could write them
    (copy / "meta.json").write_text(text)
    outcome(["info", copy, *(["--verify"] if verify else [])], capsys)


NUMBERS = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.integers(-3, 9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1e-9", "0x10", "one", "", "-0", "1,2", "4,-1", "99999999999999999999,2"]),
)
TRAIN_OPTIONS = [
    "--seed",
    "--hidden",
    "--heads",
    "--fanouts",
    "--batch-size",
    "--prefetch",
    "--lr",
    "--dropout",
    "--cache-rows",
    "--cache-gb",
    "--lookahead",
    "--eval-every",
    "--eval-batch-size",
    "--weight-decay",
]


@SETTINGS
@given(
    options=st.dictionaries(st.sampled_from(TRAIN_OPTIONS), NUMBERS, min_size=1, max_size=3),
    model=st.sampled_from(["sage", "gat"]),
)
def test_train_numeric_options(dataset, capsys, options, model):
    argv = ["train", dataset, "--epochs", "1", "--no-progress", "--model", model]
    for flag, value in options.items():
        text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
        argv.append(f"{flag}={text}")  # = : a value starting with '-' stays the flag's
    outcome(argv, capsys)


@SETTINGS
@given(budget=NUMBERS, workers=st.sampled_from([-1, 0, 1, 10**6, 2**31, 10**20]))
def test_info_budget_and_workers(dataset, capsys, budget, workers):
    text = repr(budget) if isinstance(budget, float) else str(budget)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    assert outcome(["info", dataset, f"--host-mem-budget={text}"], capsys) == (0 if 0 < value <= FLOAT_MAX else 2)
    assert outcome(["train", dataset, "--epochs", "1", "--no-progress", f"--workers={workers}"], capsys) == (
        0 if workers == 1 else 2
    )
