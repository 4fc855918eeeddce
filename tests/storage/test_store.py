"""The FeatureStore (storage/store.py): one stack per key, a homogeneous graph
its one-key case; the gather handle of every tier; the policy registry."""

import pytest
import torch

from gnnsys.errors import ConfigError
from gnnsys.storage import HOMOGENEOUS, GatherHandle, RowTable, build_store
from gnnsys.storage.cache import POLICIES, RUN_POLICIES, PresamplePolicy, StaticPolicy, run_policy

PAPERS = torch.arange(60, dtype=torch.float32).view(20, 3)
AUTHORS = -torch.arange(80, dtype=torch.float32).view(40, 2)


def _degree(n):
    return lambda: torch.arange(n, dtype=torch.float64).numpy()


def test_one_key_store_records_and_shows_its_tiers_as_a_homogeneous_run_did():
    store = build_store({HOMOGENEOUS: RowTable.from_tensor(PAPERS)}, degree={HOMOGENEOUS: _degree(20)}, cache_rows=5)
    ids = torch.tensor([19, 0, 19, 7])
    assert store.homogeneous and torch.equal(store[HOMOGENEOUS].gather(ids), PAPERS[ids])
    record = store.record()["tiers"]
    assert record["cache"]["requested"] == 4 and "host_bytes" in record  # counters at the top level
    assert set(store.postfix(1.0)) == {"cache"}
    assert store.bottom() is store[HOMOGENEOUS].base
    store.reset_stats()
    assert store.stats()[HOMOGENEOUS]["cache"]["requested"] == 0
    store.close()


def test_keyed_store_shares_the_cache_by_rows_and_keys_every_figure_by_type():
    tables = {"paper": RowTable.from_tensor(PAPERS), "author": RowTable.from_tensor(AUTHORS)}
    store = build_store(tables, degree={"paper": _degree(20), "author": _degree(40)}, cache_rows=30)
    assert not store.homogeneous and set(store) == {"paper", "author"}
    assert store["paper"].policy.capacity == 10 and store["author"].policy.capacity == 20  # 30 rows by 20:40 rows
    store["author"].gather(torch.tensor([1, 2]))
    record = store.record()["tiers"]
    assert record["author"]["cache"]["requested"] == 2 and record["paper"]["cache"]["requested"] == 0
    assert {"paper_cache", "author_cache"} <= set(store.postfix(1.0))
    with store:
        assert torch.equal(store.bottom("author").gather(torch.tensor([3])), AUTHORS[[3]])


def test_an_in_memory_table_is_refused_for_the_ssd_tier_naming_its_type():
    tables = {"paper": RowTable.from_tensor(PAPERS)}
    with pytest.raises(ConfigError, match="^features: 'ssd' reads each node type's features file; paper's are held"):
        build_store(tables, degree={"paper": _degree(20)}, features="ssd")
    with pytest.raises(ConfigError, match="^features: 'ssd' reads a prepared dataset's features.bin"):
        build_store({HOMOGENEOUS: tables["paper"]}, degree={HOMOGENEOUS: _degree(20)}, features="ssd")


def test_a_failed_build_closes_what_it_built():
    closed = []
    first = RowTable.from_tensor(PAPERS)
    first.close = lambda: closed.append("paper")

    def broken():
        raise RuntimeError("no score for authors")

    tables = {"paper": first, "author": RowTable.from_tensor(AUTHORS)}
    with pytest.raises(RuntimeError, match="no score"):
        build_store(tables, degree={"paper": _degree(20), "author": broken}, cache_rows=6)
    assert closed == ["paper"]  # the paper stack was built, then closed down to its table


def test_a_gather_handle_holds_rows_or_their_future():
    rows = torch.ones(2, 3)
    done = GatherHandle(rows)
    assert done.wait() is rows and done.check() is rows and done.done()
    future = torch.futures.Future()
    pending = GatherHandle(future=future)
    assert not pending.done()
    future.set_result(rows)
    assert pending.done() and pending.check() is rows
    with pytest.raises(ValueError):
        GatherHandle()


def test_one_registry_names_every_policy_and_what_a_run_may_take():
    assert set(RUN_POLICIES) == set(POLICIES) - {"belady"}
    assert run_policy("presample") is PresamplePolicy and issubclass(PresamplePolicy, StaticPolicy)
    assert {name: POLICIES[name].scored_by for name in ("static", "presample", "hybrid", "belady")} == {
        "static": "degree",
        "presample": "presample",
        "hybrid": "presample",
        "belady": "trace",
    }
    with pytest.raises(ConfigError, match="^cache_policy: must be one of static, presample, lru"):
        run_policy("lfu")
