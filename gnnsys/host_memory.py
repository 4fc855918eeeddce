"""What the host has and what this process holds, from /proc (Linux)."""

from __future__ import annotations

import os


def _meminfo_field(path: str, field: str) -> int | None:
    """The value of `field` (kB in the file) as bytes, or None if absent or unreadable."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_host_bytes() -> int:
    """MemAvailable from /proc/meminfo (free RAM plus reclaimable cache)."""
    available = _meminfo_field("/proc/meminfo", "MemAvailable")
    return available if available is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def anonymous_bytes(pid: int | str = "self") -> int:
    """A process's anonymous resident memory now (RssAnon: what it holds
    beyond the page cache of the files it maps; 0 where /proc is missing)."""
    return _meminfo_field(f"/proc/{pid}/status", "RssAnon") or 0
