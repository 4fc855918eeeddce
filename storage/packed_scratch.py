"""Where packed windows live: a scratch directory of their own, in the
system's temporary directory where it takes O_DIRECT reads, else beside
the dataset (`new_scratch`), and whether a directory takes them (`takes_direct`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gnnsys.errors import ConfigError
from gnnsys.scratch import owned_tempdir

from .direct_io import open_rows_file
from .packing import PAD


def takes_direct(directory) -> bool:
    """Whether files in `directory` can be read with O_DIRECT (a probe file written and removed)."""
    probe = Path(tempfile.mkstemp(prefix=".gnnsys-direct-", dir=directory)[1])
    try:
        probe.write_bytes(bytes(2 * PAD))
        try:
            os.close(open_rows_file(probe, True).fd)
        except ConfigError:
            return False
        return True
    finally:
        probe.unlink(missing_ok=True)


def new_scratch(rows_path: Path) -> tuple[Path, bool]:
    """(a new directory for the windows, whether it takes O_DIRECT): in the
    system's temporary directory where it does, else beside the dataset; named
    after this process, so that a later run removes it if this one is killed
    (gnnsys.scratch)."""
    made = []
    for parent in (tempfile.gettempdir(), rows_path.parent.parent):
        try:
            directory = owned_tempdir("gnnsys-packed-", parent)
        except OSError:
            continue
        if takes_direct(directory):
            for other in made:
                shutil.rmtree(other, ignore_errors=True)
            return directory, True
        made.append(directory)
    if not made:
        raise ConfigError("features", f"'packed' found no writable scratch directory ({tempfile.gettempdir()})")
    for other in made[1:]:
        shutil.rmtree(other, ignore_errors=True)
    return made[0], False
