"""A run holds the dataset it started with.

`load_dataset` records the identity of every file it opens (`FileIdentity`:
device, inode, size and mtime, taken from the file before it is opened and
confirmed after, so a file replaced while it was being loaded is caught).
The arrays it memory-maps stay those files' pages even when the directory is
replaced (`prepare --overwrite` renames a new dataset into place). A reader
that opens a dataset file again later (layer-wise inference reading
features.bin, the SSD tier, a data-parallel worker loading the dataset in
its own process, `--verify`) checks the file it opened against the identity
recorded at load (`check_identity`, on the open descriptor), so a dataset
replaced during a run either stays invisible to it or stops it with one line
naming the file, never mixing the two.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gnnsys.errors import naming
from gnnsys.identity import FileIdentity, check_identity, replaced


class LoadRecord:
    """The identities of the files of one dataset directory as `load_dataset` opens them."""

    def __init__(self, path):
        self.path = Path(path)
        self.files: dict[str, FileIdentity] = {}

    def before(self, name: str) -> None:
        """Record file `name`'s identity before it is opened."""
        with naming(self.path / name, "read"):
            self.files[name] = FileIdentity.of(os.stat(self.path / name))

    def confirm(self, expected: dict | None = None) -> dict:
        """The identities recorded, after checking that every file is still the
        one recorded (and, for a worker, the one its parent loaded: `expected`)."""
        for name, identity in self.files.items():
            check_identity(self.path / name, identity)
            if expected is not None and expected.get(name, identity) != identity:
                raise replaced(self.path / name)
        return dict(self.files)


def check_unchanged(dataset) -> None:
    """DatasetError naming the first file of `dataset` (loaded from a directory) that is no longer the
    one it loaded; nothing for a dataset made in memory."""
    for name, identity in (getattr(dataset, "files", None) or {}).items():
        check_identity(Path(dataset.path) / name, identity)


@dataclass(frozen=True)
class LoadedDataset:
    """A dataset another process opens (a data-parallel worker): its directory
    and the identities of the files its parent loaded (`datasets.as_dataset`
    loads it and refuses files that are not those)."""

    path: str
    files: dict


def dataset_handle(dataset):
    """What to hand a worker process for `dataset`: a LoadedDataset when it was loaded from a directory
    (the worker opens the same files, or stops), else the dataset itself (pickled)."""
    if dataset.path is None or not getattr(dataset, "files", None):
        return dataset
    return LoadedDataset(str(dataset.path), dict(dataset.files))
