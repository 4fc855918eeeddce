import gzip

import numpy as np
import pytest

from gnnsys.datasets import load_dataset
from gnnsys.datasets.arrays import read_arrays
from gnnsys.datasets.random_split import split_randomly
from gnnsys.errors import DatasetError
from tests.datasets.conftest import (
    assert_fails,
    check_round_trip,
    check_verify_catches_corruption,
    graph_arrays,
    run_cli,
)


def _files(tmp_path, a, edges="npy-rows"):
    """Write a's arrays; return the CLI arguments naming them."""
    pairs = np.stack([a["src"], a["dst"]], 1)
    kind, layout = edges.split("-")
    e = tmp_path / ("edges.npy" if kind == "npy" else "edges.csv" if kind == "csv" else "edges.csv.gz")
    if kind == "npy":
        np.save(e, pairs if layout == "rows" else np.ascontiguousarray(pairs.T))
    else:
        text = ("src,dst\n" if layout == "header" else "") + "".join(f"{s},{d}\n" for s, d in pairs)
        e.write_bytes(gzip.compress(text.encode()) if kind == "gz" else text.encode())
    np.save(tmp_path / "x.npy", a["x"])
    np.save(tmp_path / "y.npy", a["y"])
    return ["--edges", e, "--features", tmp_path / "x.npy", "--labels", tmp_path / "y.npy"]


@pytest.mark.parametrize("edges", ["npy-rows", "npy-columns", "csv-header", "csv-plain", "gz-header"])
def test_round_trip_with_index_files(tmp_path, capsys, small_chunks, edges):
    a = graph_arrays(unlabelled=4)
    args = _files(tmp_path, a, edges)
    np.save(tmp_path / "train.npy", a["train"])
    (tmp_path / "valid.txt").write_text("".join(f"{i}\n" for i in a["valid"]))
    np.save(tmp_path / "test.npy", a["test"])
    out = tmp_path / "out"
    assert (
        run_cli(
            capsys,
            "prepare",
            "arrays",
            *args,
            "--train",
            tmp_path / "train.npy",
            "--valid",
            tmp_path / "valid.txt",
            "--test",
            tmp_path / "test.npy",
            "--reorder",
            "degree",
            "--name",
            "mine",
            "-o",
            out,
            "--no-progress",
        )[0]
        == 0
    )
    ds = check_round_trip(out, a)
    assert ds.name == "mine"
    if edges == "npy-rows":
        check_verify_catches_corruption(out, tmp_path, capsys)


@pytest.mark.parametrize("val_key", ["valid", "val"])
def test_masks(tmp_path, capsys, val_key):
    a = graph_arrays()
    masks = {k: np.isin(np.arange(40), a[s]) for k, s in (("train", "train"), (val_key, "valid"), ("test", "test"))}
    np.savez(tmp_path / "masks.npz", **masks)
    out = tmp_path / "out"
    assert (
        run_cli(
            capsys,
            "prepare",
            "arrays",
            *_files(tmp_path, a),
            "--masks",
            tmp_path / "masks.npz",
            "-o",
            out,
            "--no-progress",
        )[0]
        == 0
    )
    check_round_trip(out, a)


def test_random_split(tmp_path, capsys):
    a = graph_arrays(n=200, unlabelled=20)
    args = ["prepare", "arrays", *_files(tmp_path, a), "--random-split", "0.6,0.2,0.2", "--no-progress"]
    for out, seed in (("a", 1), ("b", 1), ("c", 2)):
        assert run_cli(capsys, *args, "--seed", seed, "-o", tmp_path / out)[0] == 0
    ds = [load_dataset(tmp_path / out) for out in "abc"]
    sizes = [len(ds[0].split(s)) for s in ("train", "valid", "test")]
    assert sizes == [108, 36, 36]  # of the 180 labelled nodes
    got = np.concatenate([ds[0].split(s).numpy() for s in ("train", "valid", "test")])
    assert np.unique(got).size == got.size and (a["y"][got] >= 0).all()
    assert all(np.array_equal(ds[0].split(s), ds[1].split(s)) for s in ("train", "valid", "test"))
    assert not np.array_equal(ds[0].split("train"), ds[2].split("train"))
    assert ds[0].meta["source"]["random_split"] == [0.6, 0.2, 0.2] and ds[0].meta["source"]["seed"] == 1


