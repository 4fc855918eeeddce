"""Exact layer-wise inference and `gnnsys predict`: streaming per-conv arithmetic, scratch rows, predictions."""
