"""`hybrid` (after LSM-GNN): eviction weighs the static score, recent reuse
and each row's next use within the lookahead window of batches already
sampled. The window comes from whoever samples ahead (a loader or a
lookahead fill) through `set_window`; without one the policy ranks rows by score
and recent reuse only.
"""

from __future__ import annotations

import numpy as np

from gnnsys.errors import ConfigError

from .policy import CachePolicy


class HybridPolicy(CachePolicy):
    """After each batch keeps the `capacity` rows (cached or just fetched)
    expected to be needed soonest: a row whose next use is batch d of the
    window (d = 1 is the next batch) ranks by d, a row the window does not
    use ranks after every row it does, by 1 / p. p, a row's chance of being
    in a batch, blends `prior_weight` x score / max(score) with (1 -
    prior_weight) x an exponential average (rate `decay`) of its recent
    batches; within one d, higher p ranks first. A score is required.
    """

    name = "hybrid"
    scored_by = "presample"
    node_bytes = 16  # prior (float32), ema, last (int32)

    def __init__(self, capacity: int, num_nodes: int, score=None, prior_weight: float = 0.5, decay: float = 0.1):
        if score is None:
            raise ConfigError("score", "the hybrid policy needs a score (out-degree or presample hotness)")
        if not 0 <= prior_weight <= 1:
            raise ConfigError("prior_weight", f"must be in [0, 1], got {prior_weight}")
        if not 0 < decay <= 1:
            raise ConfigError("decay", f"must be in (0, 1], got {decay}")
        super().__init__(capacity, num_nodes, score)
        top = self.score.max(initial=0.0)
        self._prior = (self.score / top if top > 0 else self.score).astype(np.float32)
        self._weight = float(prior_weight)
        self._keep = 1.0 - float(decay)
        self._decay = float(decay)
        self._ema = np.zeros(self.num_nodes, np.float64)
        self._last = np.zeros(self.num_nodes, np.int32)

    def _keys(self, ids: np.ndarray) -> np.ndarray:
        """Rank of rows `ids` (smaller = keep), at the current batch."""
        ema = self._ema[ids] * self._keep ** (self.batches - self._last[ids])
        p = np.maximum(self._weight * self._prior[ids] + (1 - self._weight) * ema, 1e-12)
        d = self.next_use(ids)
        return np.where(d > 0, d - 0.5 * p, self.window_size + 1 + 1 / p)

    def _access(self, ids):
        slot = self.slot_of[ids]
        hit = slot >= 0
        self._ema[ids] = self._ema[ids] * self._keep ** (self.batches - self._last[ids]) + self._decay
        self._last[ids] = self.batches
        miss = np.flatnonzero(~hit)
        slot_keys = self._keys(np.maximum(self.id_of, 0))
        slot[miss] = self._replace_by_key(ids[miss], self._keys(ids[miss]), slot_keys)
        return hit, slot

    def _place(self, ids):
        return self._place_direct(ids)
