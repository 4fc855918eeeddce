"""`gnnsys prepare ogb` on tiny directories in ogbn-mag's exact raw layout
(OGB's read_csv_heterograph_raw), the heterogeneous format it writes, and
its bad input."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.datasets import HeteroDataset, csc_file, load_dataset
from gnnsys.datasets.inspect import verify
from tests.datasets.conftest import assert_fails, graph_arrays, run_cli, write_ogb

COUNTS = {"author": 13, "field_of_study": 5, "institution": 4, "paper": 11}
RELATIONS = {
    ("author", "affiliated_with", "institution"): 15,
    ("author", "writes", "paper"): 30,
    ("paper", "cites", "paper"): 25,
    ("paper", "has_topic", "field_of_study"): 22,
}


def mag_arrays(seed=0):
    """Edges of each relation (with a repeat and a reciprocal citation), paper
    features exact as text, labels with two NaN (unlabelled) papers, years, a time split."""
    rng = np.random.default_rng(seed)
    edges = {}
    for (s, r, d), e in RELATIONS.items():
        src, dst = rng.integers(0, COUNTS[s], e), rng.integers(0, COUNTS[d], e)
        edges[(s, r, d)] = (src, dst)
    src, dst = edges[("paper", "cites", "paper")]
    src[1], dst[1] = dst[0], src[0]  # 0 -> 1 and 1 -> 0: one undirected pair, not two
    y = rng.integers(0, 4, COUNTS["paper"]).astype(float)
    y[[3, 9]] = np.nan
    return {
        "edges": edges,
        "x": (rng.integers(-1000, 1000, (COUNTS["paper"], 5)) / 64).astype(np.float32),
        "y": y,
        "year": 2000 + np.arange(COUNTS["paper"]),
        "train": np.array([0, 1, 2, 4, 5]),
        "valid": np.array([6, 7]),
        "test": np.array([8, 10]),
    }


def _table(path: Path, rows, gz: bool):
    """`rows` (lists of values) as CSV text at path (.csv.gz when gz, else .csv)."""
    path = path.with_name(path.name + (".csv.gz" if gz else ".csv"))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(str(v) for v in row) + "\n" for row in rows).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def write_mag(root, a, gz=True, years=True):
    """An OGB directory in ogbn-mag's raw layout holding `a` (files OGB ships
    that gnnsys does not need are written too: edge_reltype, nodetype-has-label/split)."""
    root = Path(root)
    raw = root / "raw"
    _table(raw / "num-node-dict", [list(COUNTS), list(COUNTS.values())], gz)
    _table(raw / "triplet-type-list", [list(t) for t in a["edges"]], gz)
    for k, (relation, (src, dst)) in enumerate(a["edges"].items()):
        folder = raw / "relations" / "___".join(relation)
        _table(folder / "edge", zip(src, dst), gz)
        _table(folder / "num-edge-list", [[len(src)]], gz)
        _table(folder / "edge_reltype", [[k]] * len(src), gz)
    _table(raw / "node-feat" / "paper" / "node-feat", [[f"{v:.10g}" for v in row] for row in a["x"]], gz)
    if years:
        _table(raw / "node-feat" / "paper" / "node_year", [[v] for v in a["year"]], gz)
    _table(raw / "node-label" / "paper" / "node-label", [["nan" if np.isnan(v) else int(v)] for v in a["y"]], gz)
    _table(raw / "nodetype-has-label", [list(COUNTS), [t == "paper" for t in COUNTS]], gz)
    split = root / "split" / "time"
    _table(split / "nodetype-has-split", [list(COUNTS), [t == "paper" for t in COUNTS]], gz)
    for s in ("train", "valid", "test"):
        _table(split / "paper" / s, [[i] for i in a[s]], gz)
    return root


def mapped_file(address: int) -> str | None:
    """The file mapped at `address` in this process (/proc/self/maps), None for anonymous memory."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address < hi:
            return fields[5] if len(fields) == 6 else None
    return None


def edge_pairs(ds: HeteroDataset, relation) -> list:
    """The (src, dst) pairs a relation stores, sorted."""
    data = ds.to_pyg()
    return sorted(map(tuple, data[relation].edge_index.T.tolist()))


def prepare(capsys, root, out, *options):
    status, stdout, err = run_cli(capsys, "prepare", "ogb", root, "--out", out, "--no-progress", *options)
    assert status == 0, err
    return stdout


