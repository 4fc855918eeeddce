"""Helpers for the reader tests: small graphs, writers of each input format in
its original layout, a CLI runner, and the round-trip and failure checks."""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gnnsys.cli import main
from gnnsys.datasets import csv_reader, load_dataset, npy
from gnnsys.datasets.inspect import verify


def graph_arrays(n=40, e=160, dim=6, classes=4, seed=0, unlabelled=0):
    """A random graph: src, dst, x (exact in float32 and as text), y, a split."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    y[rng.choice(n, unlabelled, replace=False)] = -1
    labelled = rng.permutation(np.flatnonzero(y >= 0))
    a, b = len(labelled) // 2, len(labelled) * 3 // 4
    return {
        "src": rng.integers(0, n, e),
        "dst": rng.integers(0, n, e),
        "x": (rng.integers(-1000, 1000, (n, dim)) / 64).astype(np.float32),
        "y": y,
        "train": np.sort(labelled[:a]),
        "valid": np.sort(labelled[a:b]),
        "test": np.sort(labelled[b:]),
    }


def write_gz(path, rows, fmt="%d"):
    """A headerless gzipped CSV of `rows` (1-D or 2-D), as OGB writes them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    rows = rows.reshape(len(rows), -1)
    text = "".join(",".join(fmt % v for v in r) + "\n" for r in rows)
    path.write_bytes(gzip.compress(text.encode()))
    return path


def write_ogb(root, a, layout="csv", splits=("time",)):
    """An OGB node-property directory (raw/ and split/<name>/) holding `a`."""
    root = Path(root)
    raw = root / "raw"
    raw.mkdir(parents=True)
    n, e = len(a["y"]), len(a["src"])
    if layout == "csv":
        write_gz(raw / "edge.csv.gz", np.stack([a["src"], a["dst"]], 1))
        write_gz(raw / "node-feat.csv.gz", a["x"], fmt="%.10g")
        write_gz(raw / "node-label.csv.gz", a["y"])
        write_gz(raw / "num-node-list.csv.gz", [n])
        write_gz(raw / "num-edge-list.csv.gz", [e])
    else:
        np.savez_compressed(
            raw / "data.npz",
            edge_index=np.stack([a["src"], a["dst"]]),
            node_feat=a["x"],
            node_year=np.zeros((n, 1), np.int64),
            num_nodes_list=np.array([n]),
            num_edges_list=np.array([e]),
        )
        labels = np.where(a["y"] >= 0, a["y"], np.nan).reshape(-1, 1)
        np.savez_compressed(raw / "node-label.npz", node_label=labels)
    for name in splits:
        for s in ("train", "valid", "test"):
            write_gz(root / "split" / name / f"{s}.csv.gz", a[s])
    return root


def write_heterophilous(path, a, num_splits=2):
    """A heterophilous-benchmark .npz holding `a` (split row 0 = a's split)."""
    n = len(a["y"])
    masks = {k: np.zeros((num_splits, n), bool) for k in ("train", "valid", "test")}
    rng = np.random.default_rng(1)
    for i in range(num_splits):
        perm = a["train"], a["valid"], a["test"]
        if i:
            p = rng.permutation(n)
            perm = p[: n // 2], p[n // 2 : 3 * n // 4], p[3 * n // 4 :]
        for k, ids in zip(masks, perm):
            masks[k][i, ids] = True
    np.savez_compressed(
        path,
        node_features=a["x"],
        node_labels=a["y"],
        edges=np.stack([a["src"], a["dst"]], 1),
        train_masks=masks["train"],
        val_masks=masks["valid"],
        test_masks=masks["test"],
    )
    return path


class _Trap:
    """Unpickling it creates `marker` (a stand-in for code a crafted file would run)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def write_gnn_benchmark(path, a, attrs="csr", objects_to=None):
    """An .npz in the gnn-benchmark CSR layout holding `a` (edge list kept as
    is, repeats included); attrs "csr", "dense" or "none"; with `objects_to`,
    optional keys hold pickled objects that would create that file if unpickled."""
    n = len(a["y"])
    order = np.lexsort((a["dst"], a["src"]))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(a["src"], minlength=n))])
    arrays = {
        "adj_data": np.ones(len(order), np.float32),
        "adj_indices": a["dst"][order],
        "adj_indptr": indptr,
        "adj_shape": np.array([n, n]),
        "labels": a["y"],
    }
    if attrs == "csr":
        x = sp.csr_matrix(a["x"])
        arrays.update(attr_data=x.data, attr_indices=x.indices, attr_indptr=x.indptr, attr_shape=np.array(x.shape))
    elif attrs == "dense":
        arrays["attr_matrix"] = a["x"]
    if objects_to is not None:
        arrays["node_names"] = np.array([_Trap(objects_to)] + [f"n{i}" for i in range(1, n)], dtype=object)
        arrays["idx_to_class"] = np.array({0: _Trap(objects_to)}, dtype=object)
    np.savez(path, **arrays)
    return path


def run_cli(capsys, *argv):
    """gnnsys.cli.main(argv) -> (status, stdout, stderr)."""
    capsys.readouterr()
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_fails(result, *words, folder=None, allowed=()):
    """Exit status 2, one stderr line holding `words`, no traceback, and
    nothing in `folder` besides `allowed` (no output, no temporaries)."""
    status, _, err = result
    lines = [shown for line in err.splitlines() if (shown := line.split("\r")[-1].strip())]  # as a terminal shows
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("gnnsys prepare: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    if folder is not None:
        assert sorted(p.name for p in Path(folder).iterdir()) == sorted(allowed)
    return lines[0]


def check_round_trip(out, a, edges=None, capsys=None):
    """The dataset at `out` holds a's features, labels, split and edges
    (`edges`: the expected (src, dst) pairs, default a's), up to order.npy."""
    ds = load_dataset(out)
    n = len(a["y"])
    order = ds.order.numpy() if ds.order is not None else np.arange(n)
    assert np.array_equal(ds.features[np.arange(n)].numpy(), a["x"][order])
    assert np.array_equal(ds.labels.numpy(), a["y"][order])
    for s in ("train", "valid", "test"):
        assert np.array_equal(np.sort(order[ds.split(s).numpy()]), np.sort(a[s]))
    ei = ds.edge_index().numpy()
    want = edges if edges is not None else (a["src"], a["dst"])
    assert sorted(zip(order[ei[0]], order[ei[1]])) == sorted(zip(*want))
    assert verify(out) == []
    return ds


def check_verify_catches_corruption(out, tmp_path, capsys):
    """`gnnsys info --verify` passes on `out` and fails on a copy with one flipped byte."""
    assert run_cli(capsys, "info", out, "--verify")[0] == 0
    bad = Path(tmp_path) / "corrupt-copy"
    shutil.copytree(out, bad)
    with open(bad / "features.bin", "r+b") as f:
        byte = f.read(1)
        f.seek(0)
        f.write(bytes([byte[0] ^ 0xFF]))
    status, _, err = run_cli(capsys, "info", bad, "--verify")
    assert status == 1 and "checksum mismatch" in err


@pytest.fixture
def small_chunks(monkeypatch):
    """Make every chunked reader use tiny chunks, so tests cross chunk borders."""
    monkeypatch.setattr(csv_reader, "CHUNK_BYTES", 64)
    monkeypatch.setattr(npy, "CHUNK_BYTES", 64)
