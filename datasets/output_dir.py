"""The output directory of `gnnsys prepare`: whether it may be written."""

from __future__ import annotations

import os
from pathlib import Path

from gnnsys.atomic import is_dataset_dir, restore_replaced
from gnnsys.errors import DatasetError


def check_output(out_dir, overwrite: bool):
    """DatasetError unless `out_dir` may be written: it does not exist, or
    `overwrite` is set and it is a gnnsys dataset or an empty directory (and
    not the current directory, which renaming would pull from under the shell).
    A dataset that an interrupted --overwrite of `out_dir` left aside is put
    back first (restore_replaced)."""
    out_dir = Path(os.path.abspath(out_dir))
    restore_replaced(out_dir)  # a dataset an interrupted --overwrite left aside comes back first
    if not out_dir.exists():
        return
    if not overwrite:
        raise DatasetError(out_dir, "output already exists (use --overwrite to replace it)")
    if not out_dir.is_dir():
        raise DatasetError(
            out_dir, "exists and is not a directory; --overwrite replaces only a gnnsys dataset or an empty directory"
        )
    if Path.cwd().resolve().is_relative_to(out_dir.resolve()):
        raise DatasetError(out_dir, "is the current directory or holds it; give an --out elsewhere")
    if not is_dataset_dir(out_dir) and any(out_dir.iterdir()):
        raise DatasetError(
            out_dir,
            "is neither a gnnsys dataset nor empty; --overwrite replaces only those, so its files are left alone",
        )
