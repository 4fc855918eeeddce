"""Write outputs to a temporary place and rename them into place when complete."""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import tempfile
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


def atomic_write_bytes(path, data: bytes):
    """Write `data` to `path` through a temporary file, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path, block: int = 1 << 23) -> str:
    """Hex sha256 of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()
