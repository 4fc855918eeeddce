"""Bad input to the gnnsys command line, one row per case: the command ends
with the expected exit status and one clear error line, never a traceback.

To add a case, add a Row to ROWS:

    Row("what is wrong", "info {ds}", 2, "a fragment of the error line", setup=meta_set("num_nodes", -1)),

command  the gnnsys arguments; {ds} is a small valid dataset made for the row
         (60 nodes, 400 edges, 7 features, 3 classes, `tests.conftest.random_source`)
         and the current directory is an empty scratch folder.
status   2 for bad input or options: stderr's last line is the one
         "gnnsys ...: error: ..." line (argparse prints its usage above it);
         1 for `info --verify` finding a problem (stderr lists them).
fragment text that line (for status 1, stderr) must hold.
setup    setup(ds, here) breaks something before the command runs; the
         helpers below make the common breaks (meta_set, meta_drop, meta_text,
         resave, write, arrays_input, gnn_benchmark_npz).
check    check(ds, here), when given, asserts what must hold afterwards.

Other bad-input tables stay beside the code they test: the OGB, arrays, npz
and Planetoid readers' (tests/datasets/test_*.py), the in-memory Dataset's
(tests/datasets/test_invariants.py) and the trainer options' (tests/gnnsys/).
"""
import json
import shlex
from typing import Callable, NamedTuple

import numpy as np
import pytest

from gnnsys.cli import main
from gnnsys.datasets import PrepareOptions, write_dataset
from tests.conftest import random_source
from tests.datasets.conftest import graph_arrays, write_gnn_benchmark, write_heterophilous


class Row(NamedTuple):
    id: str
    command: str
    status: int
    fragment: str
    setup: Callable | None = None
    check: Callable | None = None


def meta_set(field: str, value):
    """Set meta.json's `field` ("a.b" for a nested one) to `value`."""
    def setup(ds, here):
        meta = json.loads((ds / "meta.json").read_text())
        *parents, key = field.split(".")
        holder = meta
        for p in parents:
            holder = holder[p]
        holder[key] = value
        (ds / "meta.json").write_text(json.dumps(meta))
    return setup


def meta_drop(field: str):
    """Remove the top-level `field` from meta.json."""
    def setup(ds, here):
        meta = json.loads((ds / "meta.json").read_text())
        del meta[field]
        (ds / "meta.json").write_text(json.dumps(meta))
    return setup


def meta_text(text: str):
    """Replace meta.json with `text`."""
    return lambda ds, here: (ds / "meta.json").write_text(text)


def resave(name: str, change: Callable):
    """Save change(array) over the dataset's `name` (its checksum left as it was: a corruption)."""
    return lambda ds, here: np.save(ds / name, change(np.load(ds / name)))


def write(name: str, content: bytes = b"", folder: bool = False):
    """Create the file `name` (or a folder holding it) in the scratch folder."""
    def setup(ds, here):
        path = here / name
        if folder:
            path.mkdir()
            path = path / "thesis.tex"
        path.write_bytes(content)
    return setup


def arrays_input(label_change: Callable = lambda y: y):
    """e.npy, x.npy and y.npy of a 40-node graph for `prepare arrays`, labels changed by label_change."""
    def setup(ds, here):
        a = graph_arrays()
        np.save(here / "e.npy", np.stack([a["src"], a["dst"]], 1))
        np.save(here / "x.npy", a["x"])
        np.save(here / "y.npy", label_change(a["y"].copy()))
    return setup


def gnn_benchmark_npz(ds, here):
    write_gnn_benchmark(here / "g.npz", graph_arrays())


def heterophilous_npz(ds, here):
    write_heterophilous(here / "h.npz", graph_arrays())


def _set(array, index, value):
    array[index] = value
    return array


