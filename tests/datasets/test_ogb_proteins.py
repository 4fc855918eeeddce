"""ogbn-proteins' raw layout: multi-label targets, edge features carried into
CSC order, node features derived from them, and the bad inputs of that layout."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import csc_file, load_dataset
from gnnsys.datasets.inspect import verify
from tests.datasets.conftest import assert_fails, run_cli, write_gz

N, E, TASKS, EDGE_DIM = 30, 90, 5, 3


def proteins_arrays(seed=0):
    """A random proteins-like graph: edges stored once, 3 edge features
    (exact as text), 5 binary tasks, a species split."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(N)
    return {
        "src": rng.integers(0, N, E),
        "dst": rng.integers(0, N, E),
        "edge_x": (rng.integers(0, 1000, (E, EDGE_DIM)) / 1000).astype(np.float32),
        "y": rng.integers(0, 2, (N, TASKS)),
        "species": rng.integers(0, 3, N),
        "train": np.sort(perm[:15]),
        "valid": np.sort(perm[15:22]),
        "test": np.sort(perm[22:]),
    }


def _write_csv(path: Path, rows, fmt, gz: bool):
    if gz:
        return write_gz(path, rows, fmt)
    rows = np.asarray(rows).reshape(len(rows), -1)
    path = path.with_suffix("")  # name.csv.gz -> name.csv
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(",".join(fmt % v for v in r) + "\n" for r in rows))
    return path


def write_proteins(root, a, gz=True):
    """An OGB ogbn-proteins directory exactly as OGB ships it (gz) or decompressed."""
    root, raw = Path(root), Path(root) / "raw"
    _write_csv(raw / "edge.csv.gz", np.stack([a["src"], a["dst"]], 1), "%d", gz)
    _write_csv(raw / "edge-feat.csv.gz", a["edge_x"], "%.3f", gz)
    _write_csv(raw / "node-label.csv.gz", a["y"], "%d", gz)
    _write_csv(raw / "node_species.csv.gz", a["species"], "%d", gz)
    _write_csv(raw / "num-node-list.csv.gz", [N], "%d", gz)
    _write_csv(raw / "num-edge-list.csv.gz", [len(a["src"])], "%d", gz)
    for s in ("train", "valid", "test"):
        _write_csv(root / "split" / "species" / f"{s}.csv.gz", a[s], "%d", gz)
    return root


def reference(a):
    """OGB's loading with inverse edges, in CSC order (by target, source, edge
    row): (src, dst, edge features) of every stored edge."""
    rows = np.arange(len(a["src"]))
    src, dst = np.concatenate([a["src"], a["dst"]]), np.concatenate([a["dst"], a["src"]])
    rows = np.concatenate([rows, rows])
    order = np.lexsort((rows, src, dst))
    return src[order], dst[order], a["edge_x"][rows[order]]


def derived(a, reduce):
    """Each node's mean or sum of its in-edges' features (inverse edges included), in float64."""
    src, dst, x = reference(a)
    sums = np.zeros((N, EDGE_DIM))
    np.add.at(sums, dst, x.astype(np.float64))
    if reduce == "mean":
        sums /= np.maximum(np.bincount(dst, minlength=N), 1)[:, None]
    return sums


def prepare(capsys, root, out, *options):
    return run_cli(capsys, "prepare", "ogb", root, "--out", out, "--no-progress", *options)


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_proteins_raw_layout(tmp_path, capsys, small_chunks, gz, reduce):
    a = proteins_arrays()
    root = write_proteins(tmp_path / "ogbn_proteins", a, gz)
    status, stdout, err = prepare(capsys, root, tmp_path / "out", "--node-features-from-edges", reduce)
    assert status == 0, err
    assert "tasks        5 binary (multilabel)" in stdout
    ds = load_dataset(tmp_path / "out")
    meta = ds.meta
    assert meta["labels"] == {"file": "labels.npy", "num_classes": TASKS, "task": "multilabel", "num_tasks": TASKS}
    assert meta["edge_features"]["dim"] == EDGE_DIM and meta["edge_features"]["order"] == "csc"
    assert meta["source"]["add_inverse_edges"] is True and meta["source"]["split"] == "species"
    assert ds.task == "multilabel" and ds.labels.dtype.is_signed and np.array_equal(ds.labels.numpy(), a["y"])
    src, dst, x = reference(a)
    ei = ds.edge_index().numpy()
    assert np.array_equal(ei[0], src) and np.array_equal(ei[1], dst)
    assert np.array_equal(ds.edge_features[np.arange(ds.num_edges)].numpy(), x)
    np.testing.assert_allclose(ds.features[np.arange(N)].numpy(), derived(a, reduce), rtol=1e-6, atol=1e-7)
    for s in ("train", "valid", "test"):
        assert np.array_equal(ds.split(s).numpy(), a[s])
    assert verify(tmp_path / "out") == []


