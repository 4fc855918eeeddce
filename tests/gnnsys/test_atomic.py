"""Outputs go only where they belong (output_target: a new path or a
regular file renamed into place; standard output, a pipe or a FIFO streamed;
nothing else replaced, nothing inside a dataset written), and `prepare
--overwrite`'s swap never loses both datasets (injected failures at each
step, interrupts, and a crash's leftover put back by the next prepare or info)."""

import errno
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from gnnsys import atomic
from gnnsys.atomic import atomic_directory, atomic_write_bytes, output_target, restore_replaced
from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.errors import DatasetError
from tests.conftest import random_source
from tests.datasets.conftest import run_cli

# -- output_target and atomic_write_bytes -------------------------------------------------


def test_new_path_and_regular_file_are_renamed_into_place(tmp_path):
    out = tmp_path / "sub" / "r.json"
    assert atomic_write_bytes(out, b"one", 0o640) == out
    assert out.read_bytes() == b"one" and stat.S_IMODE(out.stat().st_mode) == 0o640
    before = out.stat().st_ino
    atomic_write_bytes(out, b"two")
    assert out.read_bytes() == b"two" and out.stat().st_ino != before  # a new file, renamed over the old
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]


def test_a_link_to_a_file_writes_its_target_and_stays_a_link(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    atomic_write_bytes(tmp_path / "link.json", b"new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def _read_fifo(path, into: list):
    with open(path, "rb") as f:
        into.append(f.read())


def test_a_fifo_is_streamed_to_not_replaced(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=_read_fifo, args=(fifo, got), daemon=True)
    reader.start()
    target = output_target(fifo)
    assert target.streamed
    atomic_write_bytes(fifo, b"x" * 300_000)  # more than a pipe's buffer
    reader.join(10)
    assert got == [b"x" * 300_000]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("alias", ["/dev/fd/{w}", "/proc/self/fd/{w}"])
def test_a_pipe_named_by_its_descriptor_is_streamed(alias):
    r, w = os.pipe()
    try:
        assert output_target(alias.format(w=w)).fd == w
        atomic_write_bytes(alias.format(w=w), b"through the pipe")
        os.close(w)
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
        if w >= 0:
            with pytest.raises(OSError):
                os.fstat(w)  # closed above: the writer closed only its own duplicate


def test_dev_stdout_is_streamed_after_what_python_buffered(capfd):
    print("first", end="")
    atomic_write_bytes("/dev/stdout", b" second\n")
    assert capfd.readouterr().out == "first second\n"


def test_a_descriptor_that_is_not_open_is_refused():
    with pytest.raises(DatasetError, match=r"/dev/fd/987: names descriptor 987, which is not open"):
        output_target("/dev/fd/987")


def _char_device(folder: Path) -> Path:
    """A character device in `folder`: a copy of /dev/null where mknod is allowed, else a pty's (by a link)."""
    path = folder / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        _, slave = os.openpty()
        path.symlink_to(os.ttyname(slave))
    return path


@pytest.mark.parametrize("kind", ["a character device", "a socket", "a directory"])
def test_anything_else_is_refused_and_kept(tmp_path, kind):
    keep = None
    if kind == "a character device":
        path = _char_device(tmp_path)
    elif kind == "a socket":
        path, keep = tmp_path / "sock", socket.socket(socket.AF_UNIX)
        keep.bind(str(path))
    else:
        path = tmp_path / "d"
        path.mkdir()
    before = os.stat(path)
    with pytest.raises(DatasetError, match=f"{path}: is {kind}; an output is written only to a new path"):
        atomic_write_bytes(path, b"data")
    assert os.stat(path).st_mode == before.st_mode and os.stat(path).st_ino == before.st_ino
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary left
    if keep is not None:
        keep.close()


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(random_source()[0], tmp_path / "ds", PrepareOptions(progress=False))


@pytest.mark.parametrize("inside", ["meta.json", "labels.npy", "new.json", "sub/deeper/r.json"])
def test_paths_inside_a_dataset_are_refused(dataset, inside):
    before = {p.name: p.read_bytes() for p in dataset.iterdir()}
    with pytest.raises(DatasetError, match=f"is inside the gnnsys dataset {dataset}; write outputs outside it"):
        atomic_write_bytes(dataset / inside, b"data")
    assert {p.name: p.read_bytes() for p in dataset.iterdir()} == before


def test_a_link_into_a_dataset_is_refused(dataset, tmp_path):
    (tmp_path / "out.json").symlink_to(dataset / "meta.json")
    with pytest.raises(DatasetError, match="is inside the gnnsys dataset"):
        atomic_write_bytes(tmp_path / "out.json", b"data")


def test_a_folder_with_another_meta_json_is_no_dataset(tmp_path):
    (tmp_path / "meta.json").write_text('{"format": "something else"}')
    atomic_write_bytes(tmp_path / "r.json", b"ok")
    assert (tmp_path / "r.json").read_bytes() == b"ok"


# -- prepare --overwrite: the swap -----------------------------------------------------


def _overwrite(out: Path):
    """Replace the directory `out` (holding "old") by one holding "new", through atomic_directory."""
    with atomic_directory(out, overwrite=True) as tmp:
        (tmp / "new").write_text("new")


@pytest.fixture
def old(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("old")
    return out


def _only(out: Path, name: str):
    """`out` holds just `name`, and nothing hidden is left beside it."""
    assert [p.name for p in out.iterdir()] == [name]
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_overwrite_swaps_in_one_step(old):
    calls = []
    real = atomic.exchange
    atomic.exchange = lambda a, b: calls.append((a, b)) or real(a, b)
    try:
        _overwrite(old)
    finally:
        atomic.exchange = real
    assert len(calls) == 1
    _only(old, "new")


def test_a_failed_exchange_changes_nothing(old, monkeypatch):
    def fail(a, b):
        raise OSError(errno.EIO, "Input/output error", str(b))

    monkeypatch.setattr(atomic, "exchange", fail)
    with pytest.raises(OSError, match="Input/output error"):
        _overwrite(old)
    _only(old, "old")


@pytest.mark.parametrize("unsupported", [errno.EINVAL, errno.ENOSYS])
def test_an_unsupported_exchange_falls_back_to_two_renames(old, monkeypatch, unsupported):
    def renameat2(*args):
        import ctypes

        ctypes.set_errno(unsupported)
        return -1

    monkeypatch.setattr(atomic, "_renameat2", lambda: renameat2)
    _overwrite(old)
    _only(old, "new")


def _failing_replace(monkeypatch, step: int, error: BaseException, after: bool = False):
    """os.replace raising `error` at its `step`-th call (from 1) of the
    fallback swap; `after`: once that rename is done (an interrupt that
    arrives just after it returned)."""
    real, count = os.replace, [0]

    def replace(a, b):
        count[0] += 1
        if count[0] == step and not after:
            raise error
        real(a, b)
        if count[0] == step:
            raise error

    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    monkeypatch.setattr(atomic.os, "replace", replace)


@pytest.mark.parametrize(
    "step,after",
    [(1, False), (1, True), (2, False), (2, True)],
    ids=["moving the old aside", "just after moving it", "moving the new in", "just after moving it in"],
)
@pytest.mark.parametrize(
    "error", [OSError(errno.EIO, "Input/output error"), KeyboardInterrupt()], ids=["EIO", "Ctrl-C"]
)
def test_a_failed_fallback_swap_keeps_one_whole_dataset(old, monkeypatch, step, after, error):
    _failing_replace(monkeypatch, step, error, after)
    with pytest.raises(type(error)):
        _overwrite(old)
    monkeypatch.undo()
    _only(old, "new" if (step, after) == (2, True) else "old")  # once the new one is in place, it stays


def test_when_the_old_cannot_be_put_back_the_next_run_does(old, monkeypatch, capsys):
    real = os.replace
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    calls = [0]

    def replace(a, b):
        calls[0] += 1
        if calls[0] >= 2:
            raise OSError(errno.EIO, "Input/output error")
        real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(
        DatasetError, match=r"could not be replaced .* nor put back .*: the old dataset is in .*\.out\.old-"
    ):
        _overwrite(old)
    monkeypatch.undo()
    assert not old.exists()
    with pytest.warns(UserWarning, match="put back the dataset an interrupted --overwrite had left in"):
        assert restore_replaced(old) is not None
    _only(old, "old")


def _crash_leftover(tmp_path) -> Path:
    """A dataset `ds` as a crash between the fallback swap's two renames leaves it: in .ds.old-*/ds."""
    ds = write_dataset(random_source()[0], tmp_path / "ds", PrepareOptions(progress=False))
    (tmp_path / ".ds.old-abc123").mkdir()
    os.replace(ds, tmp_path / ".ds.old-abc123" / "ds")
    return ds


def test_info_puts_back_a_dataset_a_crash_left_aside(tmp_path, capsys):
    ds = _crash_leftover(tmp_path)
    with pytest.warns(UserWarning, match=f"{ds}: put back the dataset an interrupted --overwrite had left in "):
        status, out, _ = run_cli(capsys, "info", ds)
    assert status == 0 and "nodes" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_prepare_puts_back_a_dataset_a_crash_left_aside(tmp_path, capsys):
    ds = _crash_leftover(tmp_path)
    with pytest.warns(UserWarning, match="put back the dataset"):
        status, _, err = run_cli(capsys, "prepare", "planetoid", "--name", "cora", "--out", ds, "--no-progress")
    assert status == 2 and "output already exists" in err  # back, and not replaced unasked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"] and (ds / "meta.json").is_file()


def test_an_existing_output_is_never_restored_over(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / ".ds.old-abc").mkdir()
    (tmp_path / ".ds.old-abc" / "ds").mkdir()
    assert restore_replaced(tmp_path / "ds") is None
    assert (tmp_path / ".ds.old-abc" / "ds").is_dir()
