"""gnnsys.storage: every feature tier, from the contract to the store a run reads.

`FeatureSource` is the contract every tier implements and `GatherHandle`
the one handle its asynchronous gathers return (storage/source.py);
`RowTable` (storage/table.py) holds a dataset's rows in memory or
memory-mapped and is the bottom of every stack of tiers; storage/base.py
walks, sizes and checks stacks; `UnifiedTensor` gives `x[ids]` over any
source; `placement.unified` places a table on the GPU, in pinned host memory
(zero-copy Triton gather) or leaves it to the CPU gather; `SSDFeatures`
reads rows from the SSD; `PackedFeatures` trains from batches packed on
disk ahead (storage/packed_source.py); the cache and victim buffer are in
`gnnsys.storage.cache`; `FeatureStore` keys a run's stacks by node type
(storage/store.py, built by `build_store`).
"""

from .base import UnifiedTensor, check_stack, stack_host_bytes, tiers
from .cache import CachedFeatures
from .packed_source import PackedFeatures
from .source import CacheTier, FeatureSource, GatherHandle, VictimTier
from .ssd import SSDFeatures
from .store import HOMOGENEOUS, FeatureStore, build_store
from .table import RowTable

__all__ = [
    "HOMOGENEOUS",
    "CacheTier",
    "CachedFeatures",
    "FeatureSource",
    "FeatureStore",
    "GatherHandle",
    "PackedFeatures",
    "RowTable",
    "SSDFeatures",
    "UnifiedTensor",
    "VictimTier",
    "build_store",
    "check_stack",
    "stack_host_bytes",
    "tiers",
]
