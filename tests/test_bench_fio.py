"""benchmarks/helpers.py's fio reference: its buffers are huge pages where a
hugetlbfs mount has room for them, and the result says which."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import helpers  # noqa: E402

MEMINFO = "MemTotal: 100 kB\nHugePages_Total: {total}\nHugePages_Free: {free}\nHugepagesize: 2048 kB\n"


def proc_files(tmp_path, free: int, mount: str | None):
    meminfo, mounts = tmp_path / "meminfo", tmp_path / "mounts"
    meminfo.write_text(MEMINFO.format(total=free, free=free))
    lines = ["proc /proc proc rw 0 0"] + ([f"none {mount} hugetlbfs rw,pagesize=2M 0 0"] if mount else [])
    mounts.write_text("\n".join(lines) + "\n")
    return str(meminfo), str(mounts)


@pytest.mark.parametrize(
    "free,mounted,nbytes,found",
    [(32, True, 8 << 20, True), (5, True, 8 << 20, False), (32, False, 8 << 20, False), (6, True, 8 << 20, True)],
)
def test_a_hugetlbfs_mount_is_used_only_where_its_free_pages_hold_the_buffers(tmp_path, free, mounted, nbytes, found):
    mount = tmp_path / "huge"
    mount.mkdir()
    meminfo, mounts = proc_files(tmp_path, free, str(mount) if mounted else None)
    assert helpers.huge_page_dir(nbytes, meminfo, mounts) == (str(mount) if found else None)


@pytest.mark.parametrize("huge", [True, False])
def test_fio_reads_into_huge_pages_where_there_is_room_and_says_so(monkeypatch, tmp_path, huge):
    monkeypatch.setattr(helpers, "huge_page_dir", lambda nbytes: str(tmp_path) if huge else None)
    ran = []
    read = {"iops": 10.0, "bw_bytes": 3e9, "clat_ns": {"mean": 2000.0}}

    def run(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "fio-3\n" + json.dumps({"jobs": [{"read": read}]}), "")

    monkeypatch.setattr(helpers.subprocess, "run", run)
    result = helpers.fio("features.bin", 8 << 20, 1, "psync", 1.0, rw="read")
    mem = [arg for arg in ran[0] if arg.startswith("--mem=")]
    assert mem == ([f"--mem=mmaphuge:{tmp_path}/gnnsys-fio-{os.getpid()}"] if huge else [])
    assert result["buffers"] == ("huge pages" if huge else "small pages") and result["mb_per_s"] == 3000.0
