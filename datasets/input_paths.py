"""Paths a command reads (a dataset, a checkpoint, an input file): one check,
so that a missing one is named the same way everywhere, "PATH: no such file
or directory" (`input_path`, the argparse type of every such argument, and
the dataset loader's own check)."""

from __future__ import annotations

import argparse
import os

NO_SUCH_PATH = "no such file or directory"


def is_missing(path) -> bool:
    """Whether nothing is at `path` (a dangling symlink, or a path through a
    file, included); a path that cannot be looked at for another reason (no
    permission, a loop) is not missing: opening it names that reason."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False


def input_path(text: str) -> str:
    """argparse type of a path a command reads: refused with "TEXT: no such
    file or directory" when nothing is there."""
    if is_missing(text):
        raise argparse.ArgumentTypeError(f"{text}: {NO_SUCH_PATH}")
    return text
