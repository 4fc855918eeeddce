"""Faults on every write path, and signals: each ends in one line naming
the path and the reason (its errno name), before the work where it can be
told then; nothing temporary is left and every earlier output is intact.

The OSErrors are injected where the file system would raise them (a probe's
file, the final rename); a real read-only or full tmpfs is mounted where the
test may mount one, and a real unwritable directory is made where the test
does not run as root; those tests skip cleanly otherwise.
"""

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gnnsys.cli import main
from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.errors import ConfigError
from gnnsys.parallel.distributed import WorkerError, run_from_env
from gnnsys.training.checkpoint_lock import checkpoint_lock
from gnnsys.training.checkpoints import FILE, load_training_state, save_checkpoint
from tests.conftest import random_source

FAST = ["--fanouts", "4,3", "--hidden", "8", "--batch-size", "8", "--no-progress"]
ERRNOS = [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.ENAMETOOLONG, errno.ELOOP]
GNNSYS = [sys.executable, "-m", "gnnsys"]
FAST_API = dict(fanouts=[4, 3], hidden=8, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write_dataset(random_source()[0], tmp_path_factory.mktemp("faults") / "ds", PrepareOptions(progress=False))


def run(argv, capsys):
    """(status, stdout, stderr lines) of gnnsys.cli.main(argv)."""
    capsys.readouterr()
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, [line for line in err.splitlines() if line.strip()]


def one_line(err: list, *fragments):
    assert len(err) == 1 and err[0].startswith("gnnsys ") and ": error: " in err[0], err
    assert all(f in err[0] for f in fragments), err[0]


def leftovers(folder: Path) -> list:
    """Temporary or lock files under `folder`."""
    return [p.name for p in folder.rglob("*") if ".tmp-" in p.name or p.name in (".lock",) or "probe" in p.name]


def failing(real, err: int, where: Callable):
    """`real` raising OSError(err) when where(*args, **kwargs) is true."""

    def call(*args, **kwargs):
        if where(*args, **kwargs):
            raise OSError(err, os.strerror(err), str(args[-1] if args else kwargs.get("dir")))
        return real(*args, **kwargs)

    return call


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("flag", ["--checkpoint-dir", "--json"])
def test_unwritable_output_is_refused_before_training(ds, tmp_path, monkeypatch, capsys, err, flag):
    target = tmp_path / "out" / ("ck" if flag == "--checkpoint-dir" else "r.json")
    probe_dir = target if flag == "--checkpoint-dir" else tmp_path  # the nearest existing folder
    monkeypatch.setattr(
        tempfile, "mkstemp", failing(tempfile.mkstemp, err, lambda *a, dir=None, **k: Path(dir) == probe_dir)
    )
    status, out, lines = run(["train", ds, "--epochs", "1", flag, target, *FAST], capsys)
    assert status == 2 and "epoch" not in out  # refused before the first epoch
    one_line(lines, str(target), errno.errorcode[err])
    assert not target.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
def test_checkpoint_that_cannot_be_written_is_one_line(ds, tmp_path, monkeypatch, capsys, err):
    ck = tmp_path / "ck"
    monkeypatch.setattr(os, "replace", failing(os.replace, err, lambda src, dst: Path(dst).name == FILE))
    status, _, lines = run(["train", ds, "--epochs", "2", "--checkpoint-dir", ck, *FAST], capsys)
    assert status == 2
    one_line(lines, str(ck / FILE), "cannot write", errno.errorcode[err])
    assert leftovers(tmp_path) == [] and not ck.exists()  # made by the run, left empty: removed


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
def test_result_json_that_cannot_be_written_is_printed(ds, tmp_path, monkeypatch, capsys, err):
    out = tmp_path / "r.json"
    monkeypatch.setattr(os, "replace", failing(os.replace, err, lambda src, dst: Path(dst) == out))
    status, stdout, lines = run(["train", ds, "--epochs", "2", "--json", out, *FAST], capsys)
    assert status == 2
    one_line(lines, str(out), errno.errorcode[err], "printed on stdout")
    result = json.loads(stdout[stdout.index("\n{") + 1 :])  # after the table: the result is kept
    assert len(result["epochs"]) == 2 and result["config"]["hidden"] == 8
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def trained(ds, tmp_path_factory):
    ck = tmp_path_factory.mktemp("trained") / "ck"
    assert main(["train", str(ds), "--epochs", "1", "--checkpoint-dir", str(ck), *FAST]) == 0
    return ck


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
def test_prediction_that_cannot_be_written_is_one_line(ds, trained, tmp_path, monkeypatch, capsys, err):
    out = tmp_path / "o.npy"
    monkeypatch.setattr(os, "replace", failing(os.replace, err, lambda src, dst: Path(dst) == out))
    status, _, lines = run(["predict", ds, "--checkpoint", trained, "--out", out, "--no-progress"], capsys)
    assert status == 2
    one_line(lines, str(out), "cannot write", errno.errorcode[err])
    assert list(tmp_path.iterdir()) == []


def test_outputs_get_the_umask_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        path = save_checkpoint(tmp_path / "ck", {"epoch": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


def test_checkpoint_lock_names_the_holder_and_leaves_nothing(tmp_path):
    ck = tmp_path / "ck"
    with checkpoint_lock(ck):
        assert (ck / ".lock").read_text().strip() == str(os.getpid())
        with pytest.raises(ConfigError, match=f"in use by another gnnsys run \\(pid {os.getpid()}\\)"):
            with checkpoint_lock(ck):
                pass
    assert not ck.exists()  # made for the run, nothing written: removed with its lock
    ck.mkdir()
    with checkpoint_lock(ck):
        save_checkpoint(ck, {"epoch": 1})
    assert sorted(p.name for p in ck.iterdir()) == [FILE]


@pytest.mark.parametrize(
    "first,second,words",
    [
        ("ck", "ck/run-01", "ck/run-01 is inside {ck}, which another gnnsys run writes checkpoints into"),
        ("ck", "ck/worker0/slot1", "is inside {ck}, which another gnnsys run"),
        ("ck/run-02", "ck", "ck holds {ck}/run-02, which another gnnsys run writes checkpoints into"),
        ("ck/worker0/slot1", "ck", "ck holds {ck}/worker0/slot1, which another gnnsys run"),
    ],
)
def test_the_lock_covers_the_directories_below(tmp_path, first, second, words):
    with checkpoint_lock(tmp_path / first):
        with pytest.raises(ConfigError, match=words.format(ck=tmp_path / "ck")):
            with checkpoint_lock(tmp_path / second):
                pass
        assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob(".lock")] == [f"{first}/.lock"]
    with checkpoint_lock(tmp_path / second), checkpoint_lock(tmp_path / "elsewhere" / "run-01"):
        pass  # free again; and a run's lock holds nothing beside it


def test_runs_side_by_side_in_one_directory_are_not_nested(tmp_path):
    with checkpoint_lock(tmp_path / "ck" / "run-01"), checkpoint_lock(tmp_path / "ck" / "run-02"):
        pass


@pytest.mark.parametrize("link", ["victim", "nothing"])
def test_a_lock_that_is_a_link_is_refused_and_not_followed(tmp_path, link):
    (tmp_path / "ck").mkdir()
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "ck" / ".lock").symlink_to(tmp_path / link)
    with pytest.raises(ConfigError, match="ck/.lock is a symbolic link; a lock file is never followed"):
        with checkpoint_lock(tmp_path / "ck"):
            pass
    assert (tmp_path / "victim").read_text() == "keep" and not (tmp_path / "nothing").exists()


def test_a_job_of_several_runs_holds_their_directories(ds, tmp_path, capsys):
    """While a `--runs 2 --checkpoint-dir ck` job trains, a job for ck/run-01 is refused (it would overwrite run 1)."""
    from gnnsys.trainers.minibatch import train

    ck, second = tmp_path / "ck", []

    def during(record):
        if not second:
            second.append(run(["train", ds, "--epochs", "1", "--checkpoint-dir", ck / "run-01", *FAST], capsys))

    result = train(ds, runs=2, epochs=1, checkpoint_dir=ck, on_epoch_end=during, **FAST_API)
    status, _, lines = second[0]
    assert status == 2
    one_line(lines, f"{ck / 'run-01'} is inside {ck}, which another gnnsys run writes checkpoints into")
    assert len(result.runs) == 2 and sorted(p.name for p in ck.iterdir()) == ["run-01", "run-02"]


def test_a_missing_torchrun_peer_is_one_error_after_the_timeout(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in {
        "TORCHELASTIC_RUN_ID": "r",
        "WORLD_SIZE": "2",
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(WorkerError, match="rendezvous of 2 workers at 127.0.0.1:.* failed within 1 s"):
        run_from_env(print, timeout_s=1)


# -- real file systems ------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(folder: Path, options: str):
    """`folder` as a new tmpfs mounted with `options`; skips the test where it cannot be mounted."""
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip() or made.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_read_only_and_full_file_systems(ds, tmp_path, capsys):
    with tmpfs(tmp_path / "ro", "size=64k,ro") as ro:
        status, out, lines = run(["train", ds, "--epochs", "1", "--checkpoint-dir", ro / "ck", *FAST], capsys)
        assert status == 2 and "epoch" not in out
        one_line(lines, str(ro / "ck"), "(EROFS)")
    with tmpfs(tmp_path / "full", "size=16k") as full:
        with contextlib.suppress(OSError):
            (full / "fill").write_bytes(b"\0" * 32768)  # fills it: ENOSPC part-way
        status, out, lines = run(["train", ds, "--epochs", "1", "--json", full / "r.json", *FAST], capsys)
        assert status == 2 and "epoch" not in out
        one_line(lines, str(full / "r.json"), "(ENOSPC)")
        assert sorted(p.name for p in full.iterdir()) == ["fill"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_unwritable_directory(ds, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    status, _, lines = run(["train", ds, "--epochs", "1", "--checkpoint-dir", locked / "ck", *FAST], capsys)
    assert status == 2
    one_line(lines, str(locked / "ck"), "(EACCES)")


# -- signals ----------------------------------------------------------------------------------------------


def start(argv, cwd):
    return subprocess.Popen(
        [*GNNSYS, *map(str, argv)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(condition, proc, seconds=120):
    end = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def terminate(proc) -> tuple[int, list]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, [line for line in err.splitlines() if line.strip()]


def test_sigterm_during_training_keeps_the_last_checkpoint(ds, tmp_path):
    ck = tmp_path / "ck"
    proc = start(["train", ds, "--epochs", "100000", "--checkpoint-dir", ck, "--eval-every", "1000", *FAST], tmp_path)
    wait_for(lambda: (ck / FILE).exists(), proc)
    time.sleep(0.5)  # a few more epochs, each with its checkpoint write
    status, err = terminate(proc)
    assert status == 128 + signal.SIGTERM, err
    assert err[-2:] == [
        f"gnnsys train: terminated; the last checkpoint is {ck / FILE}; to resume:",
        f"  gnnsys train {ds} --epochs 100000 --checkpoint-dir {ck} --eval-every 1000 {' '.join(FAST)} --resume",
    ]
    assert leftovers(tmp_path) == [] and sorted(p.name for p in ck.iterdir()) == [FILE]
    assert load_training_state(ck)["epoch"] >= 1  # complete and readable


def test_sigterm_during_prepare_leaves_nothing(tmp_path):
    proc = start(
        ["prepare", "synthetic", "--like", "arxiv", "--scale", "0.5", "--no-progress", "--out", "out"], tmp_path
    )
    wait_for(lambda: any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir()), proc)
    status, err = terminate(proc)
    assert status == 128 + signal.SIGTERM and err[-1] == "gnnsys prepare: terminated", err
    assert list(tmp_path.iterdir()) == []


def test_closed_stdout_is_no_error(ds, tmp_path):
    done = subprocess.run(f"{' '.join(GNNSYS)} info {ds} >&-", shell=True, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""


def test_warnings_print_as_one_line():
    from gnnsys.cli import _one_line_warning

    assert (
        _one_line_warning("train")(UserWarning("x: no O_DIRECT"), UserWarning, "f.py", 3)
        == "gnnsys train: warning: x: no O_DIRECT\n"
    )
