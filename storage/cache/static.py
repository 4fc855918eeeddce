"""`static`: a fixed set of rows, the top ones by a score, never replaced.

With out-degree as the score it is PaGraph's cache (`static`); with hotness
counted by pre-sampling (hotness.presample_hotness) it is GNNLab's
(`presample`).
"""

from __future__ import annotations

from gnnsys.errors import ConfigError

from .policy import CachePolicy


class StaticPolicy(CachePolicy):
    """Holds the `capacity` top-scored rows (a score is required); misses stream past."""

    name = "static"

    def __init__(self, capacity: int, num_nodes: int, score=None):
        if score is None:
            raise ConfigError("score", "the static policy needs a score (out-degree or presample hotness)")
        super().__init__(capacity, num_nodes, score)

    def _access(self, ids):
        slot = self.slot_of[ids]
        return slot >= 0, slot

    def _place(self, ids):
        return self._place_direct(ids)


class PresamplePolicy(StaticPolicy):
    """The static policy over the hotness of pre-sampled epochs (GNNLab)."""

    name = "presample"
    scored_by = "presample"