def test_reordered_graph_keeps_each_edge_with_its_features(tmp_path, capsys):
    a = proteins_arrays(seed=1)
    root = write_proteins(tmp_path / "ogbn_proteins", a)
    assert prepare(capsys, root, tmp_path / "out", "--node-features-from-edges", "mean", "--reorder", "degree")[0] == 0
    ds = load_dataset(tmp_path / "out")
    order = ds.order.numpy()
    ei = order[ds.edge_index().numpy()]  # back to the input's ids
    features = {}
    for s, d, x in zip(*reference(a)):
        features.setdefault((s, d), set()).add(tuple(x))
    got = ds.edge_features[np.arange(ds.num_edges)].numpy()
    assert all(tuple(x) in features[(s, d)] for s, d, x in zip(ei[0], ei[1], got))
    np.testing.assert_allclose(ds.features[np.arange(N)].numpy(), derived(a, "mean")[order], rtol=1e-6, atol=1e-7)
    assert np.array_equal(ds.labels.numpy(), a["y"][order])


def _bytes(folder):
    meta = json.loads((folder / "meta.json").read_text())
    return {name: (folder / name).read_bytes() for name in meta["checksums"]}


def test_bucketed_build_gives_the_same_bytes(tmp_path, capsys, monkeypatch):
    a = proteins_arrays(seed=2)
    root = write_proteins(tmp_path / "ogbn_proteins", a)
    assert prepare(capsys, root, tmp_path / "memory", "--node-features-from-edges", "sum")[0] == 0
    monkeypatch.setattr(csc_file, "anonymous_bytes", lambda: 0)
    monkeypatch.setattr(csc_file, "CHUNK_MARGIN", 0)
    monkeypatch.setattr(csc_file, "SPILL_PIECE", 7)
    plans = []
    plan = csc_file.plan_buckets
    monkeypatch.setattr(csc_file, "plan_buckets", lambda *args: plans.append(plan(*args)) or plans[-1])
    options = ("--node-features-from-edges", "sum", "--mem-limit", "1e-6")
    assert prepare(capsys, root, tmp_path / "buckets", *options)[0] == 0
    assert len(plans[0]) > 2
    assert load_dataset(tmp_path / "buckets").meta["source"]["graph_build"]["buckets"] == len(plans[0])
    assert _bytes(tmp_path / "buckets") == _bytes(tmp_path / "memory")
    left = sorted(p.name for p in (tmp_path / "buckets").iterdir())
    assert left == sorted([*_bytes(tmp_path / "memory"), "meta.json"])  # no scratch or spill file behind


def _rewrite(path: Path, edit):
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress(("\n".join(edit(lines)) + "\n").encode()))


