"""`gnnsys train` and the Python API run the same training: on the embedded
Cora, the CLI's flags and the API's keywords give, epoch by epoch, the same
losses and metrics bit for bit, in minibatch, full-graph and 2-worker GNNPipe
modes."""

import json

import pytest

import gnnsys
from gnnsys.cli import main

MODES = {  # mode: (CLI flags, API entry point, its keywords)
    "minibatch": (
        [
            "--model",
            "sage",
            "--hidden",
            "32",
            "--fanouts",
            "5,5",
            "--batch-size",
            "256",
            "--epochs",
            "3",
            "--seed",
            "3",
        ],
        "train",
        dict(model="sage", hidden=32, fanouts=[5, 5], batch_size=256, epochs=3, seed=3),
    ),
    "fullgraph": (
        ["--mode", "fullgraph", "--model", "sage", "--layers", "2", "--hidden", "16", "--epochs", "5", "--seed", "3"],
        "train_fullgraph",
        dict(model="sage", layers=2, hidden=16, epochs=5, seed=3),
    ),
    "pipeline": (
        ["--mode", "fullgraph", "--model", "sage", "--layers", "4", "--hidden", "16", "--epochs", "3"]
        + ["--workers", "2", "--chunks", "4", "--seed", "3"],
        "train_fullgraph",
        dict(model="sage", layers=4, hidden=16, epochs=3, workers=2, chunks=4, seed=3),
    ),
}


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    out = tmp_path_factory.mktemp("cora") / "cora"
    assert main(["prepare", "planetoid", "--name", "cora", "--dedup", "--out", str(out)]) == 0
    return out


def _epochs(records):
    return [{k: e[k] for k in ("loss", "train", "valid", "test")} for e in records]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_cli_and_api_train_the_same(cora, tmp_path, mode):
    flags, entry, keywords = MODES[mode]
    out = tmp_path / "result.json"
    assert main(["train", str(cora), *flags, "--no-progress", "--json", str(out)]) == 0
    cli = json.loads(out.read_text())
    api = getattr(gnnsys, entry)(str(cora), progress=False, **keywords)
    assert _epochs(cli["epochs"]) == _epochs(api.epochs)
    assert cli["best_epoch"] == api.best_epoch