def test_in_memory_arrays():
    a = graph_arrays()
    src = read_arrays(
        np.stack([a["src"], a["dst"]]),
        a["x"].astype(np.float64),
        a["y"],
        train=a["train"],
        valid=a["valid"],
        test=a["test"],
    )
    assert src.num_nodes == 40 and src.feature_dim == 6 and src.name == "arrays" and src.inputs == []
    got = [np.concatenate(p) for p in zip(*src.edge_chunks())]
    assert np.array_equal(got[0], a["src"]) and np.array_equal(got[1], a["dst"])
    with pytest.raises(DatasetError, match=r"--random-split: expected three fractions"):
        split_randomly(a["y"], "0.5,0.5")
    with pytest.raises(DatasetError, match="summing to at most 1"):
        split_randomly(a["y"], (0.6, 0.3, 0.3))


@pytest.mark.parametrize(
    "case,extra,words",
    [
        ("no split", [], ["give exactly one way to split"]),
        ("two splits", ["--random-split", "0.5,0.2,0.2", "--masks", "m.npz"], ["give exactly one way to split"]),
        ("mask missing", ["--masks", "m.npz"], ["m.npz[valid]: no valid or val mask"]),
        ("missing test", ["--train", "t.npy", "--valid", "t.npy"], ["--test: missing"]),
        ("bad fractions", ["--random-split", "0.5,abc,0.1"], ["--random-split: expected three fractions"]),
        ("zero fraction", ["--random-split", "0.5,0.5,0"], ["split 'test' is empty"]),
        (
            "repeated id",
            ["--train", "t.npy", "--valid", "v.txt", "--test", "v.txt"],
            ["v.txt", "overlaps split 'valid'"],
        ),
        ("text id", ["--train", "t.npy", "--valid", "bad.txt", "--test", "v.txt"], ["bad.txt: row 1: non-numeric"]),
        ("features not npy", ["--features", "x.csv"], ["x.csv: features must be a .npy file"]),
        ("labels length", ["--labels", "short.npy"], ["short.npy: shape (39,), expected [40]"]),
        (
            "csv 3 columns",
            ["--edges", "three.csv", "--random-split", "0.5,0.2,0.2"],
            ["three.csv: row 0: 3 fields, expected 2"],
        ),
        (
            "float edges npy",
            ["--edges", "float.npy", "--random-split", "0.5,0.2,0.2"],
            ["float.npy: node ids must be integers"],
        ),
        ("edges shape", ["--edges", "x.npy"], ["x.npy: shape (40, 6), expected [E, 2] or [2, E]"]),
    ],
)
def test_bad_arrays(tmp_path, capsys, case, extra, words):
    a = graph_arrays()
    base = [str(v) for v in _files(tmp_path, a)]
    np.save(tmp_path / "t.npy", a["train"])
    (tmp_path / "v.txt").write_text("".join(f"{i}\n" for i in a["valid"]))
    (tmp_path / "bad.txt").write_text("3\nfour\n")
    (tmp_path / "x.csv").write_text("1,2\n")
    np.save(tmp_path / "short.npy", a["y"][:39])
    (tmp_path / "three.csv").write_text("1,2,3\n")
    np.save(tmp_path / "float.npy", np.stack([a["src"], a["dst"]], 1) + 0.5)
    np.savez(tmp_path / "m.npz", train=np.ones(40, bool))
    before = sorted(p.name for p in tmp_path.iterdir())
    for flag in extra:  # a later --edges/--features/--labels replaces the base one
        if flag in base:
            j = base.index(flag)
            del base[j : j + 2]
    extra = [str(tmp_path / v) if v.endswith((".npy", ".txt", ".npz", ".csv")) else v for v in extra]
    assert_fails(
        run_cli(capsys, "prepare", "arrays", *base, *extra, "-o", tmp_path / "out"),
        *words,
        folder=tmp_path,
        allowed=before,
    )
