"""The tier contract (gnnsys.storage.source) and the stack helpers of storage/base.py."""

import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.storage import FeatureSource, check_stack, stack_host_bytes, tiers
from gnnsys.storage.cache import CachedFeatures, VictimBuffer
from gnnsys.storage.table import RowTable

X = torch.arange(40, dtype=torch.float32).view(20, 2)


class Recorder(FeatureSource):
    """A tier over `base` that records the windows and closes it sees."""

    name = "recorder"

    def __init__(self, base):
        self.base, self.shape, self.dtype = base, base.shape, base.dtype
        self.windows, self.closed = [], 0

    def gather(self, ids, out=None):
        return self.base.gather(ids, out)

    def set_window(self, batches):
        self.windows.append(batches)
        super().set_window(batches)

    def close(self):
        self.closed += 1
        super().close()


def test_defaults_pass_windows_and_close_down_the_stack():
    bottom = Recorder(RowTable.from_tensor(X))
    top = Recorder(bottom)
    ids = torch.tensor([3, 0, 3])
    assert torch.equal(top.gather_async(ids).wait(), X[ids]) and len(top) == 20
    top.set_window([ids])
    assert top.windows == bottom.windows == [[ids]]
    with top:
        pass
    assert (top.closed, bottom.closed) == (1, 1)
    assert top.stats() == {} and top.host_bytes() == {}
    assert [t.name for t in tiers(top)] == ["recorder", "recorder", "rows"]


def test_stack_host_bytes_sums_every_tier_by_name():
    table = RowTable.from_tensor(X)
    cache = CachedFeatures(VictimBuffer(table, 4), 5, "lru")
    held = stack_host_bytes(cache)
    assert held["cache.rows"] == 5 * 8 and held["victim.rows"] == 4 * 8 and held["rows.rows"] == X.numel() * 4
    assert held["cache.policy"] == cache.policy.host_bytes() > 0
    assert held["total"] == sum(v for k, v in held.items() if k != "total")


def test_a_cache_over_a_cache_is_refused():
    cache = CachedFeatures(RowTable.from_tensor(X), 5, "lru")
    with pytest.raises(ConfigError, match="^features: a cache over a cache"):
        CachedFeatures(cache, 5, "lru")
    with pytest.raises(ConfigError, match="^features: a cache over a cache"):
        check_stack(_two_caches())


def _two_caches():
    """Two caches stacked behind the constructor's back (check_stack must still see them)."""
    inner = CachedFeatures(RowTable.from_tensor(X), 5, "lru")
    outer = CachedFeatures(RowTable.from_tensor(X), 5, "lru")
    outer.base = Recorder(inner)
    return outer


def test_a_victim_buffer_away_from_the_cache_is_refused():
    table = RowTable.from_tensor(X)
    assert check_stack(CachedFeatures(VictimBuffer(table, 4), 5, "lru"))
    with pytest.raises(ConfigError, match="victim buffer must sit directly under the cache"):
        check_stack(VictimBuffer(table, 4))
    with pytest.raises(ConfigError, match="victim buffer must sit directly under the cache"):
        check_stack(CachedFeatures(Recorder(VictimBuffer(table, 4)), 5, "lru"))


def test_tiers_of_another_shape_are_refused():
    top = Recorder(RowTable.from_tensor(X))
    top.shape = (21, 2)
    with pytest.raises(ConfigError, match="shapes and dtypes differ"):
        check_stack(top)
