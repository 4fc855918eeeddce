import os
import re
import stat
from importlib.resources import files

import numpy as np
import pytest
import torch

from gnnsys.datasets import DatasetError, PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.feature_writer import normalize_rows
from gnnsys.datasets.features_file import DTYPES, row_stride
from gnnsys.datasets.inspect import verify
from tests.conftest import random_source

EMBEDDED_CORA = files("gnnsys") / "data" / "cora"


@pytest.mark.parametrize("reorder", ["none", "degree"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_round_trip(make_dataset, reorder, dtype):
    ds, a = make_dataset(options=PrepareOptions(reorder=reorder, dtype=dtype, progress=False))
    order = ds.order.numpy() if ds.order is not None else np.arange(ds.num_nodes)
    expect = torch.from_numpy(a["x"][order]).to(getattr(torch, dtype))
    assert torch.equal(ds.features[torch.arange(ds.num_nodes)], expect)
    assert np.array_equal(ds.labels.numpy(), a["y"][order])
    ei = ds.edge_index().numpy()
    assert sorted(zip(order[ei[0]], order[ei[1]])) == sorted(zip(a["src"], a["dst"]))
    assert verify(ds.path) == []


def test_reorder_puts_hot_nodes_first(make_dataset):
    ds, _ = make_dataset(options=PrepareOptions(reorder="degree", progress=False))
    deg = ds.indptr.diff()
    assert bool((deg[:-1] >= deg[1:]).all())


@pytest.mark.parametrize("align,stride", [(128, 32), (512, 32), (16, 32), (8, 32)])
def test_row_stride(make_dataset, align, stride):
    ds, _ = make_dataset(options=PrepareOptions(align=align, progress=False), dim=7)
    assert ds.meta["features"]["row_stride"] == stride


@pytest.mark.parametrize(
    "dim,dtype,align,stride",
    [
        (128, "float16", 512, 256),  # two papers100M rows per 512 B block
        (100, "float16", 512, 256),
        (100, "float32", 512, 512),
        (300, "float32", 512, 1536),
        (1433, "float32", 128, 5760),
        (1, "float16", 128, 2),
    ],
)
def test_rows_pack_into_blocks_without_straddling(dim, dtype, align, stride):
    got = row_stride(dim, dtype, align)
    assert got == stride
    starts, nbytes = np.arange(64) * got, dim * DTYPES[dtype].itemsize
    if nbytes <= align:
        assert np.all(starts // align == (starts + nbytes - 1) // align)
    else:
        assert np.all(starts % align == 0)


def test_transforms(make_dataset):
    opts = PrepareOptions(to_undirected=True, self_loops="drop", dedup=True, progress=False)
    ds, a = make_dataset(options=opts)
    pairs = {(s, d) for s, d in zip(a["src"], a["dst"]) if s != d}
    pairs |= {(d, s) for s, d in pairs}
    ei = ds.edge_index().numpy()
    assert sorted(zip(ei[0], ei[1])) == sorted(pairs)


def test_existing_output_is_refused_then_replaced(tmp_path):
    out = tmp_path / "ds"
    write_dataset(random_source(seed=1)[0], out, PrepareOptions(progress=False))
    with pytest.raises(DatasetError, match="already exists"):
        write_dataset(random_source(seed=2)[0], out, PrepareOptions(progress=False))
    write_dataset(random_source(seed=2, num_nodes=70)[0], out, PrepareOptions(overwrite=True, progress=False))
    assert load_dataset(out).num_nodes == 70
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_failed_overwrite_keeps_old_dataset(tmp_path):
    out = tmp_path / "ds"
    write_dataset(random_source(seed=1)[0], out, PrepareOptions(progress=False))
    bad, arrays = random_source(seed=2)
    x = arrays["x"].copy()
    x[5, 2] = np.nan
    from gnnsys.datasets.source import array_feature_chunks

    bad.feature_chunks = array_feature_chunks(x, 13)
    with pytest.raises(DatasetError, match=r"row 5: NaN"):
        write_dataset(bad, out, PrepareOptions(overwrite=True, progress=False))
    assert verify(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_verify_catches_corruption(make_dataset):
    ds, _ = make_dataset()
    with open(ds.path / "features.bin", "r+b") as f:
        f.seek(3)
        f.write(b"\x7f")
    assert any("checksum" in p for p in verify(ds.path))


def test_normalize_features_row_matches_pyg_on_cora(tmp_path):
    from torch_geometric.io.planetoid import read_planetoid_data
    from torch_geometric.transforms import NormalizeFeatures

    from gnnsys.datasets import prepare_planetoid

    ds = load_dataset(prepare_planetoid(tmp_path / "cora", normalize_features="row", progress=False))
    ref = NormalizeFeatures()(read_planetoid_data(str(EMBEDDED_CORA), "cora"))
    assert torch.equal(ds.features[torch.arange(ds.num_nodes)], ref.x)
    assert ds.meta["source"]["options"]["normalize_features"] == "row"


def test_normalize_rows_leaves_rows_summing_to_zero():
    x = np.array([[1, 3, 0], [0, 0, 0], [2, -2, 0], [0.5, 0.25, 0.25]], np.float32)
    assert normalize_rows(x).tolist() == [[0.25, 0.75, 0], [0, 0, 0], [2, -2, 0], [0.5, 0.25, 0.25]]


@pytest.mark.parametrize(
    "labels,problem",
    [
        ([0, 1, 10**9], "1000000001 classes (labels up to 1000000000) for 20 nodes; use --remap-labels"),
        ([0, 0, 9], "only 2 of the 10 classes 0..9 occur; use --remap-labels to number them 0..1"),
        ([0, 1, -2], "row 2: label -2 out of range (classes are >= 0; -1 marks an unlabelled node)"),
    ],
)
def test_labels_far_from_dense_need_remap_labels(tmp_path, labels, problem):
    src, _ = random_source(num_nodes=20, num_edges=40)
    src.labels, src.num_classes = np.array(labels + [0] * 17), None
    with pytest.raises(DatasetError, match=re.escape(problem)):
        write_dataset(src, tmp_path / "ds", PrepareOptions(progress=False))
    assert not (tmp_path / "ds").exists()


def test_remap_labels_numbers_the_distinct_labels(tmp_path):
    src, _ = random_source(num_nodes=6, num_edges=10)
    src.labels, src.num_classes = np.array([10**9, 7, -1, 7, 42, 10**9]), None
    src.splits = {"train": np.array([0, 1]), "valid": np.array([3]), "test": np.array([4, 5])}
    ds = load_dataset(write_dataset(src, tmp_path / "ds", PrepareOptions(remap_labels=True, progress=False)))
    assert ds.labels.tolist() == [2, 0, -1, 0, 1, 2] and ds.num_classes == 3
    assert ds.meta["labels"]["original_labels"] == [7, 42, 10**9]


def test_dataset_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        out = write_dataset(random_source()[0], tmp_path / "ds", PrepareOptions(progress=False))
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert {stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()} == {0o640}


@pytest.mark.parametrize(
    "existing,refusal",
    [
        ("user files", "is neither a gnnsys dataset nor empty; --overwrite replaces only those"),
        ("a file", "exists and is not a directory"),
        ("the current directory", "is the current directory or holds it"),
        ("empty", None),
        ("a damaged dataset", None),
    ],
)
def test_overwrite_replaces_only_a_dataset_or_an_empty_directory(tmp_path, monkeypatch, existing, refusal):
    out = tmp_path / "out"
    if existing == "a file":
        out.write_text("notes")
    else:
        out.mkdir()
    if existing in ("user files", "the current directory"):
        (out / "thesis.tex").write_text("years of work")
    if existing == "the current directory":
        monkeypatch.chdir(out)
    if existing == "a damaged dataset":
        (out / "meta.json").write_text('{"format": "gnnsys-dataset"}')
    before = sorted(p.name for p in tmp_path.rglob("*"))
    src = random_source()[0]
    if refusal is None:
        assert verify(write_dataset(src, out, PrepareOptions(overwrite=True, progress=False))) == []
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        return
    with pytest.raises(DatasetError, match=re.escape(refusal)):
        write_dataset(
            src, "." if existing == "the current directory" else out, PrepareOptions(overwrite=True, progress=False)
        )
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_loading_memory_maps_the_graph(make_dataset):
    ds, _ = make_dataset()
    maps = open("/proc/self/maps").read()
    for name in ("indptr.npy", "indices.npy", "features.bin"):
        assert str(ds.path / name) in maps
    before = (ds.path / "indices.npy").read_bytes()
    ds.indices[:] = 0  # copy-on-write: the dataset's file is not changed
    assert (ds.path / "indices.npy").read_bytes() == before
