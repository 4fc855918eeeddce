"""Counter-based random draws (splitmix64) for sampling kernels.

Every draw is a pure function of (stream, node, draw index), where the stream
key mixes (seed, epoch, batch, layer). A sample therefore does not depend on
the number of threads, on scheduling, or on what was drawn before, which is
what lets a resumed run reproduce an uninterrupted one (docs/architecture.md, "Sampling randomness").
"""

from __future__ import annotations

import numba
import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


@numba.njit(inline="always", nogil=True, cache=True)
def mix64(z):
    """The splitmix64 finaliser of a uint64 (a bijection with full avalanche)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always", nogil=True, cache=True)
def node_key(stream, node):
    """The key of one node's draws within `stream` (both uint64-convertible)."""
    return mix64(np.uint64(stream) ^ mix64(np.uint64(node) + _GOLDEN))


@numba.njit(inline="always", nogil=True, cache=True)
def draw_below(key, index, n):
    """Draw number `index` of `key`: an integer uniform in [0, n) for 0 < n < 2**32
    (multiply-shift of the top 32 bits; bias below n / 2**32)."""
    h = mix64(key + np.uint64(index + 1) * _GOLDEN)
    return np.int64(((h >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@numba.njit(nogil=True, cache=True)
def _fold(key, counter):
    return mix64((key ^ counter) + _GOLDEN)


def stream_key(*counters: int) -> int:
    """A uint64 stream key folded from non-negative counters, e.g.
    (seed, epoch, batch, layer); distinct tuples give unrelated streams."""
    key = np.uint64(0)
    for c in counters:
        if not 0 <= c <= _MASK64:
            raise ValueError(f"stream counters must be in [0, 2**64), got {counters}")
        key = np.uint64(_fold(key, np.uint64(c)))
    return int(key)
