"""The files a run writes on a user's paths (the checkpoint directory, the
result JSON, predictions): probed before the work starts, written atomically
with the permissions the umask gives a new file, and every OSError on them
one PathError line naming the path and the reason (gnnsys.errors.naming)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gnnsys.atomic import atomic_write_bytes
from gnnsys.errors import ConfigError, naming


def check_output_dir(path, option: str) -> Path:
    """`path` made if missing, and a file written, synced and removed in it;
    PathError naming it when that fails (read-only, no permission, full, a
    name too long, a symlink loop), ConfigError(option) when it is a file."""
    path = Path(path)
    with naming(path, "write"):
        if path.exists() and not path.is_dir():
            raise ConfigError(option, f"{path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        _probe(path, ".gnnsys-probe-")
    return path


def check_output_file(path, option: str) -> Path:
    """Whether `write_output` can write `path`, before the work that makes
    it: ConfigError(option) when it is a directory; PathError when its
    nearest existing folder cannot take a file of its name. Makes no folder."""
    path = Path(path)
    with naming(path, "write"):
        if path.is_dir():
            raise ConfigError(option, f"{path} is a directory")
        folder = path.absolute().parent
        while not os.path.lexists(folder):
            folder = folder.parent
        _probe(folder, f".{path.name}.tmp-")
    return path


def _probe(folder: Path, prefix: str):
    """Create a file `prefix`* in `folder`, write and sync a byte, remove it."""
    fd, name = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def write_output(path, data: bytes) -> Path:
    """Write `data` to `path` atomically (a synced temporary sibling renamed
    into place) with the umask's permissions; PathError naming `path`."""
    path = Path(path)
    with naming(path, "write"):
        atomic_write_bytes(path, data)
        os.chmod(path, new_file_mode())
    return path


def new_file_mode() -> int:
    """The permission bits the umask gives a new file (0o666 less the umask)."""
    return 0o666 & ~_umask()


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)  # no /proc: read it by setting it (and back)
        os.umask(mask)
        return mask
