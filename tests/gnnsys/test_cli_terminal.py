"""Every command that draws a progress bar, run on a pseudo-terminal as a
user at a terminal sees it (tests/terminal.py), with bars redrawn at every
update: each prepare kind, train (minibatch, full-graph, heterogeneous),
predict and info. A bar's return value, or anything else only a live bar
does, cannot break a command there alone."""

import numpy as np
import pytest

from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.datasets.prepare import prepare_synthetic
from gnnsys.progress import Bar
from tests.conftest import random_source
from tests.datasets.conftest import graph_arrays, write_heterophilous, write_ogb
from tests.datasets.test_ogb_mag import mag_arrays, write_mag
from tests.terminal import assert_clean, run_on_terminal

BAR = "|"  # tqdm draws its bar between two of these


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A small homogeneous dataset and a checkpoint trained on it."""
    folder = tmp_path_factory.mktemp("terminal")
    source, _ = random_source(num_nodes=300, num_edges=2000, dim=8)
    ds = write_dataset(source, folder / "ds", PrepareOptions(progress=False))
    return folder, ds


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    """A tiny synthetic heterogeneous (ogbn-mag-like) dataset."""
    folder = tmp_path_factory.mktemp("terminal-mag")
    return prepare_synthetic(out=folder / "mag", like="mag", scale=0.002, progress=False)


def _arrays_input(folder):
    a = graph_arrays(n=200, e=800)
    np.save(folder / "edges.npy", np.stack([a["src"], a["dst"]], 1))
    np.save(folder / "x.npy", a["x"])
    np.save(folder / "y.npy", a["y"])
    files = ("--edges", folder / "edges.npy", "--features", folder / "x.npy", "--labels", folder / "y.npy")
    return ["arrays", *files, "--random-split", "0.6,0.2,0.2"]


PREPARE = {  # kind: its input made in `folder` -> the arguments after `prepare`
    "ogb": lambda f: ["ogb", write_ogb(f / "ogb", graph_arrays(n=200, e=800))],
    "ogb mag": lambda f: ["ogb", write_mag(f / "ogbn_mag", mag_arrays())],
    "planetoid": lambda f: ["planetoid", "--name", "cora"],
    "npz": lambda f: ["npz", write_heterophilous(f / "g.npz", graph_arrays(n=200, e=800))],
    "arrays": _arrays_input,
    "synthetic": lambda f: ["synthetic", "--like", "arxiv", "--scale", "0.001"],
    "synthetic mag": lambda f: ["synthetic", "--like", "mag", "--scale", "0.002"],
    "synthetic proteins": lambda f: [
        *("synthetic", "--like", "proteins", "--scale", "0.002", "--node-features-from-edges", "mean"),
    ],
}


@pytest.mark.parametrize("kind", PREPARE)
def test_prepare_on_a_terminal(tmp_path, kind):
    status, shown = run_on_terminal("prepare", *PREPARE[kind](tmp_path), "--out", tmp_path / "out")
    assert_clean(status, shown)
    assert "features" in shown and BAR in shown  # the feature writer's bar was drawn
    assert "written to" in shown


def test_train_minibatch_and_predict_on_a_terminal(graph):
    folder, ds = graph
    ck = folder / "ck"
    args = ("--epochs", "2", "--fanouts", "3,3", "--batch-size", "64", "--hidden", "8", "--checkpoint-dir", ck)
    status, shown = run_on_terminal("train", ds, *args, "--eval", "layerwise")
    assert_clean(status, shown)
    assert "epoch" in shown and "batch" in shown and BAR in shown
    status, shown = run_on_terminal("predict", ds, "--checkpoint", ck, "--out", folder / "scores.npy")
    assert_clean(status, shown)
    assert "inference" in shown and BAR in shown
    assert np.load(folder / "scores.npy").shape[0] == 300


def test_train_fullgraph_on_a_terminal(graph):
    _, ds = graph
    status, shown = run_on_terminal("train", ds, "--mode", "fullgraph", "--epochs", "2", "--hidden", "8")
    assert_clean(status, shown)
    assert "epoch" in shown


def test_train_heterogeneous_on_a_terminal(mag):
    args = ("--epochs", "1", "--fanouts", "3,3", "--batch-size", "64", "--hidden", "8", "--eval", "layerwise")
    status, shown = run_on_terminal("train", mag, *args)
    assert_clean(status, shown)
    assert "epoch" in shown and BAR in shown


def test_info_and_probe_io_on_a_terminal(graph):
    _, ds = graph
    status, shown = run_on_terminal("info", ds, "--probe-io")
    assert_clean(status, shown)
    assert "I/O probe" in shown


def test_a_bar_update_returns_nothing_even_when_it_redraws():
    with Bar(total=10, mininterval=0, disable=False) as bar:
        assert [bar.update(1) for _ in range(3)] == [None] * 3
        assert bar.n == 3


def test_every_bar_is_a_bar():
    """No module of the program makes a tqdm bar of its own (whose update returns True on redraw)."""
    from tests.test_layers import FILES

    found = []
    for module, file in FILES.items():
        text = file.read_text()
        for line in text.splitlines():
            if ("import tqdm" in line or "from tqdm" in line) and module != "gnnsys.progress":
                found.append(f"{module}: {line.strip()}")
    assert found == ["gnnsys.parallel.distributed: from tqdm import tqdm"], found  # set_lock only
