"""`--random-split TRAIN,VALID,TEST`: a seeded random split of the labelled
nodes, for inputs that carry no split of their own (arrays, gnn-benchmark npz)."""

from __future__ import annotations

import numpy as np

from gnnsys.errors import DatasetError

from .meta import SPLITS


def parse_fractions(text) -> tuple[float, float, float]:
    """ "0.6,0.2,0.2" (or a 3-sequence) -> three fractions >= 0 summing to at most 1."""
    try:
        parts = tuple(float(p) for p in (text.split(",") if isinstance(text, str) else text))
    except (TypeError, ValueError):
        raise DatasetError("--random-split", f"expected three fractions like 0.6,0.2,0.2, got {text!r}") from None
    if len(parts) != 3 or min(parts) < 0 or sum(parts) > 1 + 1e-9:
        raise DatasetError("--random-split", f"expected three fractions >= 0 summing to at most 1, got {text!r}")
    return parts


def split_randomly(labels: np.ndarray, fractions, seed: int = 0) -> dict:
    """A random train/valid/test split of the labelled nodes by `fractions`."""
    fractions = parse_fractions(fractions)
    labelled = np.flatnonzero(labels >= 0)
    perm = np.random.default_rng(seed).permutation(labelled)
    ends = np.cumsum([int(f * labelled.size) for f in fractions])
    return {name: np.sort(perm[a:b]) for name, a, b in zip(SPLITS, (0, *ends[:2]), ends)}