@pytest.mark.parametrize("gz", [True, False])
def test_round_trip_with_reverse_relations(tmp_path, capsys, small_chunks, gz):
    a = mag_arrays()
    root = write_mag(tmp_path / "ogbn_mag", a, gz=gz)
    stdout = prepare(capsys, root, tmp_path / "out")
    assert "heterogeneous, target paper" in stdout and "paper__to__author" in stdout
    ds = load_dataset(tmp_path / "out")
    assert isinstance(ds, HeteroDataset) and ds.node_types == COUNTS and ds.target == "paper"
    assert torch.equal(ds.features["paper"][torch.arange(COUNTS["paper"])], torch.from_numpy(a["x"]))
    assert set(ds.features) == {"paper"} and ds.features["paper"].mapped
    assert mapped_file(ds.features["paper"].table.ctypes.data) == str(tmp_path / "out" / "paper.features.bin")
    assert torch.equal(ds.labels, torch.from_numpy(np.where(np.isnan(a["y"]), -1, a["y"]).astype(np.int64)))
    assert ds.num_classes == 4 and torch.equal(ds.node_years["paper"], torch.from_numpy(a["year"]))
    for s in ("train", "valid", "test"):
        assert ds.split(s).tolist() == a[s].tolist()
    for relation in [("author", "affiliated_with", "institution"), ("author", "writes", "paper")]:
        src, dst = a["edges"][relation]
        assert edge_pairs(ds, relation) == sorted(zip(src.tolist(), dst.tolist()))
        reverse = (relation[2], "to", relation[0])
        assert edge_pairs(ds, reverse) == sorted(zip(dst.tolist(), src.tolist()))
    src, dst = a["edges"][("paper", "cites", "paper")]
    both = set(zip(src.tolist(), dst.tolist())) | set(zip(dst.tolist(), src.tolist()))
    assert edge_pairs(ds, ("paper", "cites", "paper")) == sorted(both)  # undirected, repeats removed
    for name, tensor in zip(("indptr", "indices"), ds.relations[("paper", "cites", "paper")]):
        assert mapped_file(tensor.data_ptr()) == str(tmp_path / "out" / f"paper__cites__paper.{name}.npy")
    assert ds.relations[("author", "writes", "paper")][1].dtype == torch.int32
    meta = ds.meta
    assert meta["kind"] == "hetero" and meta["reverse_relations"] == {"added": True, "names": "ogb"}
    by_name = {(r["src"], r["rel"], r["dst"]): r for r in meta["relations"]}
    assert by_name[("paper", "to", "author")]["reverse_of"] == ["author", "writes", "paper"]
    assert by_name[("paper", "cites", "paper")]["undirected"] and by_name[("paper", "cites", "paper")]["deduplicated"]
    assert len(meta["relations"]) == 7 and meta["source"]["split"] == "time"
    assert f"raw/relations/author___writes___paper/edge.csv{'.gz' if gz else ''}" in meta["source"]["inputs"]
    assert verify(tmp_path / "out") == []


def test_pyg_names_and_no_reverse(tmp_path, capsys):
    a = mag_arrays()
    root = write_mag(tmp_path / "ogbn_mag", a)
    prepare(capsys, root, tmp_path / "pyg", "--reverse-names", "pyg")
    ds = load_dataset(tmp_path / "pyg")
    assert ("paper", "rev_writes", "author") in ds.relations and ("paper", "to", "author") not in ds.relations
    assert ds.meta["reverse_relations"] == {"added": True, "names": "pyg"}
    prepare(capsys, root, tmp_path / "plain", "--add-reverse-relations", "no")
    ds = load_dataset(tmp_path / "plain")
    assert ds.edge_types == list(RELATIONS) and ds.meta["reverse_relations"] == {"added": False, "names": None}
    src, dst = a["edges"][("paper", "cites", "paper")]
    assert edge_pairs(ds, ("paper", "cites", "paper")) == sorted(zip(src.tolist(), dst.tolist()))


def test_options_apply_to_every_part(tmp_path, capsys):
    a = mag_arrays()
    src, dst = a["edges"][("paper", "cites", "paper")]
    src[5], dst[5] = 4, 4  # a self-loop
    writes_src, writes_dst = a["edges"][("author", "writes", "paper")]
    writes_src[7], writes_dst[7] = writes_src[6], writes_dst[6]  # a repeated edge
    root = write_mag(tmp_path / "ogbn_mag", a, years=False)
    prepare(capsys, root, tmp_path / "out", "--dtype", "float16", "--align", "512", "--dedup", "--self-loops", "drop")
    ds = load_dataset(tmp_path / "out")
    f = ds.meta["node_types"]["paper"]["features"]
    assert (f["dtype"], f["row_stride"], f["align"]) == ("float16", 16, 512)
    assert torch.equal(ds.features["paper"][torch.arange(COUNTS["paper"])], torch.from_numpy(a["x"]).half())
    assert (4, 4) not in edge_pairs(ds, ("paper", "cites", "paper"))
    assert edge_pairs(ds, ("author", "writes", "paper")) == sorted(set(zip(writes_src.tolist(), writes_dst.tolist())))
    assert ds.node_years == {} and "node_year" not in ds.meta["node_types"]["paper"]  # optional in the input
    assert verify(tmp_path / "out") == []


