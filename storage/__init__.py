"""gnnsys.storage: feature sources (placements) and their gather kernels.

`FeatureSource` is the contract every tier implements
(gnnsys/feature_source.py, exported here; storage/base.py walks, sizes and
checks stacks of tiers); `UnifiedTensor` gives `x[ids]` over any source;
`placement.unified` places a table on the GPU, in pinned host memory
(zero-copy Triton gather) or leaves it to the CPU gather.
`RowTable` (the dataset's memory-mapped table, gnnsys.datasets) is the bottom
of every stack of sources.
"""

from gnnsys.datasets.feature_table import RowTable

from .base import FeatureSource, UnifiedTensor, check_stack, stack_host_bytes, tiers
from .cache import CachedFeatures
from .ssd import SSDFeatures

__all__ = [
    "CachedFeatures",
    "FeatureSource",
    "RowTable",
    "SSDFeatures",
    "UnifiedTensor",
    "check_stack",
    "stack_host_bytes",
    "tiers",
]