ARRAYS = "prepare arrays --edges e.npy --features x.npy --labels y.npy --random-split 0.5,0.2,0.2 --out out"
ROWS = [
    # prepare: labels
    Row("label 10**9", ARRAYS, 2, "1000000001 classes (labels up to 1000000000) for 40 nodes; use --remap-labels",
        arrays_input(lambda y: _set(y, 3, 10**9))),
    Row("labels far from dense", ARRAYS, 2, "only 2 of the 10 classes 0..9 occur; use --remap-labels",
        arrays_input(lambda y: np.where(y > 0, 9, 0))),
    Row("label below -1", ARRAYS, 2, "y.npy: row 5: label -3 out of range (classes are >= 0",
        arrays_input(lambda y: _set(y, 5, -3))),
    Row("features file missing", ARRAYS.replace("x.npy", "nothing.npy"), 2, "nothing.npy: file not found",
        arrays_input()),
    # prepare: options
    Row("--normalize-features col", "prepare planetoid --out out --normalize-features col", 2,
        "argument --normalize-features: invalid choice: 'col'"),
    Row("--align not a power of two", "prepare planetoid --out out --align 100", 2,
        "--align: must be a positive power of two, got 100"),
    Row("--dtype float64", "prepare planetoid --out out --dtype float64", 2,
        "argument --dtype: invalid choice: 'float64'"),
    # prepare: --out and --overwrite
    Row("--overwrite on a user's folder", "prepare planetoid --out mine --overwrite", 2,
        "mine: is neither a gnnsys dataset nor empty; --overwrite replaces only those",
        write("mine", b"years of work", folder=True),
        check=lambda ds, here: (here / "mine" / "thesis.tex").read_bytes() == b"years of work"),
    Row("--overwrite on a file", "prepare planetoid --out notes.txt --overwrite", 2,
        "notes.txt: exists and is not a directory", write("notes.txt", b"keep me"),
        check=lambda ds, here: (here / "notes.txt").read_bytes() == b"keep me"),
    Row("--out . --overwrite", "prepare planetoid --out . --overwrite", 2,
        "is the current directory or holds it", check=lambda ds, here: list(here.parent.glob(".*")) == []),
    # prepare npz: the two layouts
    Row("gnn-benchmark npz without a split", "prepare npz g.npz --out out", 2,
        "g.npz holds the gnn-benchmark CSR layout, which stores no split: give --random-split", gnn_benchmark_npz),
    Row("gnn-benchmark npz with --split-index", "prepare npz g.npz --split-index 1 --random-split 0.5,0.2,0.2 "
        "--out out", 2, "g.npz holds the gnn-benchmark CSR layout, which stores no split; give --random-split",
        gnn_benchmark_npz),
    Row("heterophilous npz with --random-split", "prepare npz h.npz --random-split 0.5,0.2,0.2 --out out", 2,
        "h.npz holds the heterophilous layout with its own splits; give --split-index", heterophilous_npz),
    # info: meta.json against its schema
    Row("no dataset", "info nowhere", 2, "nowhere: not a prepared gnnsys dataset (no meta.json)"),
    Row("meta.json not JSON", "info {ds}", 2, "meta.json: row 1: not valid JSON", meta_text("{nodes: 3")),
    Row("meta.json a list", "info {ds}", 2, "meta.json: must hold a JSON object, got list", meta_text("[1, 2]")),
    Row("meta.json of another format", "info {ds}", 2, "format is 'other', expected 'gnnsys-dataset'",
        meta_set("format", "other")),
    Row("meta.json of a newer version", "info {ds}", 2, "field 'version' must be 1, got 2", meta_set("version", 2)),
    Row("num_nodes missing", "info {ds}", 2, "meta.json: field 'num_nodes' is missing", meta_drop("num_nodes")),
    Row("num_nodes a string", "info {ds}", 2, "field 'num_nodes' must be a non-negative integer, got \"many\"",
        meta_set("num_nodes", "many")),
    Row("negative num_edges", "info {ds}", 2, "field 'num_edges' must be a non-negative integer, got -5",
        meta_set("num_edges", -5)),
    Row("graph a list", "info {ds}", 2, "field 'graph' must be an object, got [\"indptr.npy\"]",
        meta_set("graph", ["indptr.npy"])),
    Row("unknown feature dtype", "info {ds}", 2, "field 'features.dtype' must be one of float32, float16, bfloat16",
        meta_set("features.dtype", "float64")),
    Row("row stride too short", "info {ds}", 2, "field 'features.row_stride' is 8 bytes, less than the 28 bytes",
        meta_set("features.row_stride", 8)),
    Row("file outside the dataset", "info {ds}", 2, "field 'labels.file' must be a file name inside the dataset "
        "directory, got \"../../etc/passwd\"", meta_set("labels.file", "../../etc/passwd")),
    Row("classes beyond the nodes", "info {ds}", 2, "field 'labels.num_classes' is 1000000000, more than the 60 nodes",
        meta_set("labels.num_classes", 10**9)),
    Row("labels.npy of floats", "info {ds}", 2, "labels.npy: expected a .npy array of signed integers, got float64",
        resave("labels.npy", lambda y: y.astype(np.float64))),
    Row("labels.npy not an array", "info {ds}", 2, "labels.npy: cannot read",
        lambda ds, here: (ds / "labels.npy").write_bytes(b"\x93NUMPY garbage")),
    Row("info --verify: an id out of range", "info {ds} --verify", 1, "node id 60 out of range [0, 60)",
        resave("indices.npy", lambda ix: _set(ix, 7, 60))),
    # train: the load-time checks of the arrays (a corrupted graph crashed the process with SIGSEGV)
    Row("indices.npy id out of range", "train {ds} --epochs 1", 2, "indices.npy: row 7: node id 60 out of range",
        resave("indices.npy", lambda ix: _set(ix, 7, 60))),
    Row("indices.npy id out of range, full graph", "train {ds} --mode fullgraph --epochs 1", 2,
        "indices.npy: row 7: node id 1000 out of range [0, 60)", resave("indices.npy", lambda ix: _set(ix, 7, 1000))),
    Row("negative id in indices.npy", "train {ds} --epochs 1", 2, "indices.npy: row 0: node id -1 out of range",
        resave("indices.npy", lambda ix: _set(ix, 0, -1))),
    Row("indptr.npy decreases", "train {ds} --epochs 1", 2, "indptr.npy: row 3: decreases from",
        resave("indptr.npy", lambda ip: _set(ip, 3, ip[2] - 1))),
    Row("indices.npy one id short", "train {ds} --epochs 1", 2, "indptr.npy: ends at 400, but indices holds 399",
        resave("indices.npy", lambda ix: ix[:-1])),
    Row("edge count disagrees with meta.json", "train {ds} --epochs 1", 2,
        "indices.npy: holds 400 ids, meta.json says 401 edges", meta_set("num_edges", 401)),
    Row("label beyond the classes", "train {ds} --epochs 1", 2, "labels.npy: row 4: label 3 out of range [-1, 3)",
        resave("labels.npy", lambda y: _set(y, 4, 3))),
    Row("split id out of range", "train {ds} --epochs 1", 2, "train_idx.npy: row 0: node id 60 out of range [0, 60)",
        resave("train_idx.npy", lambda ids: _set(ids, 0, 60))),
    Row("features.bin truncated", "train {ds} --epochs 1", 2, "features.bin: size 7552 bytes, expected 60 rows x 128",
        lambda ds, here: (ds / "features.bin").write_bytes((ds / "features.bin").read_bytes()[:-128])),
    Row("meta.json without labels", "train {ds} --epochs 1", 2, "field 'labels' is missing", meta_drop("labels")),
    # train: options
    Row("--lr -0.01", "train {ds} --lr -0.01", 2, "lr: must be a finite number > 0, got -0.01"),
    Row("--lr nan", "train {ds} --lr nan", 2, "lr: must be a finite number > 0, got nan"),
    Row("--weight-decay -1", "train {ds} --weight-decay -1", 2, "weight_decay: must be a finite number >= 0"),
    Row("--device banana", "train {ds} --device banana", 2, "device: must be cpu, cuda or cuda:N, got 'banana'"),
    Row("--checkpoint-dir naming a file", "train {ds} --checkpoint-dir notes.txt", 2,
        "checkpoint_dir: notes.txt exists and is not a directory", write("notes.txt")),
    Row("--resume without --checkpoint-dir", "train {ds} --resume", 2, "resume: needs a checkpoint directory"),
    Row("--epochs 0", "train {ds} --epochs 0", 2, "epochs: must be >= 1, got 0"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row, tmp_path, monkeypatch, capsys):
    ds = write_dataset(random_source()[0], tmp_path / "ds", PrepareOptions(progress=False))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    if row.setup:
        row.setup(ds, here)
    capsys.readouterr()
    try:
        status = main(shlex.split(row.command.format(ds=ds)))
    except SystemExit as e:  # argparse
        status = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert status == row.status, err
    if status == 2:
        assert lines and lines[-1].startswith("gnnsys") and ": error: " in lines[-1], err
        assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), err
        assert row.fragment in lines[-1], lines[-1]
    else:
        assert row.fragment in err, err
    assert row.check is None or row.check(ds, here)


def test_rows_have_distinct_ids():
    assert len({r.id for r in ROWS}) == len(ROWS)