def test_buckets_write_the_same_bytes(tmp_path, capsys, monkeypatch):
    a = mag_arrays()
    root = write_mag(tmp_path / "ogbn_mag", a)
    prepare(capsys, root, tmp_path / "one")
    monkeypatch.setattr(csc_file, "anonymous_bytes", lambda: 0)
    monkeypatch.setattr(csc_file, "CHUNK_MARGIN", 0)
    monkeypatch.setattr(csc_file, "SPILL_PIECE", 7)
    prepare(capsys, root, tmp_path / "spilled", "--mem-limit", "1.6e-7")  # 160 bytes: a few nodes' lists per bucket
    one, spilled = (json.loads((tmp_path / d / "meta.json").read_text()) for d in ("one", "spilled"))
    spilled_relations = {n for n, b in spilled["source"]["graph_build"]["relations"].items() if b["buckets"] > 1}
    assert spilled_relations == {r["src"] + "__" + r["rel"] + "__" + r["dst"] for r in one["relations"]} - {
        "author__affiliated_with__institution"  # 15 edges into 4 institutions: 128 bytes, one bucket
    }
    assert all(b["buckets"] == 1 for b in one["source"]["graph_build"]["relations"].values())
    assert one["checksums"] == spilled["checksums"]
    for name in one["checksums"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "spilled" / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "spilled").iterdir()) == sorted([*one["checksums"], "meta.json"])


def test_verify_catches_a_corrupt_relation(tmp_path, capsys):
    root = write_mag(tmp_path / "ogbn_mag", mag_arrays())
    prepare(capsys, root, tmp_path / "out")
    status, stdout, _ = run_cli(capsys, "info", tmp_path / "out", "--verify", "--json")
    summary = json.loads(stdout[: stdout.rindex("}") + 1])
    assert status == 0 and summary["kind"] == "hetero" and summary["placement"]["table_bytes"] == 11 * 32
    indices = tmp_path / "out" / "author__writes__paper.indices.npy"
    data = bytearray(indices.read_bytes())
    data[-1] ^= 0x01
    indices.write_bytes(bytes(data))
    status, _, err = run_cli(capsys, "info", tmp_path / "out", "--verify")
    assert status == 1 and f"{indices}: checksum mismatch" in err


