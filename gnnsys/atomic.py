"""Write outputs to a temporary place and rename them into place when
complete, and only where they belong (`output_target`): a new path or a
regular file, or streamed to standard output, a pipe or a FIFO; never over
a device or another kind of file, never inside a gnnsys dataset."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from gnnsys.errors import DatasetError

DATASET_FORMAT = "gnnsys-dataset"  # meta.json's "format" of a prepared dataset (datasets/meta_schema.py's FORMAT)


@contextlib.contextmanager
def atomic_directory(target, overwrite: bool = False):
    """Yield a temporary sibling directory of `target`; on success rename it to
    `target`. An existing `target` is refused unless `overwrite`, and is kept
    intact until the new one is complete, then swapped for it
    (`replace_directory`: in one step where the system can, else restored on
    any failure). On failure the temporary is removed. The directory gets
    the permissions the umask gives a new one."""
    target = Path(os.path.abspath(target))
    if target.exists() and not overwrite:
        raise DatasetError(target, "output already exists (use --overwrite to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_directory(target.parent, f".{target.name}.tmp-")
    try:
        yield tmp
        if target.exists():
            replace_directory(tmp, target)  # tmp then holds the old one, removed below
        else:
            os.replace(tmp, target)
    finally:
        if tmp.is_symlink():  # what an exchange with a link named `target` left
            tmp.unlink()
        elif tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h)
_AT_FDCWD = -100


def replace_directory(new: Path, target: Path):
    """Put the directory `new` in the place of the existing `target`, so that
    `target` is always one of the two, whole: swapped in one step
    (renameat2 RENAME_EXCHANGE: `new` then names the old directory, for the
    caller to remove); where the system or file system cannot, `target` is
    first moved into a hidden `.NAME.old-*` sibling, and put back on any
    failure (an interrupt included) of the second rename. A crash between
    the two leaves it there, where `restore_replaced` finds it."""
    if exchange(new, target):
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    kept = old / target.name
    try:
        os.replace(target, kept)
        os.replace(new, target)
    except BaseException as e:
        if not os.path.lexists(target) and os.path.lexists(kept):  # wherever the failure came, the old goes back
            try:
                os.replace(kept, target)
            except OSError as again:
                raise DatasetError(
                    target,
                    f"could not be replaced ({e}) nor put back ({again}): the old dataset is in {kept}; "
                    "the next gnnsys prepare or info of this path puts it back",
                ) from e
        raise
    finally:
        if os.path.lexists(new):  # not replaced: `old` is empty unless the old could not go back
            with contextlib.suppress(OSError):
                old.rmdir()
        else:  # replaced (an interrupt after the second rename included): the old one goes
            shutil.rmtree(old, ignore_errors=True)


def exchange(a, b) -> bool:
    """Swap the directory entries `a` and `b` in one atomic step (Linux's
    renameat2 with RENAME_EXCHANGE); False, changing nothing, where the C
    library, the kernel or the file system does not offer it."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(b))


@functools.cache
def _renameat2():
    """The C library's renameat2, or None (not Linux, or glibc before 2.28)."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def restore_replaced(target) -> Path | None:
    """When `target` is missing and a replacement of it was cut short after
    its first step (`replace_directory` without an atomic exchange: a crash,
    a power cut), put back the old directory kept in a hidden
    `.NAME.old-*` sibling, and say so (a warning); returns the folder it
    came from, or None."""
    target = Path(os.path.abspath(target))
    if os.path.lexists(target):
        return None
    for old in sorted(target.parent.glob(f".{glob.escape(target.name)}.old-*")):
        kept = old / target.name
        if kept.is_dir() and not kept.is_symlink():
            os.replace(kept, target)
            with contextlib.suppress(OSError):
                old.rmdir()
            warnings.warn(f"{target}: put back the dataset an interrupted --overwrite had left in {old}", stacklevel=2)
            return old
    return None


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


def is_dataset_dir(path) -> bool:
    """Whether `path` holds a meta.json that names itself a gnnsys dataset
    (whatever else it holds: a damaged dataset is still one); outputs are never written inside one."""
    file = Path(path) / "meta.json"
    try:
        meta = json.loads(file.read_text()) if file.is_file() else None  # never read a FIFO
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("format") == DATASET_FORMAT
