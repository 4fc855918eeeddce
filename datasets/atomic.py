"""Write outputs to a temporary place and rename them into place when
complete, and only where they belong (`output_target`): a new path or a
regular file, or streamed to standard output, a pipe or a FIFO; never over
a device or another kind of file, never inside a gnnsys dataset."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gnnsys.errors import DatasetError


@contextlib.contextmanager
def atomic_directory(target, overwrite: bool = False):
    """Yield a temporary sibling directory of `target`; on success rename it to
    `target`. An existing `target` is refused unless `overwrite`, and is kept
    intact until the new one is complete. On failure the temporary is removed.
    The directory gets the permissions the umask gives a new one."""
    target = Path(os.path.abspath(target))
    if target.exists() and not overwrite:
        raise DatasetError(target, "output already exists (use --overwrite to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_directory(target.parent, f".{target.name}.tmp-")
    try:
        yield tmp
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _new_directory(parent: Path, prefix: str) -> Path:
    """A new empty directory parent/<prefix><random hex>, made with the umask's
    permissions (tempfile.mkdtemp would make it 0700)."""
    while True:
        path = parent / f"{prefix}{secrets.token_hex(6)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


_FD_ALIAS = re.compile(r"/dev/(stdout|stderr)|/dev/fd/(\d+)|/proc/self/fd/(\d+)")
_STD_FDS = {"stdout": 1, "stderr": 2}
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


@dataclass(frozen=True)
class OutputTarget:
    """Where an output named `path` goes: a file written through a
    temporary sibling renamed into place (`fd` and `fifo` unset; `path` the
    file itself, a symlink followed), or a stream written in place: the
    open descriptor `fd` (`/dev/stdout`, `/dev/fd/N`), or the pipe or FIFO
    at `path` (`fifo`)."""

    path: Path
    fd: int | None = None
    fifo: bool = False

    @property
    def streamed(self) -> bool:
        """Whether the bytes are written to a stream rather than a file renamed into place."""
        return self.fd is not None or self.fifo

    def write(self, data) -> None:
        """Write `data` (bytes-like) to the stream, whole."""
        self.write_chunks([data])

    def write_file(self, file, block: int = 1 << 23) -> None:
        """Write the bytes of `file` to the stream, a block at a time."""
        with open(file, "rb") as f:
            self.write_chunks(iter(lambda: f.read(block), b""))

    def write_chunks(self, chunks) -> None:
        """Write each bytes-like of `chunks` to the stream, whole, after what Python buffered for it."""
        if self.fd is not None:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            fd = os.dup(self.fd)
        else:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)  # waits for a FIFO's reader, as a shell's > does
        try:
            for data in chunks:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def output_target(path) -> OutputTarget:
    """Where an output named `path` may go (OutputTarget): a new path or a
    regular file; `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` or
    `/proc/self/fd/N` of an open descriptor, a pipe or a FIFO are streamed
    to. DatasetError naming `path` for anything else that exists (a device,
    a socket, a directory), and for a file inside a gnnsys dataset
    directory (the dataset's own files are never an output)."""
    given = os.path.abspath(path)
    alias = _FD_ALIAS.fullmatch(given)
    if alias:
        fd = _STD_FDS[alias[1]] if alias[1] else int(alias[2] or alias[3])
        try:
            os.fstat(fd)
        except OSError:
            raise DatasetError(path, f"names descriptor {fd}, which is not open") from None
        return OutputTarget(Path(given), fd=fd)
    try:
        mode = os.stat(given).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    if mode is not None and stat.S_ISFIFO(mode):
        return OutputTarget(Path(given), fifo=True)
    for test, kind in _KINDS:
        if mode is not None and test(mode):
            raise DatasetError(
                path, f"is {kind}; an output is written only to a new path, a regular file, a pipe or a FIFO"
            )
    real = Path(os.path.realpath(given))
    dataset = dataset_holding(real.parent)
    if dataset is not None:
        raise DatasetError(path, f"is inside the gnnsys dataset {dataset}; write outputs outside it")
    return OutputTarget(real)


def dataset_holding(folder) -> Path | None:
    """The gnnsys dataset directory that `folder` is or is inside (its real
    path; the nearest), or None."""
    from .meta import is_dataset_dir  # meta imports the array checks, which import this module

    real = Path(os.path.realpath(folder))
    return next((f for f in (real, *real.parents) if is_dataset_dir(f)), None)


def atomic_write_bytes(path, data: bytes, mode: int | None = None) -> Path:
    """Write `data` to the output `path` (output_target): through a
    temporary file, fsynced, given the permission bits `mode` when set, then
    renamed into place; or streamed whole. Returns the file written (the
    path itself for a stream)."""
    target = output_target(path)
    if target.streamed:
        target.write(data)
        return target.path
    path = target.path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def sha256_file(path, block: int = 1 << 23) -> str:
    """Hex sha256 of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()
