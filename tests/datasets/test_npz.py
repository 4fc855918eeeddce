import tracemalloc

import numpy as np
import pytest
import torch

from gnnsys.datasets import load_dataset, npy
from gnnsys.datasets.npy import NpyArray
from gnnsys.datasets.random_split import split_randomly
from gnnsys.errors import DatasetError
from tests.datasets.conftest import (
    assert_fails,
    check_round_trip,
    check_verify_catches_corruption,
    graph_arrays,
    run_cli,
    write_gnn_benchmark,
    write_heterophilous,
)


@pytest.mark.parametrize("reorder", ["none", "degree"])
def test_round_trip(tmp_path, capsys, small_chunks, reorder):
    a = graph_arrays()
    path = write_heterophilous(tmp_path / "tolokers.npz", a)
    out = tmp_path / "out"
    assert run_cli(capsys, "prepare", "npz", path, "-o", out, "--reorder", reorder, "--no-progress")[0] == 0
    ds = check_round_trip(out, a)
    assert ds.name == "tolokers" and ds.meta["source"]["split_index"] == 0
    if reorder == "none":
        check_verify_catches_corruption(out, tmp_path, capsys)


def test_split_index_and_one_dimensional_masks(tmp_path, capsys):
    a = graph_arrays()
    path = write_heterophilous(tmp_path / "g.npz", a, num_splits=3)
    masks = np.load(path)
    assert run_cli(capsys, "prepare", "npz", path, "-o", tmp_path / "s2", "--split-index", "2", "--no-progress")[0] == 0
    ds = load_dataset(tmp_path / "s2")
    assert np.array_equal(ds.split("valid").numpy(), np.flatnonzero(masks["val_masks"][2]))
    single = {k: masks[k] for k in masks.files}
    for k in ("train_masks", "val_masks", "test_masks"):
        single[k] = single[k][1]
    np.savez(tmp_path / "one.npz", **single)
    assert run_cli(capsys, "prepare", "npz", tmp_path / "one.npz", "-o", tmp_path / "s1", "--no-progress")[0] == 0
    assert np.array_equal(load_dataset(tmp_path / "s1").split("test").numpy(), np.flatnonzero(single["test_masks"]))
    assert_fails(
        run_cli(capsys, "prepare", "npz", path, "-o", tmp_path / "bad", "--split-index", "3"),
        "--split-index: 3 out of range",
        "holds 3 splits",
    )


