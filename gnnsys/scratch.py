"""Scratch directories a run makes for itself (packed windows, inference's
layer outputs, data-parallel rendezvous files), named after the machine and
the process that made them, so that a later run on the machine removes those
a killed process left behind (`owned_tempdir`; a leaf module)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path


def owned_tempdir(prefix: str, parent=None) -> Path:
    """A new directory `prefix`HOST-pidPID-XXXXXXXX in `parent` (default: the
    system's temporary directory), made after `sweep` removed the ones of
    this prefix there whose process has exited."""
    parent = Path(parent or tempfile.gettempdir())
    sweep(prefix, parent)
    return Path(tempfile.mkdtemp(prefix=f"{_owner(prefix)}{os.getpid()}-", dir=parent))


@contextlib.contextmanager
def owned_temporary_directory(prefix: str, parent=None):
    """owned_tempdir(prefix, parent) as a context: removed with everything in it after."""
    path = owned_tempdir(prefix, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep(prefix: str, parent) -> list[Path]:
    """Remove the directories owned_tempdir(`prefix`) made in `parent` on this
    machine for processes that are no longer running; the paths removed."""
    mine = re.compile(re.escape(_owner(prefix)) + r"(\d+)-")
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return []
    removed = []
    for path in entries:
        found = mine.match(path.name)
        if found and path.is_dir() and not path.is_symlink() and not _running(int(found[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner(prefix: str) -> str:
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
    return f"{prefix}{host}-pid"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
