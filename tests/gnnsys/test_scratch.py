"""gnnsys/scratch.py: a run's scratch directory carries its machine and
process, and a later run removes those of processes that have exited,
never a running one's or another kind's."""

import os
import subprocess
import sys

from gnnsys.scratch import owned_tempdir, owned_temporary_directory, sweep


def exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_new_directory_removes_those_of_exited_processes_only(tmp_path):
    mine = owned_tempdir("gnnsys-packed-", tmp_path)
    assert mine.parent == tmp_path and f"-pid{os.getpid()}-" in mine.name
    dead = tmp_path / mine.name.replace(f"-pid{os.getpid()}-", f"-pid{exited_pid()}-")
    (dead / "window-0000000000-4").mkdir(parents=True)
    (dead / "window-0000000000-4" / "b0000000000.seg").write_bytes(b"x" * 4096)
    other_kind = tmp_path / dead.name.replace("gnnsys-packed-", "gnnsys-inference-")
    other_kind.mkdir()
    unnamed = tmp_path / "gnnsys-packed-abc123"
    unnamed.mkdir()
    newer = owned_tempdir("gnnsys-packed-", tmp_path)
    assert not dead.exists()
    assert mine.is_dir() and newer.is_dir() and other_kind.is_dir() and unnamed.is_dir()
    assert sweep("gnnsys-inference-", tmp_path) == [other_kind]


def test_a_scratch_context_is_removed_with_its_files(tmp_path):
    with owned_temporary_directory("gnnsys-dp-", tmp_path) as path:
        (path / "result.pt").write_bytes(b"1")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_parent_sweeps_nothing(tmp_path):
    assert sweep("gnnsys-packed-", tmp_path / "absent") == []
