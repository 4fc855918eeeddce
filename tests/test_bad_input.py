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
fragment text that line (for status 1, stderr) must hold; {ds} and {here} (the
         scratch folder) in it are replaced as in the command.
setup    setup(ds, here) breaks something before the command runs; the
         helpers below make the common breaks (meta_set, meta_drop, meta_text,
         resave, write, arrays_input, gnn_benchmark_npz).
check    check(ds, here), when given, asserts what must hold afterwards.
env      environment variables set while the command runs (torchrun's).

Other bad-input tables stay beside the code they test: the OGB, arrays, npz
and Planetoid readers' (tests/datasets/test_*.py), the in-memory Dataset's
(tests/datasets/test_invariants.py) and the trainer options' (tests/gnnsys/).
"""

import fcntl
import json
import os
import shlex
import socket
import stat
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch

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
    env: dict | None = None


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


def arrays_input(label_change: Callable = lambda y: y, features: Callable = lambda x: x):
    """e.npy, x.npy and y.npy of a 40-node graph for `prepare arrays`, labels and features changed by
    label_change and features."""

    def setup(ds, here):
        a = graph_arrays()
        np.save(here / "e.npy", np.stack([a["src"], a["dst"]], 1))
        np.save(here / "x.npy", features(a["x"]))
        np.save(here / "y.npy", label_change(a["y"].copy()))

    return setup


def gnn_benchmark_npz(ds, here):
    write_gnn_benchmark(here / "g.npz", graph_arrays())


def gnn_benchmark_changed(**changes):
    """g.npz in the gnn-benchmark layout with `changes` (key: function of the stored array) applied."""

    def setup(ds, here):
        arrays = dict(np.load(write_gnn_benchmark(here / "g.npz", graph_arrays())))
        np.savez(here / "g.npz", **{k: changes[k](v) if k in changes else v for k, v in arrays.items()})

    return setup


def heterophilous_npz(ds, here):
    write_heterophilous(here / "h.npz", graph_arrays())


def features_as(kind: str):
    """Replace features.bin with nothing, a directory or a FIFO."""

    def setup(ds, here):
        (ds / "features.bin").unlink()
        if kind == "directory":
            (ds / "features.bin").mkdir()
        elif kind == "FIFO":
            os.mkfifo(ds / "features.bin")

    return setup


def nan_features(ds, here):
    """Every byte of features.bin a float32 NaN (its checksum left stale)."""
    size = (ds / "features.bin").stat().st_size
    (ds / "features.bin").write_bytes(np.full(size // 4, np.nan, np.float32).tobytes())


def split_overlap(ds, here):
    """valid_idx.npy also holds the first training node (its checksum left stale)."""
    np.save(ds / "valid_idx.npy", np.concatenate([np.load(ds / "valid_idx.npy"), np.load(ds / "train_idx.npy")[:1]]))


def checkpoint(payload):
    """ck/checkpoint.pt holding `payload` (what a resume reads)."""

    def setup(ds, here):
        (here / "ck").mkdir()
        torch.save(payload, here / "ck" / "checkpoint.pt")

    return setup


HELD = []  # lock files held open by `held_lock` until the row's check


def held_lock(ds, here, folder="ck"):
    """Another run's lock on the checkpoint directory `folder` (pid 4242)."""
    (here / folder).mkdir(parents=True)
    fd = os.open(here / folder / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242\n")
    HELD.append(fd)


def release_lock(ds, here, folder="ck"):
    """Release `held_lock`; whether ck holds nothing but what held_lock made."""
    os.close(HELD.pop())
    return sorted(p.name for p in (here / "ck").iterdir()) == [".lock" if folder == "ck" else folder.split("/")[1]]


def lock_link(target: str):
    """ck/.lock a symbolic link to `target` (in the scratch folder), whose
    content, when it exists, is "keep"."""

    def setup(ds, here):
        (here / "ck").mkdir()
        (here / "ck" / ".lock").symlink_to(here / target)
        if target == "victim":
            (here / target).write_text("keep")

    return setup


def victim_kept(ds, here):
    return (here / "victim").read_text() == "keep"


def nothing_made(ds, here):
    return not os.path.lexists(here / "nothing")


def meta_kept(ds, here):
    return json.loads((ds / "meta.json").read_text()).get("format") == "gnnsys-dataset"


def char_device(ds, here):
    """here/null a character device: a copy of /dev/null where mknod is
    allowed, else a link to a pseudo-terminal (never /dev/null itself,
    which a regression replacing outputs would replace for the machine)."""
    try:
        os.mknod(here / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        master, slave = os.openpty()
        HELD.extend([master, slave])
        (here / "null").symlink_to(os.ttyname(slave))


def _bound_socket(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def symlink_loop(ds, here):
    (here / "loop").symlink_to("loop")


TORCHRUN = {"TORCHELASTIC_RUN_ID": "r1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _set(array, index, value):
    array[index] = value
    return array


ARRAYS = "prepare arrays --edges e.npy --features x.npy --labels y.npy --random-split 0.5,0.2,0.2 --out out"
ROWS = [
    # prepare: labels
    Row(
        "label 10**9",
        ARRAYS,
        2,
        "1000000001 classes (labels up to 1000000000) for 40 nodes; use --remap-labels",
        arrays_input(lambda y: _set(y, 3, 10**9)),
    ),
    Row(
        "labels far from dense",
        ARRAYS,
        2,
        "only 2 of the 10 classes 0..9 occur; use --remap-labels",
        arrays_input(lambda y: np.where(y > 0, 9, 0)),
    ),
    Row(
        "label below -1",
        ARRAYS,
        2,
        "y.npy: row 5: label -3 out of range (classes are >= 0",
        arrays_input(lambda y: _set(y, 5, -3)),
    ),
    Row(
        "features file missing",
        ARRAYS.replace("x.npy", "nothing.npy"),
        2,
        "argument --features: nothing.npy: no such file or directory",
        arrays_input(),
    ),
    # prepare: options
    Row(
        "--normalize-features col",
        "prepare planetoid --out out --normalize-features col",
        2,
        "argument --normalize-features: invalid choice: 'col'",
    ),
    Row(
        "--align not a power of two",
        "prepare planetoid --out out --align 100",
        2,
        "--align: must be a positive power of two, got 100",
    ),
    Row(
        "--dtype float64",
        "prepare planetoid --out out --dtype float64",
        2,
        "argument --dtype: invalid choice: 'float64'",
    ),
    # prepare: --out and --overwrite
    Row(
        "--overwrite on a user's folder",
        "prepare planetoid --out mine --overwrite",
        2,
        "mine: is neither a gnnsys dataset nor empty; --overwrite replaces only those",
        write("mine", b"years of work", folder=True),
        check=lambda ds, here: (here / "mine" / "thesis.tex").read_bytes() == b"years of work",
    ),
    Row(
        "--overwrite on a file",
        "prepare planetoid --out notes.txt --overwrite",
        2,
        "notes.txt: exists and is not a directory",
        write("notes.txt", b"keep me"),
        check=lambda ds, here: (here / "notes.txt").read_bytes() == b"keep me",
    ),
    Row(
        "--out . --overwrite",
        "prepare planetoid --out . --overwrite",
        2,
        "is the current directory or holds it",
        check=lambda ds, here: list(here.parent.glob(".*")) == [],
    ),
    # prepare npz: the two layouts
    Row(
        "gnn-benchmark npz without a split",
        "prepare npz g.npz --out out",
        2,
        "g.npz holds the gnn-benchmark CSR layout, which stores no split: give --random-split",
        gnn_benchmark_npz,
    ),
    Row(
        "gnn-benchmark npz with --split-index",
        "prepare npz g.npz --split-index 1 --random-split 0.5,0.2,0.2 --out out",
        2,
        "g.npz holds the gnn-benchmark CSR layout, which stores no split; give --random-split",
        gnn_benchmark_npz,
    ),
    Row(
        "gnn-benchmark npz adj_data shorter than adj_indices",
        "prepare npz g.npz --random-split 0.5,0.2,0.2 --out out",
        2,
        "g.npz[adj_data]: holds 159 values for the 160 entries of adj_indices",
        gnn_benchmark_changed(adj_data=lambda d: d[1:]),
    ),
    Row(
        "gnn-benchmark npz complex attr_data",
        "prepare npz g.npz --random-split 0.5,0.2,0.2 --out out",
        2,
        "g.npz[attr_data]: holds complex128 values; features must be real numbers",
        gnn_benchmark_changed(attr_data=lambda d: d.astype(np.complex128)),
    ),
    Row(
        "features with no columns",
        ARRAYS,
        2,
        "x.npy: holds no feature columns; a node needs at least one feature",
        arrays_input(features=lambda x: x[:, :0]),
    ),
    Row(
        "heterophilous npz with --random-split",
        "prepare npz h.npz --random-split 0.5,0.2,0.2 --out out",
        2,
        "h.npz holds the heterophilous layout with its own splits; give --split-index",
        heterophilous_npz,
    ),
    # info: meta.json against its schema
    Row("no dataset", "info nowhere", 2, "argument path: nowhere: no such file or directory"),
    Row("no meta.json", "info d", 2, "d: not a prepared gnnsys dataset (no meta.json)", write("d", folder=True)),
    Row("meta.json not JSON", "info {ds}", 2, "meta.json: row 1: not valid JSON", meta_text("{nodes: 3")),
    Row("meta.json a list", "info {ds}", 2, "meta.json: must hold a JSON object, got list", meta_text("[1, 2]")),
    Row(
        "meta.json of another format",
        "info {ds}",
        2,
        "format is 'other', expected 'gnnsys-dataset'",
        meta_set("format", "other"),
    ),
    Row("meta.json of a newer version", "info {ds}", 2, "field 'version' must be 1, got 2", meta_set("version", 2)),
    Row("num_nodes missing", "info {ds}", 2, "meta.json: field 'num_nodes' is missing", meta_drop("num_nodes")),
    Row(
        "num_nodes a string",
        "info {ds}",
        2,
        "field 'num_nodes' must be a non-negative integer, got \"many\"",
        meta_set("num_nodes", "many"),
    ),
    Row(
        "negative num_edges",
        "info {ds}",
        2,
        "field 'num_edges' must be a non-negative integer, got -5",
        meta_set("num_edges", -5),
    ),
    Row(
        "graph a list",
        "info {ds}",
        2,
        "field 'graph' must be an object, got [\"indptr.npy\"]",
        meta_set("graph", ["indptr.npy"]),
    ),
    Row(
        "unknown feature dtype",
        "info {ds}",
        2,
        "field 'features.dtype' must be one of float32, float16, bfloat16",
        meta_set("features.dtype", "float64"),
    ),
    Row(
        "row stride too short",
        "info {ds}",
        2,
        "field 'features.row_stride' is 8 bytes, less than the 28 bytes",
        meta_set("features.row_stride", 8),
    ),
    Row(
        "file outside the dataset",
        "info {ds}",
        2,
        "field 'labels.file' must be a file name inside the dataset directory, got \"../../etc/passwd\"",
        meta_set("labels.file", "../../etc/passwd"),
    ),
    Row(
        "classes beyond the nodes",
        "info {ds}",
        2,
        "field 'labels.num_classes' is 1000000000, more than the 60 nodes",
        meta_set("labels.num_classes", 10**9),
    ),
    Row(
        "labels.npy of floats",
        "info {ds}",
        2,
        "labels.npy: expected a .npy array of signed integers, got float64",
        resave("labels.npy", lambda y: y.astype(np.float64)),
    ),
    Row(
        "labels.npy not an array",
        "info {ds}",
        2,
        "labels.npy: cannot read",
        lambda ds, here: (ds / "labels.npy").write_bytes(b"\x93NUMPY garbage"),
    ),
    Row(
        "info --verify: an id out of range",
        "info {ds} --verify",
        1,
        "node id 60 out of range [0, 60)",
        resave("indices.npy", lambda ix: _set(ix, 7, 60)),
    ),
    # train: the load-time checks of the arrays (a corrupted graph crashed the process with SIGSEGV)
    Row(
        "indices.npy id out of range",
        "train {ds} --epochs 1",
        2,
        "indices.npy: row 7: node id 60 out of range",
        resave("indices.npy", lambda ix: _set(ix, 7, 60)),
    ),
    Row(
        "indices.npy id out of range, full graph",
        "train {ds} --mode fullgraph --epochs 1",
        2,
        "indices.npy: row 7: node id 1000 out of range [0, 60)",
        resave("indices.npy", lambda ix: _set(ix, 7, 1000)),
    ),
    Row(
        "negative id in indices.npy",
        "train {ds} --epochs 1",
        2,
        "indices.npy: row 0: node id -1 out of range",
        resave("indices.npy", lambda ix: _set(ix, 0, -1)),
    ),
    Row(
        "indptr.npy decreases",
        "train {ds} --epochs 1",
        2,
        "indptr.npy: row 3: decreases from",
        resave("indptr.npy", lambda ip: _set(ip, 3, ip[2] - 1)),
    ),
    Row(
        "indices.npy one id short",
        "train {ds} --epochs 1",
        2,
        "indptr.npy: ends at 400, but indices holds 399",
        resave("indices.npy", lambda ix: ix[:-1]),
    ),
    Row(
        "edge count disagrees with meta.json",
        "train {ds} --epochs 1",
        2,
        "indices.npy: holds 400 ids, meta.json says 401 edges",
        meta_set("num_edges", 401),
    ),
    Row(
        "label beyond the classes",
        "train {ds} --epochs 1",
        2,
        "labels.npy: row 4: label 3 out of range [-1, 3)",
        resave("labels.npy", lambda y: _set(y, 4, 3)),
    ),
    Row(
        "split id out of range",
        "train {ds} --epochs 1",
        2,
        "train_idx.npy: row 0: node id 60 out of range [0, 60)",
        resave("train_idx.npy", lambda ids: _set(ids, 0, 60)),
    ),
    Row(
        "features.bin truncated",
        "train {ds} --epochs 1",
        2,
        "features.bin: size ",
        lambda ds, here: (ds / "features.bin").write_bytes((ds / "features.bin").read_bytes()[:-128]),
    ),
    Row("meta.json without labels", "train {ds} --epochs 1", 2, "field 'labels' is missing", meta_drop("labels")),
    # train: options
    Row("--lr -0.01", "train {ds} --lr -0.01", 2, "--lr: must be > 0, got -0.01"),
    Row("--lr nan", "train {ds} --lr nan", 2, "argument --lr: must be a finite number"),
    Row("--weight-decay -1", "train {ds} --weight-decay -1", 2, "--weight-decay: must be >= 0, got -1.0"),
    Row("--device banana", "train {ds} --device banana", 2, "device: must be cpu, cuda or cuda:N, got 'banana'"),
    Row(
        "--checkpoint-dir naming a file",
        "train {ds} --checkpoint-dir notes.txt",
        2,
        "--checkpoint-dir: notes.txt exists and is not a directory",
        write("notes.txt"),
    ),
    Row("--resume without --checkpoint-dir", "train {ds} --resume", 2, "resume: needs a checkpoint directory"),
    Row("--epochs 0", "train {ds} --epochs 0", 2, "epochs: must be >= 1, got 0"),
    # train: numbers out of their ranges, runs larger than the machine
    Row("--seed -1", "train {ds} --seed -1", 2, "--seed: must be in 0..18446744073709551615, got -1"),
    Row("--seed 2**64", "train {ds} --seed 18446744073709551616", 2, "--seed: must be in 0..18446744073709551615"),
    Row(
        "--fanouts beyond int64",
        "train {ds} --fanouts 99999999999999999999",
        2,
        "fanouts: must be at most 2**31 - 1, got 99999999999999999999",
    ),
    Row("--hidden 100000000", "train {ds} --hidden 100000000", 2, "hidden: this run needs about"),
    Row("--heads 100000", "train {ds} --model gat --heads 100000", 2, "heads: a GAT's hidden layers split hidden"),
    Row("--workers 64", "train {ds} --workers 64", 2, "workers: 64 processes on"),
    Row("--cache-gb below one row", "train {ds} --cache-gb 1e-8", 2, "--cache-gb: 1e-08 GB holds no feature row"),
    Row(
        "--cache-gb below one row, lookahead",
        "train {ds} --cache-gb 1e-8 --lookahead 2",
        2,
        "--cache-gb: 1e-08 GB holds no feature row",
    ),
    Row(
        "info --host-mem-budget nan",
        "info {ds} --host-mem-budget nan",
        2,
        "argument --host-mem-budget: must be a number of GB > 0 and at most 1e+12, got 'nan'",
    ),
    Row("info --host-mem-budget inf", "info {ds} --host-mem-budget inf", 2, "must be a number of GB > 0"),
    Row("info --host-mem-budget -1", "info {ds} --host-mem-budget -1", 2, "must be a number of GB > 0"),
    # train: output paths, checked before training
    Row(
        "--json naming a directory",
        "train {ds} --json here.d",
        2,
        "--json: here.d: is a directory",
        lambda ds, here: (here / "here.d").mkdir(),
    ),
    Row(
        "--json naming a character device",
        "train {ds} --json null",
        2,
        "--json: null: is a character device; an output is written only to a new path, a regular file",
        char_device,
        lambda ds, here: stat.S_ISCHR(os.stat(here / "null").st_mode),
    ),
    Row(
        "--json naming a socket",
        "train {ds} --json sock",
        2,
        "--json: sock: is a socket",
        lambda ds, here: HELD.append(_bound_socket(here / "sock")),
        lambda ds, here: HELD.pop().close() or stat.S_ISSOCK(os.stat(here / "sock").st_mode),
    ),
    Row(
        "--json naming the dataset's meta.json",
        "train {ds} --json {ds}/meta.json",
        2,
        "meta.json: is inside the gnnsys dataset",
        check=meta_kept,
    ),
    Row(
        "--json in a folder inside the dataset",
        "train {ds} --json {ds}/results/r.json",
        2,
        "results/r.json: is inside the gnnsys dataset",
        check=lambda ds, here: not (ds / "results").exists(),
    ),
    Row(
        "--checkpoint-dir inside the dataset",
        "train {ds} --checkpoint-dir {ds}/ck",
        2,
        "--checkpoint-dir: {ds}/ck is inside the gnnsys dataset",
        check=lambda ds, here: not (ds / "ck").exists(),
    ),
    Row(
        "checkpoint lock a symlink",
        "train {ds} --checkpoint-dir ck",
        2,
        "ck/.lock is a symbolic link; a lock file is never followed: remove it",
        lock_link("victim"),
        victim_kept,
    ),
    Row(
        "checkpoint lock a dangling symlink",
        "train {ds} --checkpoint-dir ck",
        2,
        "ck/.lock is a symbolic link",
        lock_link("nothing"),
        nothing_made,
    ),
    Row(
        "checkpoint lock a FIFO",
        "train {ds} --checkpoint-dir ck",
        2,
        "ck/.lock is not a regular file",
        lambda ds, here: (here / "ck").mkdir() or os.mkfifo(here / "ck" / ".lock"),
    ),
    Row(
        "--json under a symlink loop",
        "train {ds} --json loop/r.json",
        2,
        "loop/r.json: cannot write: Too many levels of symbolic links (ELOOP)",
        symlink_loop,
    ),
    Row(
        "--checkpoint-dir under a symlink loop",
        "train {ds} --checkpoint-dir loop/ck",
        2,
        "loop/ck: cannot write: Too many levels of symbolic links (ELOOP)",
        symlink_loop,
    ),
    Row("--json name too long", "train {ds} --json " + "n" * 300, 2, "File name too long (ENAMETOOLONG)"),
    Row(
        "--checkpoint-dir held by another run",
        "train {ds} --checkpoint-dir ck",
        2,
        "--checkpoint-dir: ck is in use by another gnnsys run (pid 4242)",
        held_lock,
        release_lock,
    ),
    Row(
        "--checkpoint-dir inside one another run holds",
        "train {ds} --checkpoint-dir ck/run-01",
        2,
        "--checkpoint-dir: ck/run-01 is inside {here}/ck, which another gnnsys run writes checkpoints into (pid 4242)",
        held_lock,
        release_lock,
    ),
    Row(
        "--runs 2 over a run directory another run holds",
        "train {ds} --runs 2 --checkpoint-dir ck",
        2,
        "--checkpoint-dir: ck holds {here}/ck/run-02, which another gnnsys run writes checkpoints into (pid 4242)",
        lambda ds, here: held_lock(ds, here, "ck/run-02"),
        lambda ds, here: release_lock(ds, here, "ck/run-02"),
    ),
    # train --resume: checkpoints of the wrong shape
    Row(
        "checkpoint a list",
        "train {ds} --checkpoint-dir ck --resume",
        2,
        "is not a gnnsys checkpoint: holds a list, not a dict",
        checkpoint([1, 2]),
    ),
    Row(
        "checkpoint without its entries",
        "train {ds} --checkpoint-dir ck --resume",
        2,
        "is not a gnnsys checkpoint: no 'epoch' entry",
        checkpoint({"weights": torch.zeros(2)}),
    ),
    Row(
        "checkpoint with a negative epoch",
        "train {ds} --checkpoint-dir ck --resume",
        2,
        "is not a gnnsys checkpoint: epoch -3 is negative",
        checkpoint({"epoch": -3, "options": {}, "history": [], "model": {}, "optimizer": {}, "rng": {}, "extra": {}}),
    ),
    # torchrun's variables, checked before any rendezvous
    Row(
        "torchrun without WORLD_SIZE",
        "train {ds}",
        2,
        "WORLD_SIZE: is not set, but TORCHELASTIC_RUN_ID is",
        env={**TORCHRUN, "RANK": "0"},
    ),
    Row(
        "torchrun WORLD_SIZE not a number",
        "train {ds}",
        2,
        "WORLD_SIZE: must be an integer >= 1, got 'two'",
        env={**TORCHRUN, "RANK": "0", "WORLD_SIZE": "two"},
    ),
    Row(
        "torchrun RANK >= WORLD_SIZE",
        "train {ds}",
        2,
        "RANK: must be an integer in 0..1 (below WORLD_SIZE 2)",
        env={**TORCHRUN, "RANK": "2", "WORLD_SIZE": "2"},
    ),
    Row(
        "torchrun MASTER_PORT out of range",
        "train {ds} --mode fullgraph --workers 2",
        2,
        "MASTER_PORT: must be an integer in 1..65535, got '70000'",
        env={**TORCHRUN, "RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"},
    ),
    # files that are not what meta.json says (train and info run the same load-time checks)
    Row(
        "features.bin missing",
        "info {ds}",
        2,
        "features.bin: cannot read: No such file or directory (ENOENT)",
        features_as("nothing"),
    ),
    Row(
        "features.bin a directory",
        "train {ds}",
        2,
        "features.bin: is a directory, not a regular file",
        features_as("directory"),
    ),
    Row("features.bin a FIFO", "info {ds}", 2, "features.bin: is a FIFO, not a regular file", features_as("FIFO")),
    Row(
        "features.bin truncated, info",
        "info {ds}",
        2,
        "features.bin: size ",
        lambda ds, here: (ds / "features.bin").write_bytes((ds / "features.bin").read_bytes()[:-128]),
    ),
    Row("node count disagrees with meta.json, info", "info {ds}", 2, "expected 61 rows", meta_set("num_nodes", 61)),
    Row(
        "class count disagrees with the labels, info",
        "info {ds}",
        2,
        "label 2 out of range [-1, 2)",
        meta_set("labels.num_classes", 2),
    ),
    Row(
        "order.npy named but missing",
        "info {ds}",
        2,
        "order.npy: cannot read: No such file or directory",
        meta_set("order", "order.npy"),
    ),
    Row(
        "row stride far beyond the rows",
        "info {ds}",
        2,
        "field 'features.row_stride' is 1000000 bytes",
        meta_set("features.row_stride", 10**6),
    ),
    Row(
        "meta.json nested 100,000 deep",
        "info {ds}",
        2,
        "meta.json: nested too deeply",
        meta_text("[" * 100_000 + "]" * 100_000),
    ),
    Row(
        "splits overlap, checksums stale",
        "train {ds} --epochs 1",
        2,
        "valid_idx.npy: repeats a node id, or shares one with another split",
        split_overlap,
    ),
    Row(
        "NaN features, checksums stale",
        "train {ds} --epochs 1 --no-progress",
        2,
        "holding NaN or inf; prepare the dataset again with --nan-to-zero",
        nan_features,
    ),
    Row(
        "NaN features, full graph",
        "train {ds} --mode fullgraph --epochs 1 --no-progress",
        2,
        "holding NaN or inf; prepare the dataset again with --nan-to-zero",
        nan_features,
    ),
    Row(
        "info --verify: no checksums",
        "info {ds} --verify",
        1,
        "meta.json: has no checksums to verify",
        meta_drop("checksums"),
    ),
    Row(
        "info --verify: a file without a checksum",
        "info {ds} --verify",
        1,
        "labels.npy: has no checksum",
        lambda ds, here: meta_set(
            "checksums",
            {k: v for k, v in json.loads((ds / "meta.json").read_text())["checksums"].items() if k != "labels.npy"},
        )(ds, here),
    ),
    Row(
        "dtype bfloat16 over float32 rows",
        "info {ds}",
        2,
        "rows of 7 x bfloat16 (14 bytes) aligned to 128 take 16 or 128: the dtype, dim, align or row_stride is wrong",
        meta_set("features.dtype", "bfloat16"),
    ),
    Row(
        "info --verify: dim 6 over 7-column rows (the same 32-byte stride)",
        "info {ds} --verify",
        1,
        "non-zero bytes after the 24 of 6 x float32",
        meta_set("features.dim", 6),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row, tmp_path, monkeypatch, capsys):
    ds = write_dataset(random_source()[0], tmp_path / "ds", PrepareOptions(progress=False))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for name, value in (row.env or {}).items():
        monkeypatch.setenv(name, value)
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
        assert row.fragment.format(ds=ds, here=here) in lines[-1], lines[-1]
    else:
        assert row.fragment in err, err
    assert row.check is None or row.check(ds, here)


def test_rows_have_distinct_ids():
    assert len({r.id for r in ROWS}) == len(ROWS)