def _edit(path: Path, edit):
    """Rewrite a gzipped CSV through `edit(lines) -> lines`."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress(("\n".join(edit(lines)) + "\n").encode()))


def _bad_width(raw):
    _edit(raw / "node-feat/paper/node-feat.csv.gz", lambda lines: [*lines[:4], lines[4] + ",1.5", *lines[5:]])


def _short_features(raw):
    _edit(raw / "node-feat/paper/node-feat.csv.gz", lambda lines: lines[:-1])


def _unknown_type(raw):
    _edit(raw / "triplet-type-list.csv.gz", lambda lines: [*lines[:-1], "paper,has_topic,venue"])
    shutil.move(raw / "relations/paper___has_topic___field_of_study", raw / "relations/paper___has_topic___venue")


def _mixed_layout(raw):
    (raw / "edge.csv.gz").write_bytes(gzip.compress(b"0,1\n"))


def _id_out_of_range(raw):
    _edit(raw / "relations/author___writes___paper/edge.csv.gz", lambda lines: [*lines[:3], "13,0", *lines[4:]])


def _unlisted_relation(raw):
    shutil.copytree(raw / "relations/paper___cites___paper", raw / "relations/paper___cited_by___paper")


def _both_compressions(raw):
    shutil.copy(raw / "num-node-dict.csv.gz", raw / "num-node-dict.csv")


def _bad_year_count(raw):
    _edit(raw / "node-feat/paper/node_year.csv.gz", lambda lines: lines[:-2])


def _wrong_edge_count(raw):
    _edit(raw / "relations/paper___cites___paper/num-edge-list.csv.gz", lambda lines: ["26"])


@pytest.mark.parametrize(
    "damage,words",
    [
        (_bad_width, ["node-feat.csv.gz", "row 4", "6 fields, expected 5"]),
        (_short_features, ["node-feat.csv.gz", "10 feature rows for 11 nodes"]),
        (_unknown_type, ["triplet-type-list.csv.gz", "row 3", "unknown destination node type 'venue'"]),
        (_mixed_layout, ["raw", "mixes the heterogeneous layout", "edge.csv.gz"]),
        (_id_out_of_range, ["author___writes___paper/edge.csv.gz", "row 3", "node id 13 out of range [0, 13)"]),
        (_unlisted_relation, ["paper___cited_by___paper", "triplet-type-list does not list"]),
        (_both_compressions, ["num-node-dict.csv.gz and num-node-dict.csv"]),
        (_bad_year_count, ["node_year.csv.gz", "9 rows", "11 paper nodes"]),
        (_wrong_edge_count, ["num-edge-list.csv.gz", "says 26 edges", "holds 25"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, damage, words):
    root = write_mag(tmp_path / "ogbn_mag", mag_arrays())
    damage(root / "raw")
    result = run_cli(capsys, "prepare", "ogb", root, "--out", tmp_path / "out", "--no-progress")
    assert_fails(result, *words, folder=tmp_path, allowed=["ogbn_mag"])


@pytest.mark.parametrize(
    "options,words",
    [
        (["--add-inverse-edges", "yes"], ["--add-inverse-edges", "--add-reverse-relations"]),
        (["--to-undirected"], ["--to-undirected", "--add-reverse-relations"]),
        (["--reorder", "degree"], ["--reorder", "heterogeneous"]),
        (["--add-reverse-relations", "no", "--reverse-names", "pyg"], ["--reverse-names", "is no"]),
    ],
)
def test_options_that_do_not_apply_are_refused(tmp_path, capsys, options, words):
    root = write_mag(tmp_path / "ogbn_mag", mag_arrays())
    result = run_cli(capsys, "prepare", "ogb", root, "--out", tmp_path / "out", "--no-progress", *options)
    assert_fails(result, *words, folder=tmp_path, allowed=["ogbn_mag"])


@pytest.mark.parametrize("option", [["--add-reverse-relations", "yes"], ["--reverse-names", "ogb"]])
def test_reverse_options_are_refused_for_a_homogeneous_directory(tmp_path, capsys, option):
    root = write_ogb(tmp_path / "ogbn_arxiv", graph_arrays())
    result = run_cli(capsys, "prepare", "ogb", root, "--out", tmp_path / "out", *option)
    assert_fails(result, option[0], "heterogeneous", folder=tmp_path, allowed=["ogbn_arxiv"])


def test_a_reverse_name_already_taken_is_refused(tmp_path, capsys):
    a = mag_arrays()
    a["edges"][("paper", "to", "author")] = (np.arange(4), np.arange(4))  # the ogb name of writes' reverse
    root = write_mag(tmp_path / "ogbn_mag", a)
    result = run_cli(capsys, "prepare", "ogb", root, "--out", tmp_path / "out", "--no-progress")
    assert_fails(result, "--reverse-names", "paper__to__author", "pyg", folder=tmp_path, allowed=["ogbn_mag"])
    prepare(capsys, root, tmp_path / "out", "--reverse-names", "pyg")
    assert ("paper", "rev_writes", "author") in load_dataset(tmp_path / "out").relations


@pytest.mark.parametrize("gz", [True, False])
def test_a_relation_with_no_edges_is_prepared_verified_and_trained_on(tmp_path, capsys, gz):
    a = mag_arrays()
    none = np.empty(0, np.int64)
    a["edges"][("author", "affiliated_with", "institution")] = (none, none)
    root = write_mag(tmp_path / "ogbn_mag", a, gz=gz)  # an empty edge file, and a count of 0
    stdout = prepare(capsys, root, tmp_path / "out")
    assert "author__affiliated_with__institution: 0 edges" in stdout
    ds = load_dataset(tmp_path / "out")
    indptr, indices = ds.relations[("author", "affiliated_with", "institution")]
    assert indptr.tolist() == [0] * (COUNTS["institution"] + 1) and indices.numel() == 0
    assert edge_pairs(ds, ("institution", "to", "author")) == [] and verify(tmp_path / "out") == []
    if not gz:
        return
    argv = ["--fanouts", "3,3", "--hidden", "8", "--batch-size", "4", "--no-progress", "--epochs", "1"]
    status, stdout, err = run_cli(capsys, "train", tmp_path / "out", *argv, "--checkpoint-dir", tmp_path / "ck")
    assert status == 0, err
    status, _, err = run_cli(
        capsys, "predict", tmp_path / "out", "--checkpoint", tmp_path / "ck", "--out", tmp_path / "p.npy"
    )
    assert status == 0, err
    assert np.load(tmp_path / "p.npy").shape == (COUNTS["paper"], 4)


def test_an_empty_edge_file_with_a_nonzero_count_is_refused(tmp_path, capsys):
    a = mag_arrays()
    root = write_mag(tmp_path / "ogbn_mag", a)
    folder = root / "raw" / "relations" / "author___affiliated_with___institution"
    (folder / "edge.csv.gz").write_bytes(gzip.compress(b""))
    status, _, err = run_cli(capsys, "prepare", "ogb", root, "--out", tmp_path / "out", "--no-progress")
    assert status == 2 and "says 15 edges, but" in err and "edge.csv.gz holds 0" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
