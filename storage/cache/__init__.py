"""gnnsys.storage.cache: a software cache of feature rows over any FeatureSource.

`CachedFeatures(base, capacity, policy=...)` (cached.py) holds the rows;
one policy per file decides which: `static` (top rows by a score), `lru`,
`sieve`, `s3fifo`, `hybrid` (score + recent reuse + the lookahead window of
sampled batches) and `belady` (the offline bound over a recorded trace, for
tests and benchmarks). The interface every policy implements is
`CachePolicy` (policy.py); hotness.py computes the static scores.
`VictimBuffer(base, capacity)` (victim.py) sits between a cache and its base
and keeps the rows the cache evicts that the lookahead window still needs;
`CachedFeatures(..., lookahead_fill=True)` reads the rows of the window's farthest
batch ahead on a thread (lookahead_fill.py). `SharedCachedFeatures` (shared.py)
joins the caches of the ranks of a torch.distributed group into one, each
rank owning a disjoint share of the hot rows (ownership.py).
"""

from .belady import BeladyPolicy
from .cached import POLICIES, RUN_POLICIES, CachedFeatures, make_policy, run_policy
from .hotness import out_degree, presample_hotness
from .hybrid import HybridPolicy
from .lru import LRUPolicy
from .policy import CachePolicy
from .s3fifo import S3FIFOPolicy
from .shared import SharedCachedFeatures
from .sieve import SievePolicy
from .static import PresamplePolicy, StaticPolicy
from .victim import VictimBuffer

__all__ = [
    "BeladyPolicy",
    "CachePolicy",
    "CachedFeatures",
    "HybridPolicy",
    "LRUPolicy",
    "POLICIES",
    "PresamplePolicy",
    "RUN_POLICIES",
    "S3FIFOPolicy",
    "SharedCachedFeatures",
    "SievePolicy",
    "StaticPolicy",
    "VictimBuffer",
    "make_policy",
    "out_degree",
    "presample_hotness",
    "run_policy",
]
