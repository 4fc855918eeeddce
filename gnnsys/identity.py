"""What tells one file from another at the same path (a leaf): a dataset
file's identity recorded at load, and the check every reader that reopens
the file makes against it (datasets/file_identity.py says how a run holds
its dataset)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gnnsys.errors import DatasetError, naming


@dataclass(frozen=True)
class FileIdentity:
    """What tells one file from another at the same path: device, inode, size, mtime (ns)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity an os.stat / os.fstat result describes."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def replaced(file) -> DatasetError:
    """The one line of a dataset file that is not the one the run loaded."""
    return DatasetError(
        file,
        "was replaced or changed since this run loaded the dataset; stopped rather than mix the old dataset with "
        "the new one (run again on the dataset as it is now)",
    )


def check_identity(file, recorded: FileIdentity | None, fd: int | None = None) -> None:
    """DatasetError(file) unless the file (open as `fd`, else at its path now) is
    the one `recorded` at load; nothing to check when `recorded` is None (a table made in memory)."""
    if recorded is None:
        return
    with naming(file, "read"):
        st = os.fstat(fd) if fd is not None else os.stat(file)
    if FileIdentity.of(st) != recorded:
        raise replaced(file)
