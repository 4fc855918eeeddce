"""Non-finite feature rows are found wherever they are: prepare counts them
(and records the check in meta.json), info --verify scans again, and
training and prediction refuse a dataset holding one, in one line naming
the first row, how many there are and --nan-to-zero."""

import json
import math

import numpy as np
import pytest
import torch

from gnnsys import DatasetError, train, train_fullgraph
from gnnsys.cli import main
from gnnsys.datasets import GraphSource, PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.finite_rows import check_finite_features, scan_rows
from gnnsys.datasets.inspect import verify
from gnnsys.datasets.source import array_edge_chunks, array_feature_chunks
from gnnsys.storage.table import RowTable
from tests.conftest import random_source

FAST = dict(fanouts=[3, 2], hidden=8, batch_size=8, progress=False, prefetch=1, epochs=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scan_counts_nan_and_inf_rows_of_each_dtype(dtype):
    x = torch.zeros(1000, 5, dtype=dtype)
    x[617, 4], x[900, 0], x[901, 2] = math.nan, math.inf, -math.inf
    x[3, 1] = torch.finfo(dtype).max  # the largest finite value is finite
    scan = scan_rows(RowTable.from_tensor(x))
    assert (scan.count, scan.first) == (3, 617)
    assert scan_rows(RowTable.from_tensor(torch.ones(7, 3, dtype=dtype))).count == 0


def poison(path, row: int):
    """Write NaN into feature 0 of `row` of the dataset at `path`, in place."""
    meta = json.loads((path / "meta.json").read_text())
    rows = np.memmap(path / "features.bin", np.uint8, "r+", shape=(meta["num_nodes"], meta["features"]["row_stride"]))
    rows[row, :4] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    rows.flush()
    del rows


def test_a_nan_row_outside_the_first_batch_stops_training_and_predict(make_dataset, tmp_path, capsys):
    ds, _ = make_dataset(num_nodes=60)
    assert ds.meta["features"]["nonfinite_rows"] == 0 and set(ds.meta["features"]["checked"]) == {"size", "mtime_ns"}
    train(ds, checkpoint_dir=str(tmp_path / "ck"), **FAST)
    poison(ds.path, 57)
    with pytest.raises(
        DatasetError,
        match=r"features.bin: row 57: the only feature row holding NaN or inf; prepare the dataset again with --nan-to",
    ):
        train(str(ds.path), **FAST)
    with pytest.raises(DatasetError, match="row 57"):
        train_fullgraph(str(ds.path), epochs=1, hidden=8, progress=False)
    assert main(["train", str(ds.path), "--fanouts", "3,2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 57: the only feature row holding NaN or inf" in err
    out = tmp_path / "p.npy"
    assert (
        main(["predict", str(ds.path), "--checkpoint", str(tmp_path / "ck"), "--out", str(out), "--no-progress"]) == 2
    )
    assert "row 57: the only feature row" in capsys.readouterr().err and not out.exists()
    assert any("row 57: the only feature row" in p for p in verify(ds.path))


def test_a_dataset_prepared_before_the_check_is_scanned_at_load(make_dataset):
    ds, _ = make_dataset(num_nodes=60)
    meta = json.loads((ds.path / "meta.json").read_text())
    del meta["features"]["nonfinite_rows"], meta["features"]["checked"]
    (ds.path / "meta.json").write_text(json.dumps(meta))
    check_finite_features(load_dataset(ds.path))  # clean: passes
    poison(ds.path, 41)
    with pytest.raises(DatasetError, match="row 41"):
        check_finite_features(load_dataset(ds.path))


def test_meta_json_s_count_is_trusted_while_the_file_is_unchanged(make_dataset, monkeypatch):
    from gnnsys.datasets import finite_rows

    ds, _ = make_dataset(num_nodes=60)
    monkeypatch.setattr(finite_rows, "scan_rows", lambda table: pytest.fail("scanned a checked file"))
    check_finite_features(load_dataset(ds.path))


def test_an_in_memory_dataset_with_a_nan_row_is_refused(make_dataset):
    from gnnsys.datasets.dataset import Dataset

    ds, _ = make_dataset(num_nodes=60)
    x = ds.features[torch.arange(60)].clone()
    x[50, 2] = math.inf
    mem = Dataset(
        name="m", indptr=ds.indptr, indices=ds.indices, features=x, labels=ds.labels, splits=ds.splits, num_classes=3
    )
    with pytest.raises(DatasetError, match=r"Dataset.features: row 50: the only feature row holding NaN or inf"):
        train(mem, **FAST)


def test_prepare_names_the_first_non_finite_row_and_how_many(tmp_path):
    source, arrays = random_source(num_nodes=60)
    x = arrays["x"].copy()
    x[[12, 30, 31], 1] = [np.nan, np.inf, np.nan]
    source.feature_chunks = array_feature_chunks(x, 13)
    with pytest.raises(DatasetError, match=r"row 12: NaN or inf in features \(3 rows in all; use --nan-to-zero"):
        write_dataset(source, tmp_path / "out", PrepareOptions(progress=False))
    assert not (tmp_path / "out").exists()


def test_prepare_refuses_values_a_16_bit_dtype_stores_as_inf(tmp_path):
    n = 30
    x = np.ones((n, 4), np.float32)
    x[7, 0] = 1e6  # beyond float16's 65504
    source = GraphSource(
        name="big",
        kind="arrays",
        num_nodes=n,
        feature_dim=4,
        edge_chunks=array_edge_chunks(np.arange(n - 1), np.arange(1, n), 97),
        feature_chunks=array_feature_chunks(x, 13),
        labels=np.arange(n) % 2,
        splits={"train": np.arange(10), "valid": np.arange(10, 20), "test": np.arange(20, 30)},
        num_classes=2,
    )
    with pytest.raises(DatasetError, match=r"row 7: values beyond float16's range in 1 feature rows.*--dtype float32"):
        write_dataset(source, tmp_path / "out", PrepareOptions(dtype="float16", progress=False))
