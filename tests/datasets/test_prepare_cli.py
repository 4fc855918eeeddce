"""Bad input to `gnnsys prepare` (one line, status 2, nothing left behind),
output-directory safety, and the prepare_* Python API."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from gnnsys.cli import main
from gnnsys.datasets import feature_writer, load_dataset
from gnnsys.datasets.inspect import verify
from gnnsys.datasets.prepare import prepare_arrays, prepare_ogb, prepare_planetoid
from gnnsys.datasets.writer import tool_version
from tests.datasets.conftest import assert_fails, graph_arrays, run_cli, write_gz, write_ogb


def _set_line(path, row, text):
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    lines[row] = text
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# (what to break under raw/ or split/, the words the one error line must hold)
BAD = {
    "missing file": (lambda r: (r / "raw/node-feat.csv.gz").unlink(), ["node-feat.csv.gz", "file not found"]),
    "truncated gzip": (lambda r: _truncate(r / "raw/edge.csv.gz"), ["edge.csv.gz", "truncated"]),
    "not gzip": (lambda r: (r / "raw/edge.csv.gz").write_text("0,1\n"), ["edge.csv.gz", "not a valid gzip file"]),
    "extra column": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 7, "1,2,3"),
        ["edge.csv.gz: row 7: 3 fields, expected 2"],
    ),
    "missing column": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 9, "4"),
        ["edge.csv.gz: row 9: empty or missing field in column 2"],
    ),
    "feature columns": (
        lambda r: _set_line(r / "raw/node-feat.csv.gz", 3, "1,2"),
        ["node-feat.csv.gz: row 3: empty or missing field in column 3"],
    ),
    "non-numeric": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 12, "3,abc"),
        ["edge.csv.gz: row 12: non-numeric field 'abc' in column 2"],
    ),
    "non-integer id": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 2, "3,1.5"),
        ["edge.csv.gz: row 2: column 2 holds 1.5, expected an integer"],
    ),
    "negative id": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 5, "-1,2"),
        ["edge.csv.gz: row 5: node id -1 out of range [0, 40)"],
    ),
    "id out of range": (
        lambda r: _set_line(r / "raw/edge.csv.gz", 150, "3,40"),
        ["edge.csv.gz: row 150: node id 40 out of range [0, 40)"],
    ),
    "nan feature": (
        lambda r: _set_line(r / "raw/node-feat.csv.gz", 33, "1,2,nan,4,5,6"),
        ["node-feat.csv.gz: row 33: NaN or inf", "--nan-to-zero"],
    ),
    "inf feature": (
        lambda r: _set_line(r / "raw/node-feat.csv.gz", 0, "1,2,inf,4,5,6"),
        ["node-feat.csv.gz: row 0: NaN or inf"],
    ),
    "label out of range": (
        lambda r: _set_line(r / "raw/node-label.csv.gz", 4, "-7"),
        ["node-label.csv.gz: row 4: label -7 out of range"],
    ),
    "non-numeric label": (
        lambda r: _set_line(r / "raw/node-label.csv.gz", 6, "cs.AI"),
        ["node-label.csv.gz: row 6: non-numeric field 'cs.AI'"],
    ),
    "overlapping splits": (
        lambda r: write_gz(r / "split/time/test.csv.gz", [0, 1, 2, 3]),
        ["test.csv.gz", "overlaps split"],
    ),
    "empty split": (
        lambda r: (r / "split/time/valid.csv.gz").write_bytes(gzip.compress(b"")),
        ["valid.csv.gz: empty file"],
    ),
    "split id out of range": (
        lambda r: write_gz(r / "split/time/valid.csv.gz", [39, 40]),
        ["valid.csv.gz: row 1: node id 40 out of range"],
    ),
    "node count disagrees": (
        lambda r: write_gz(r / "raw/num-node-list.csv.gz", [41]),
        ["node-label.csv.gz: 40 rows, but num-node-list.csv.gz says 41 nodes"],
    ),
    "edge count disagrees": (
        lambda r: write_gz(r / "raw/num-edge-list.csv.gz", [170]),
        ["num-edge-list.csv.gz: says 170 edges", "edge.csv.gz holds 160"],
    ),
    "fewer feature rows": (
        lambda r: write_gz(r / "raw/node-feat.csv.gz", np.ones((39, 6))),
        ["node-feat.csv.gz: 39 feature rows for 40 nodes"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, small_chunks, case):
    a = graph_arrays()
    a["train"], a["valid"], a["test"] = np.arange(0, 20), np.arange(20, 30), np.arange(30, 40)
    root = write_ogb(tmp_path / "ogbn_arxiv", a)
    breaker, words = BAD[case]
    breaker(root)
    assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out"), *words, folder=tmp_path, allowed=["ogbn_arxiv"]
    )


def test_nan_to_zero(tmp_path, capsys):
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_arxiv", a)
    _set_line(root / "raw/node-feat.csv.gz", 33, "1,2,nan,4,inf,6")
    out = tmp_path / "out"
    assert run_cli(capsys, "prepare", "ogb", root, "-o", out, "--nan-to-zero", "--no-progress")[0] == 0
    assert load_dataset(out).features[[33]].tolist() == [[1, 2, 0, 4, 0, 6]]


def test_existing_output(tmp_path, capsys, monkeypatch):
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_arxiv", a)
    out = tmp_path / "out"
    args = ["prepare", "ogb", root, "-o", out, "--no-progress"]
    assert run_cli(capsys, *args)[0] == 0
    before = load_dataset(out).meta["checksums"]
    assert_fails(run_cli(capsys, *args), "out: output already exists", "--overwrite")

    # A failing --overwrite run keeps the old dataset intact and leaves no temporaries.
    _set_line(root / "raw/edge.csv.gz", 3, "0,99")
    assert_fails(
        run_cli(capsys, *args, "--overwrite"), "row 3: node id 99", folder=tmp_path, allowed=["ogbn_arxiv", "out"]
    )
    assert load_dataset(out).meta["checksums"] == before and verify(out) == []

    # So does an interrupted one (Ctrl-C while the features are written).
    _set_line(root / "raw/edge.csv.gz", 3, "0,9")

    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(feature_writer, "encoded_rows", interrupt)
    status, _, err = run_cli(capsys, *args, "--overwrite")
    assert status == 130 and "interrupted" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv", "out"]
    assert load_dataset(out).meta["checksums"] == before and verify(out) == []
    monkeypatch.undo()

    assert run_cli(capsys, *args, "--overwrite")[0] == 0
    assert load_dataset(out).meta["checksums"] != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv", "out"]


def test_python_api(tmp_path):
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_arxiv", a)
    out = prepare_ogb(root, tmp_path / "a", reorder="degree", progress=False)
    ds = load_dataset(out)
    assert ds.order is not None and ds.meta["source"]["kind"] == "ogb"
    out = prepare_arrays(
        out=tmp_path / "b",
        edges=np.stack([a["src"], a["dst"]]),
        features=a["x"],
        labels=a["y"],
        random_split="0.5,0.25,0.25",
        seed=3,
        dtype="float16",
        progress=False,
    )
    assert load_dataset(out).meta["features"]["dtype"] == "float16"
    assert prepare_planetoid(tmp_path / "c", dedup=True, progress=False) == tmp_path / "c"
    assert prepare_ogb.__name__ == "prepare_ogb" and "read_ogb" in prepare_ogb.__doc__
    with pytest.raises(TypeError, match="unexpected keyword|got an unexpected"):
        prepare_ogb(root, tmp_path / "d", no_such_option=1)


def test_version_and_help_texts(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"gnnsys {tool_version()}"
    with pytest.raises(SystemExit):
        main(["prepare", "planetoid", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "--self-loops {keep,drop} keep: the edges from a node to itself as the input kind reads them (prepare "
        "planetoid's reader removes the files' self-loops unless --raw-edges); drop: remove every one (default: keep)",
        "the files' duplicate edges and self-loops are removed, as in PyG's Planetoid (--raw-edges keeps them)",
        "--normalize-features {none,row} row: divide each feature row by its sum",
        "--remap-labels number the distinct labels 0..C-1",
    ):
        assert words in text, words


@pytest.mark.parametrize(
    "command",
    [
        "info {ds} --json",
        "prepare planetoid --out {tmp}/cora --no-progress",
        "train {ds} --epochs 1 --fanouts 3 --hidden 8 --no-progress",
    ],
)
def test_output_into_a_closed_pipe_ends_quietly(make_dataset, tmp_path, command):
    """`gnnsys info --json | head` and the like: no BrokenPipeError traceback,
    the status of a process killed by SIGPIPE."""
    ds, _ = make_dataset()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gnnsys", *command.format(ds=ds.path, tmp=tmp_path).split()],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=300,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr.decode()) == (141, "")
