"""gnnsys.storage: feature sources (placements), gather kernels, caches."""
from .base import FeatureSource, UnifiedTensor
from .mmap_features import RowTable

__all__ = ["FeatureSource", "RowTable", "UnifiedTensor"]
