import numpy as np
import pytest

from gnnsys.datasets import load_dataset
from gnnsys.datasets.ogb import read_ogb
from gnnsys.errors import DatasetError
from tests.datasets.conftest import (
    assert_fails,
    check_round_trip,
    check_verify_catches_corruption,
    graph_arrays,
    run_cli,
    write_gz,
    write_ogb,
)


@pytest.mark.parametrize("layout", ["csv", "npz"])
@pytest.mark.parametrize("reorder", ["none", "degree"])
def test_round_trip(tmp_path, capsys, small_chunks, layout, reorder):
    a = graph_arrays(unlabelled=5)
    root = write_ogb(tmp_path / "ogbn_arxiv", a, layout)
    out = tmp_path / "out"
    status, stdout, _ = run_cli(capsys, "prepare", "ogb", root, "--out", out, "--reorder", reorder, "--no-progress")
    assert status == 0 and "written to" in stdout
    ds = check_round_trip(out, a)
    assert ds.meta["source"]["split"] == "time" and ds.meta["source"]["add_inverse_edges"] is False
    assert int((ds.labels < 0).sum()) == 5
    if layout == "csv" and reorder == "none":
        check_verify_catches_corruption(out, tmp_path, capsys)


@pytest.mark.parametrize("layout", ["csv", "npz"])
@pytest.mark.parametrize(
    "folder,flag,inverse",
    [
        ("ogbn_products", "auto", True),
        ("ogbn_arxiv", "auto", False),
        ("ogbn_products", "no", False),
        ("ogbn_arxiv", "yes", True),
    ],
)
def test_inverse_edges(tmp_path, capsys, layout, folder, flag, inverse):
    a = graph_arrays()
    root = write_ogb(tmp_path / folder, a, layout, splits=("sales_ranking",))
    out = tmp_path / "out"
    assert run_cli(capsys, "prepare", "ogb", root, "-o", out, "--add-inverse-edges", flag, "--no-progress")[0] == 0
    src, dst = a["src"], a["dst"]
    want = (np.concatenate([src, dst]), np.concatenate([dst, src])) if inverse else (src, dst)
    ds = check_round_trip(out, a, edges=want)
    assert ds.meta["source"]["add_inverse_edges"] is inverse and ds.meta["source"]["split"] == "sales_ranking"


def test_split_choice(tmp_path, capsys):
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_arxiv", a, splits=("time", "random"))
    line = assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out"),
        "several splits",
        folder=tmp_path,
        allowed=["ogbn_arxiv"],
    )
    assert "--split" in line
    assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out", "--split", "nope"),
        "--split",
        "no split 'nope'",
        "random, time",
    )
    assert run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out", "--split", "random", "--no-progress")[0] == 0
    assert load_dataset(tmp_path / "out").meta["source"]["split"] == "random"


def test_edge_row_reported_with_inverse_edges(tmp_path, small_chunks):
    # With inverse edges added, the row of a bad id is still its row in edge.csv.gz.
    a = graph_arrays()
    a["dst"][100] = 40
    src = read_ogb(write_ogb(tmp_path / "ogbn_products", a), add_inverse_edges="auto")
    with pytest.raises(DatasetError, match=r"edge.csv.gz: row 100: node id 40 out of range \[0, 40\)"):
        list(src.edge_chunks())


def test_npz_count_disagrees(tmp_path, capsys):
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_papers100M", a, "npz")
    data = dict(np.load(root / "raw" / "data.npz"))
    data["num_nodes_list"] = np.array([41])
    np.savez_compressed(root / "raw" / "data.npz", **data)
    assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out"),
        "data.npz[node_feat]",
        "num_nodes_list",
        "41 nodes",
        folder=tmp_path,
        allowed=["ogbn_papers100M"],
    )
    data["num_nodes_list"], data["num_edges_list"] = np.array([40]), np.array([161])
    np.savez_compressed(root / "raw" / "data.npz", **data)
    assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out"),
        "data.npz[num_edges_list]",
        "says 161 edges",
        "holds 160",
        folder=tmp_path,
        allowed=["ogbn_papers100M"],
    )


def test_npz_label_not_integer(tmp_path, capsys):
    root = write_ogb(tmp_path / "ogbn_papers100M", graph_arrays(), "npz")
    labels = np.full((40, 1), 1.5)
    np.savez_compressed(root / "raw" / "node-label.npz", node_label=labels)
    assert_fails(
        run_cli(capsys, "prepare", "ogb", root, "-o", tmp_path / "out"),
        "node-label.npz[node_label]: row 0: label 1.5 is not an integer",
    )


def test_not_an_ogb_directory(tmp_path, capsys):
    assert_fails(run_cli(capsys, "prepare", "ogb", tmp_path, "-o", tmp_path / "out"), "no raw/ folder")
    (tmp_path / "raw").mkdir()
    assert_fails(run_cli(capsys, "prepare", "ogb", tmp_path, "-o", tmp_path / "out"), "neither edge.csv.gz", "data.npz")


def test_real_formatting_of_counts(tmp_path):
    # OGB's count files hold one integer line; a two-graph list is refused.
    a = graph_arrays()
    root = write_ogb(tmp_path / "ogbn_arxiv", a)
    write_gz(root / "raw" / "num-node-list.csv.gz", [20, 20])
    with pytest.raises(DatasetError, match="2 rows, expected one count"):
        read_ogb(root)