BAD = {
    "label row of the wrong width": (
        lambda r: _rewrite(r / "raw/node-label.csv.gz", lambda ls: ls[:3] + ["0,1"] + ls[4:]),
        ["node-label.csv.gz", "row 3", "empty or missing field in column 3"],
    ),
    "label row too wide": (
        lambda r: _rewrite(r / "raw/node-label.csv.gz", lambda ls: ls[:4] + ["0,1,0,1,0,1"] + ls[5:]),
        ["node-label.csv.gz", "row 4", "6 fields, expected 5"],
    ),
    "edge feature row of the wrong width": (
        lambda r: _rewrite(r / "raw/edge-feat.csv.gz", lambda ls: ls[:7] + ["0.5"] + ls[8:]),
        ["edge-feat.csv.gz", "row 7", "empty or missing field in column 2"],
    ),
    "edge features short": (
        lambda r: _rewrite(r / "raw/edge-feat.csv.gz", lambda ls: ls[:-1]),
        ["edge-feat.csv.gz", f"holds {E - 1} rows", f"says {E} edges"],
    ),
    "edge features long": (
        lambda r: _rewrite(r / "raw/edge-feat.csv.gz", lambda ls: ls + ls[:1]),
        ["edge-feat.csv.gz", f"holds {E + 1} rows", f"says {E} edges"],
    ),
    "label not binary": (
        lambda r: _rewrite(r / "raw/node-label.csv.gz", lambda ls: ls[:2] + ["0,1,2,0,1"] + ls[3:]),
        ["node-label.csv.gz", "row 2", "task 2 holds 2.0, expected 0 or 1"],
    ),
    "layouts mixed": (
        lambda r: np.savez(r / "raw/data.npz", edge_index=np.zeros((2, 1), np.int64)),
        ["raw", "mixes the binary layout (data.npz) with the CSV layout (edge.csv.gz)"],
    ),
    "gzip and plain": (
        lambda r: (r / "raw/edge-feat.csv").write_text("0,0,0\n"),
        ["raw", "holds both edge-feat.csv.gz and edge-feat.csv"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, case):
    break_it, words = BAD[case]
    root = write_proteins(tmp_path / "ogbn_proteins", proteins_arrays())
    break_it(root)
    result = prepare(capsys, root, tmp_path / "out", "--node-features-from-edges", "mean")
    assert_fails(result, *words, folder=tmp_path, allowed=["ogbn_proteins"])


@pytest.mark.parametrize(
    "options,words",
    [
        ((), ["no node-feat.csv.gz", "--node-features-from-edges mean"]),
        (("--node-features-from-edges", "mean", "--dedup"), ["--dedup", "edge features"]),
        (("--node-features-from-edges", "mean", "--remap-labels"), ["--remap-labels", "multi-label"]),
    ],
)
def test_options_that_do_not_fit_are_refused(tmp_path, capsys, options, words):
    root = write_proteins(tmp_path / "ogbn_proteins", proteins_arrays())
    assert_fails(prepare(capsys, root, tmp_path / "out", *options), *words, folder=tmp_path, allowed=["ogbn_proteins"])


def test_deriving_needs_edge_features(tmp_path, capsys):
    from tests.datasets.conftest import graph_arrays, write_ogb

    root = write_ogb(tmp_path / "ogbn_arxiv", graph_arrays())
    assert_fails(
        prepare(capsys, root, tmp_path / "out", "--node-features-from-edges", "mean"),
        "--node-features-from-edges",
        "no edge features",
        folder=tmp_path,
        allowed=["ogbn_arxiv"],
    )


def test_meta_checker_knows_the_multilabel_fields(tmp_path, capsys):
    from gnnsys.datasets.meta import read_meta
    from gnnsys.errors import DatasetError

    root = write_proteins(tmp_path / "ogbn_proteins", proteins_arrays())
    assert prepare(capsys, root, tmp_path / "out", "--node-features-from-edges", "mean")[0] == 0
    meta_file = tmp_path / "out" / "meta.json"
    good = json.loads(meta_file.read_text())
    for field, value, message in [
        ("num_tasks", 4, "'labels.num_classes' is 5, but a multilabel dataset has one output per task"),
        ("task", "many", "field 'labels.task' must be one of multiclass, multilabel"),
        ("num_tasks", 0, "field 'labels.num_tasks' must be a positive integer"),
    ]:
        meta = json.loads(json.dumps(good))
        meta["labels"][field] = value
        meta_file.write_text(json.dumps(meta))
        with pytest.raises(DatasetError, match=message):
            read_meta(tmp_path / "out")
    meta = json.loads(json.dumps(good))
    meta["edge_features"]["order"] = "coo"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="field 'edge_features.order' must be 'csc'"):
        read_meta(tmp_path / "out")
