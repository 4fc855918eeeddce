"""Per-machine measurements kept as JSON files under $GNNSYS_CACHE_DIR
(default ~/.cache/gnnsys): the I/O probe of a device (storage/io_probe.py),
the CPU's bf16 GEMM benchmark (gnnsys/runtime/cpu_features.py) and the
gather kernel's launch configs a GPU's sweep measured (storage/gather_plan.py).

A cache only saves measuring again, so it never stops a run: a file that is
missing or cannot be read is absent; one that is not valid JSON or fails its
schema check is absent too, with one warning line; one that cannot be
written (a read-only directory, a file where the directory should be, a
name too long) leaves the measurement used uncached, with one warning line.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

from gnnsys import environment
from gnnsys.atomic import atomic_write_bytes
from gnnsys.errors import DatasetError, os_reason

ENV = "GNNSYS_CACHE_DIR"


def cache_dir() -> Path:
    """Where gnnsys keeps per-machine measurements: $GNNSYS_CACHE_DIR, else ~/.cache/gnnsys."""
    return Path(environment.value(ENV) or Path.home() / ".cache" / "gnnsys")


def read_cache(path: Path, check: Callable[[object, Path], None]):
    """The JSON value in `path`, or None when there is none to use: the file
    is missing or unreadable, or (with one warning line) it is not JSON or
    `check(value, path)` raises DatasetError (its schema check)."""
    try:
        text = Path(path).read_bytes()
    except OSError:
        return None
    try:
        value = json.loads(text)
        check(value, path)
    except (ValueError, DatasetError) as e:
        problem = e.problem if isinstance(e, DatasetError) else f"not valid JSON ({e})"
        _warn(f"{path}: {problem}; ignoring this cache and measuring again")
        return None
    return value


def write_cache(path: Path, value) -> bool:
    """Write `value` as JSON to `path` atomically; False, with one warning
    line, where it cannot be written (the measurement stays usable uncached)."""
    try:
        atomic_write_bytes(path, json.dumps(value, indent=1).encode())
    except OSError as e:
        parent = Path(path).parent
        reason = f"{parent} is not a directory" if isinstance(e, FileExistsError) else os_reason(e)
        _warn(f"{path}: cannot write this cache ({reason}); using the measurement without caching it")
        return False
    return True


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)
