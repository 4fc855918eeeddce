"""The files a run writes on a user's paths (the checkpoint directory, the
result JSON, predictions): probed before the work starts, written atomically
with the permissions the umask gives a new file, or streamed to standard
output, a pipe or a FIFO (gnnsys.atomic.output_target: nothing
else is replaced, nothing inside a dataset written), and every OSError on
them one PathError line naming the path and the reason (gnnsys.errors.naming)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gnnsys.atomic import OutputTarget, atomic_write_bytes, dataset_holding, output_target
from gnnsys.errors import ConfigError, DatasetError, naming


def check_output_dir(path, option: str) -> Path:
    """`path` made if missing, and a file written, synced and removed in it;
    PathError naming it when that fails (read-only, no permission, full, a
    name too long, a symlink loop), ConfigError(option) when it is a file
    or is, or is inside, a gnnsys dataset directory."""
    path = Path(path)
    with naming(path, "write"):
        if path.exists() and not path.is_dir():
            raise ConfigError(option, f"{path} exists and is not a directory")
        dataset = dataset_holding(path)
        if dataset is not None:
            raise ConfigError(option, f"{path} is inside the gnnsys dataset {dataset}; write outputs outside it")
        path.mkdir(parents=True, exist_ok=True)
        _probe(path, ".gnnsys-probe-")
    return path


def check_output_file(path, option: str) -> OutputTarget:
    """Where `write_output` would write `path` (output_target), checked
    before the work that makes it: ConfigError(option) when it is anything
    but a new path, a regular file, standard output, a pipe or a FIFO, or
    is inside a gnnsys dataset; PathError when the nearest existing folder
    of a file cannot take a file of its name. Makes no folder."""
    path = Path(path)
    with naming(path, "write"):
        try:
            target = output_target(path)
        except DatasetError as e:
            raise ConfigError(option, str(e)) from None
        if target.streamed:
            return target
        folder = target.path.parent
        while not os.path.lexists(folder):
            folder = folder.parent
        _probe(folder, f".{path.name}.tmp-")
    return target


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
    """Write `data` to the output `path` (atomic_write_bytes: a regular file
    through a synced temporary sibling renamed into place, with the umask's
    permissions; standard output, a pipe or a FIFO streamed); `path`.
    DatasetError naming `path` when it is not an output's place
    (output_target), PathError when the write fails."""
    path = Path(path)
    with naming(path, "write"):
        atomic_write_bytes(path, data, new_file_mode())
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
