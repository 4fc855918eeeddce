"""XXH3-64 (seed 0) of a packed file's content: the packed tier's check
that a file is the one its manifest describes (storage/packing.py). It comes
from the `xxhash` package (the reference C implementation, which releases the
GIL), at about memcpy's speed, which matters because every packed byte is
digested twice (written, then read back). A digest may be fed in pieces:
`Digest().update(a).update(b).value()` is the digest of a + b.
"""

from __future__ import annotations

import numpy as np
import xxhash


class Digest:
    """A running XXH3-64 (seed 0) of content fed in pieces."""

    def __init__(self):
        self._state = xxhash.xxh3_64()

    def update(self, data) -> Digest:
        """Feed `data` (any contiguous buffer)."""
        self._state.update(np.frombuffer(data, np.uint8))
        return self

    def value(self) -> int:
        """The XXH3-64 of everything fed."""
        return self._state.intdigest()


def digest(data) -> int:
    """The XXH3-64 (seed 0) of `data` (any contiguous buffer)."""
    return Digest().update(data).value()