@pytest.mark.parametrize("shape", ["rows", "columns"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("compressed", [True, False])
def test_pair_chunks(tmp_path, shape, order, compressed):
    pairs = np.random.default_rng(0).integers(0, 1000, (1001, 2))
    arr = np.asarray(pairs if shape == "rows" else pairs.T, order=order)
    (np.savez_compressed if compressed else np.savez)(tmp_path / "e.npz", edges=arr)
    member = NpyArray(tmp_path / "e.npz", "edges")
    assert member.pair_layout() == shape
    chunks = list(member.pair_chunks(shape, count=100))
    assert len(chunks) == 11
    assert np.array_equal(np.concatenate([a for a, _ in chunks]), pairs[:, 0])
    assert np.array_equal(np.concatenate([b for _, b in chunks]), pairs[:, 1])


def test_members_are_read_in_slices(tmp_path, monkeypatch):
    edges = np.arange(2 * 500_000, dtype=np.int64).reshape(2, -1)  # 8 MB
    np.savez(tmp_path / "big.npz", edge_index=edges, node_feat=np.ones((100_000, 10), np.float32))
    monkeypatch.setattr(npy, "CHUNK_BYTES", 1 << 16)
    tracemalloc.start()
    total = 0
    for a, b in NpyArray(tmp_path / "big.npz", "edge_index").pair_chunks("columns"):
        total += int(b.sum() - a.sum())
    for rows in NpyArray(tmp_path / "big.npz", "node_feat").row_chunks():
        total += rows.shape[0]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == 500_000 * 500_000 + 100_000
    assert peak < 1 << 20, peak  # a few 64 KiB slices, not the 8 MB array


@pytest.mark.parametrize(
    "case,words",
    [
        ("missing key", ["g.npz[val_masks]", "no array 'val_masks'"]),
        ("not a zip", ["g.npz", "not a valid npz/zip archive"]),
        ("truncated", ["g.npz", "not a valid npz/zip archive"]),
        ("edge out of range", ["g.npz[edges]: row 7: node id 40 out of range"]),
        ("nan feature", ["g.npz[node_features]: row 2: NaN or inf"]),
        ("mask shape", ["g.npz[test_masks]", "mask shape (39,), expected [40]"]),
        ("object array", ["g.npz[node_labels]", "holds Python objects"]),
        ("fortran features", ["g.npz[node_features]", "Fortran order"]),
    ],
)
def test_bad_npz(tmp_path, capsys, case, words):
    a = graph_arrays()
    path = write_heterophilous(tmp_path / "g.npz", a)
    data = dict(np.load(path))
    if case == "missing key":
        del data["val_masks"]
    elif case == "edge out of range":
        data["edges"][7, 1] = 40
    elif case == "nan feature":
        data["node_features"][2, 3] = np.nan
    elif case == "mask shape":
        data["test_masks"] = data["test_masks"][:, :39]
    elif case == "object array":
        data["node_labels"] = np.array([None] * 40, object)
    elif case == "fortran features":
        data["node_features"] = np.asfortranarray(data["node_features"])
    if case == "not a zip":
        path.write_bytes(b"not a zip at all")
    elif case == "truncated":
        path.write_bytes(path.read_bytes()[:500])
    else:
        np.savez(path, **data, allow_pickle=True) if case == "object array" else np.savez(path, **data)
    assert_fails(
        run_cli(capsys, "prepare", "npz", path, "-o", tmp_path / "out"), *words, folder=tmp_path, allowed=["g.npz"]
    )


def test_truncated_member_data(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-8])
    with pytest.raises(DatasetError, match=r"x.npy: truncated: 152 of 160 bytes"):
        list(NpyArray(tmp_path / "x.npy").row_chunks())


@pytest.mark.parametrize("attrs", ["csr", "dense", "none"])
def test_gnn_benchmark_layout(tmp_path, capsys, small_chunks, attrs):
    a = graph_arrays(unlabelled=3)
    a["src"][:3], a["dst"][:3] = [5, 5, 9], [6, 6, 9]  # a repeated edge and a self-loop, kept as stored
    marker = tmp_path / "unpickled"
    path = write_gnn_benchmark(tmp_path / "amazon.npz", a, attrs, objects_to=marker)
    out = tmp_path / "out"
    status, _, err = run_cli(
        capsys, "prepare", "npz", path, "--random-split", "0.5,0.25,0.25", "--seed", "4", "-o", out, "--no-progress"
    )
    assert status == 0, err
    assert not marker.exists()
    expected = {**a, **split_randomly(a["y"], "0.5,0.25,0.25", 4)}
    if attrs == "none":
        expected["x"] = np.eye(40, dtype=np.float32)
        assert (
            err.strip() == "gnnsys prepare: note: amazon.npz holds no attribute arrays: features are one-hot "
            "node ids (40 x 40)"
        )
    ds = check_round_trip(out, expected)
    assert ds.name == "amazon" and ds.meta["source"]["layout"] == "gnn-benchmark"
    assert ds.meta["source"]["random_split"] == [0.5, 0.25, 0.25] and ds.meta["source"]["seed"] == 4
    assert bool(ds.meta["source"].get("notes")) == (attrs == "none")


def test_gnn_benchmark_layout_matches_pyg(tmp_path, capsys):
    from torch_geometric.io import read_npz as pyg_read_npz

    a = graph_arrays()
    a["x"] = (np.random.default_rng(2).random((40, 6)) < 0.3).astype(np.float32)  # PyG sets non-zeros to 1
    path = write_gnn_benchmark(tmp_path / "g.npz", a)
    out = tmp_path / "out"
    assert (
        run_cli(
            capsys,
            "prepare",
            "npz",
            path,
            "--random-split",
            "0.5,0.2,0.2",
            "--to-undirected",
            "--self-loops",
            "drop",
            "--dedup",
            "-o",
            out,
            "--no-progress",
        )[0]
        == 0
    )
    ds, ref = load_dataset(out), pyg_read_npz(str(path))
    assert torch.equal(ds.features[torch.arange(40)], ref.x) and torch.equal(ds.labels, ref.y)
    assert sorted(map(tuple, ds.edge_index().T.tolist())) == sorted(map(tuple, ref.edge_index.T.tolist()))


@pytest.mark.parametrize(
    "case,words",
    [
        ("attr index out of range", ["g.npz[attr_indices]", "not a valid CSR matrix"]),
        ("adj indptr falls", ["g.npz[adj_indptr]", "must rise from 0 to the 160 entries of adj_indices"]),
        ("adj not square", ["g.npz[adj_shape]", "holds [40, 41], expected a square adjacency matrix"]),
        ("edge out of range", ["g.npz[adj_indices]: row 0: node id 40 out of range [0, 40)"]),
        ("labels missing", ["g.npz[labels]", "no array 'labels'"]),
    ],
)
def test_bad_gnn_benchmark_layout(tmp_path, capsys, case, words):
    path = write_gnn_benchmark(tmp_path / "g.npz", graph_arrays())
    data = dict(np.load(path))
    if case == "attr index out of range":
        data["attr_indices"][0] = 6
    elif case == "adj indptr falls":
        data["adj_indptr"][5] = data["adj_indptr"][7] + 1
    elif case == "adj not square":
        data["adj_shape"] = np.array([40, 41])
    elif case == "edge out of range":
        data["adj_indices"][0] = 40
    else:
        del data["labels"]
    np.savez(path, **data)
    assert_fails(
        run_cli(capsys, "prepare", "npz", path, "--random-split", "0.5,0.2,0.2", "-o", tmp_path / "out"),
        *words,
        folder=tmp_path,
        allowed=["g.npz"],
    )


def test_edge_weights_are_dropped_with_a_note(tmp_path, capsys):
    path = write_gnn_benchmark(tmp_path / "w.npz", graph_arrays())
    arrays = dict(np.load(path))
    arrays["adj_data"] = np.full_like(arrays["adj_data"], 2.0)
    np.savez(path, **arrays)
    status, _, err = run_cli(
        capsys, "prepare", "npz", path, "--random-split", "0.5,0.2,0.2", "--out", tmp_path / "o", "--no-progress"
    )
    assert status == 0 and "adj_data holds values other than 1 (edge weights)" in err and err.count("\n") == 1
