import os
import pickle
import shutil
from collections import defaultdict
from importlib.resources import files

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnsys.datasets import load_dataset
from gnnsys.datasets.planetoid import read_planetoid
from tests.datasets.conftest import assert_fails, check_verify_catches_corruption, run_cli

EMBEDDED = files("gnnsys") / "data" / "cora"


def _pyg(folder, prefix):
    from torch_geometric.io.planetoid import read_planetoid_data

    return read_planetoid_data(str(folder), prefix)


def _dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_citeseer_like(folder, num_allx=520, seed=0):
    """Planetoid files named citeseer: num_allx allx rows (the first 10 are x),
    test ids num_allx..num_allx+11 with +4 and +9 missing (no tx row), 3
    classes, an undirected graph listing one edge twice and a self-loop."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    onehot = lambda k: np.eye(3, dtype=np.int32)[rng.integers(0, 3, k)]  # noqa: E731
    feats = lambda k: sp.csr_matrix(rng.integers(0, 2, (k, 5)).astype(np.float32))  # noqa: E731
    test = num_allx + np.array([5, 0, 11, 1, 3, 10, 6, 2, 7, 8])
    allx, ally = feats(num_allx), onehot(num_allx)
    parts = {"x": allx[:10], "y": ally[:10], "allx": allx, "ally": ally, "tx": feats(10), "ty": onehot(10)}
    graph = defaultdict(list)
    for s, d in [
        (0, 1),
        (1, 2),
        (2, test[0]),
        (test[1], test[2]),
        (num_allx + 4, 3),
        (5, num_allx + 9),
        (0, 1),
        (7, 7),
    ]:
        graph[int(s)].append(int(d))
        graph[int(d)].append(int(s))
    for name, obj in {**parts, "graph": graph}.items():
        _dump(folder / f"ind.citeseer.{name}", obj)
    (folder / "ind.citeseer.test.index").write_text("".join(f"{i}\n" for i in test))
    return parts, test, graph


def test_embedded_cora_matches_pyg(tmp_path, capsys):
    out = tmp_path / "cora"
    status, stdout, _ = run_cli(capsys, "prepare", "planetoid", "--name", "cora", "--out", out)
    assert status == 0 and "2,708" in stdout
    ds = load_dataset(out)
    ref = _pyg(EMBEDDED, "cora")
    assert torch.equal(ds.features[torch.arange(ds.num_nodes)], ref.x)
    assert torch.equal(ds.labels, ref.y)
    for ours, theirs in (("train", "train"), ("valid", "val"), ("test", "test")):
        assert torch.equal(ds.split(ours), ref[f"{theirs}_mask"].nonzero().view(-1))
    assert sorted(map(tuple, ds.edge_index().T.tolist())) == sorted(map(tuple, ref.edge_index.T.tolist()))
    check_verify_catches_corruption(out, tmp_path, capsys)


@pytest.mark.parametrize("raw_edges,count", [(False, 10556), (True, 10858)])
def test_duplicate_edges_are_removed_unless_raw_edges(raw_edges, count):
    src = read_planetoid("cora", raw_edges=raw_edges)
    pairs = np.concatenate([s * 10**4 + d for s, d in src.edge_chunks()])
    assert pairs.size == count and (np.unique(pairs).size == count) != raw_edges
    assert src.extra == {"raw_edges": raw_edges}


def test_missing_test_rows_like_citeseer(tmp_path, capsys):
    parts, test, graph = write_citeseer_like(tmp_path / "raw")
    out = tmp_path / "out"
    assert (
        run_cli(
            capsys, "prepare", "planetoid", "--name", "citeseer", "--root", tmp_path / "raw", "-o", out, "--no-progress"
        )[0]
        == 0
    )
    ds = load_dataset(out)
    n, gaps = 532, [524, 529]
    assert ds.num_nodes == n and ds.num_classes == 3 and ds.num_edges == 12
    x, y = ds.features[torch.arange(n)].numpy(), ds.labels.numpy()
    for i, node in enumerate(test):  # the i-th tx/ty row belongs to the i-th test id of the file
        assert np.array_equal(x[node], parts["tx"][i].toarray()[0]) and y[node] == parts["ty"][i].argmax()
    assert not x[gaps].any() and (y[gaps] == -1).all()
    assert np.array_equal(x[:520], parts["allx"].toarray()) and np.array_equal(y[:520], parts["ally"].argmax(1))
    ref = _pyg(tmp_path / "raw", "citeseer")
    assert torch.equal(ds.features[torch.arange(n)], ref.x)
    assert sorted(map(tuple, ds.edge_index().T.tolist())) == sorted(map(tuple, ref.edge_index.T.tolist()))
    assert (
        run_cli(
            capsys,
            "prepare",
            "planetoid",
            "--name",
            "citeseer",
            "--root",
            tmp_path / "raw",
            "-o",
            tmp_path / "raw-edges",
            "--raw-edges",
            "--no-progress",
        )[0]
        == 0
    )
    assert load_dataset(tmp_path / "raw-edges").num_edges == 16  # (0, 1) twice each way, (7, 7) twice
    assert np.array_equal(np.delete(y, gaps), np.delete(ref.y.numpy(), gaps))  # PyG labels the gaps 0
    assert ds.split("train").tolist() == list(range(10)) and ds.split("test").tolist() == sorted(test)
    assert ds.split("valid").tolist() == list(range(10, 510))


def test_too_few_nodes_for_the_validation_split(tmp_path, capsys):
    # Planetoid validates on the 500 nodes after the training rows; past the end is an error.
    write_citeseer_like(tmp_path / "raw", num_allx=300)
    assert_fails(
        run_cli(
            capsys, "prepare", "planetoid", "--name", "citeseer", "--root", tmp_path / "raw", "-o", tmp_path / "out"
        ),
        "ind.citeseer.ally",
        "node id 312 out of range [0, 312)",
    )


@pytest.mark.parametrize(
    "case,words",
    [
        ("missing", ["ind.cora.tx", "file not found"]),
        ("truncated", ["ind.cora.allx", "not a readable Planetoid pickle"]),
        ("malicious", ["ind.cora.graph", "refusing to load", "system"]),
        ("bad test id", ["ind.cora.test.index: row 3: expected one node id, got 'x'"]),
        ("label rows", ["ind.cora.ty", "999 label rows for the 1000 rows of ind.cora.tx"]),
    ],
)
def test_bad_files(tmp_path, capsys, case, words):
    raw = tmp_path / "raw"
    shutil.copytree(EMBEDDED, raw)
    if case == "missing":
        (raw / "ind.cora.tx").unlink()
    elif case == "truncated":
        data = (raw / "ind.cora.allx").read_bytes()
        (raw / "ind.cora.allx").write_bytes(data[: len(data) // 3])
    elif case == "malicious":

        class Evil:
            def __reduce__(self):
                return os.system, ("echo pwned",)

        _dump(raw / "ind.cora.graph", Evil())
    elif case == "bad test id":
        lines = (raw / "ind.cora.test.index").read_text().splitlines()
        lines[3] = "x"
        (raw / "ind.cora.test.index").write_text("\n".join(lines))
    else:
        with open(raw / "ind.cora.ty", "rb") as f:
            ty = pickle.load(f, encoding="latin1")
        _dump(raw / "ind.cora.ty", ty[:999])
    status, out, err = run_cli(capsys, "prepare", "planetoid", "--root", raw, "-o", tmp_path / "out")
    assert "pwned" not in out
    assert_fails((status, out, err), *words, folder=tmp_path, allowed=["raw"])


def test_only_cora_is_embedded(tmp_path, capsys):
    assert_fails(
        run_cli(capsys, "prepare", "planetoid", "--name", "pubmed", "-o", tmp_path / "out"),
        "--root",
        "only cora is embedded",
    )
