"""What a prepared dataset records about the tool that wrote it."""

from __future__ import annotations


def tool_version() -> str:
    """The installed gnnsys version ("unknown" when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gnnsys")
    except PackageNotFoundError:
        return "unknown"
