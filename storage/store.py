"""`FeatureStore`: the feature tiers of a run, keyed by node type.

A store maps each node type with features to its stack of tiers (a
FeatureSource, storage/stack_builder.py); a homogeneous graph is the one-key
case, its key `HOMOGENEOUS` (None), as in DGL GraphBolt's and PyG's feature
stores. Trainers, the loader, evaluation and inference read features through
a store, and its counters, host memory and closing serve both kinds of graph
alike. `build_store` builds every key's stack from one set of sizes: the
cache's and victim buffer's rows are shared among the keys in proportion to
their rows, the cache's GB and the host-memory budget in proportion to their
tables' bytes (a key's share of a cache or victim buffer asked for is at
least one row; one key gets the whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from gnnsys.errors import ConfigError

from .base import stack_host_bytes, tiers
from .source import FeatureSource
from .stack_builder import build_stack

HOMOGENEOUS = None  # the key of a homogeneous graph's one table


class FeatureStore(Mapping):
    """{key: FeatureSource stack}: a run's feature tiers (see the module docstring).

    A Mapping of the stacks; also the bottom of each stack (the rows
    inference scans, which would only flush a cache), every tier's counters
    for the progress bar and the epoch records, and close().

    Args:
        stacks: the stacks by key (HOMOGENEOUS for a homogeneous graph, else a node type).
        notes: {key: one line on which tier reads that key's rows from the disk and why (a node type's
            named first)} (out-of-core stacks).
    """

    def __init__(self, stacks: dict, notes: dict | None = None):
        self._stacks = dict(stacks)
        self.notes = {k: n for k, n in (notes or {}).items() if n}

    def __getitem__(self, key) -> FeatureSource:
        return self._stacks[key]

    def __iter__(self) -> Iterator:
        return iter(self._stacks)

    def __len__(self) -> int:
        return len(self._stacks)

    @property
    def homogeneous(self) -> bool:
        """Whether this is a homogeneous graph's store (one key, HOMOGENEOUS)."""
        return list(self._stacks) == [HOMOGENEOUS]

    def bottom(self, key=HOMOGENEOUS) -> FeatureSource:
        """The bottom tier of `key`'s stack: the rows themselves."""
        return list(tiers(self._stacks[key]))[-1]

    def stats(self) -> dict:
        """{key: {tier name: its stats()}} for every tier that counts (cache, victim, ssd)."""
        return {k: {t.name: s for t in tiers(stack) if (s := t.stats())} for k, stack in self._stacks.items()}

    def start_epoch(self, epoch: int) -> None:
        """Tell every stack that training's epoch `epoch` is gathered next."""
        for stack in self._stacks.values():
            stack.start_epoch(epoch)

    def reset_stats(self) -> None:
        """Zero the counters of every tier of every stack (at an epoch's start)."""
        for stack in self._stacks.values():
            for tier in tiers(stack):
                tier.reset_stats()

    def record(self) -> dict:
        """For an epoch record: {"tiers": counters plus "host_bytes" (what the
        tiers hold in host memory now, storage.base.stack_host_bytes)}, those of
        a homogeneous store directly, a keyed store's under each node type;
        {} when no tier counts."""
        counted = {
            k: {**stats, "host_bytes": stack_host_bytes(self._stacks[k])} for k, stats in self.stats().items() if stats
        }
        if not counted:
            return {}
        return {"tiers": counted[HOMOGENEOUS] if self.homogeneous else counted}

    def postfix(self, elapsed_s: float) -> dict:
        """Progress-bar values: each counting tier's hit rate, the SSD's MB/s
        over `elapsed_s`, its read amplification over the rows' payload and the
        times it read the whole file's worth of bytes (a node type's keys
        prefixed "<type>_")."""
        shown = {}
        for key, per_tier in self.stats().items():
            prefix = "" if key is HOMOGENEOUS else f"{key}_"
            for name, s in per_tier.items():
                if "hit_rate" in s:
                    shown[f"{prefix}{name}"] = f"{s['hit_rate']:.0%}"
                if "bytes_read" in s:
                    shown[f"{prefix}{name}_MB_s"] = f"{s['bytes_read'] / 1e6 / max(elapsed_s, 1e-9):,.0f}"
                    shown[f"{prefix}{name}_amp"] = f"{s['read_amplification']:.2f}x"
                    shown[f"{prefix}{name}_file_x"] = f"{s['file_fraction']:.2f}"
        return shown

    def close(self) -> None:
        """Close every stack (threads stopped, files closed)."""
        for stack in self._stacks.values():
            stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def build_store(
    tables: dict,
    *,
    degree: Mapping[object, Callable],
    presample: Mapping[object, Callable] | None = None,
    batch_rows: Mapping[object, int] | None = None,
    features: str = "auto",
    cache_rows: int = 0,
    cache_gb: float | None = None,
    victim_rows: int | None = None,
    host_mem_budget: float | None = None,
    draws: Mapping | None = None,
    scratch_dir=None,
    scratch_gb: float | None = None,
    **options,
) -> FeatureStore:
    """A FeatureStore of one stack per key of `tables`, the run's sizes
    shared among the keys (see the module docstring).

    Args:
        tables: {key: RowTable}.
        degree: {key: a function giving the cache's out-degree score of that
            key's rows}, called only when its policy needs it.
        presample: {key: a function giving the pre-sampled hotness score},
            called only when the policy needs it.
        batch_rows: {key: the rows a batch reads} (the lookahead's memory plan).
        features: a placement ("auto", "gpu", "pinned", "cpu-gather"),
            "ssd" or "packed", which read each table's file, so every table
            must then be memory-mapped (ConfigError otherwise).
        cache_rows: the cache's rows in all (or cache_gb its GB), shared by rows.
        cache_gb: the cache's GB in all, shared by bytes.
        victim_rows: the victim buffer's rows in all (None: a quarter of the cache with a lookahead).
        host_mem_budget: GB of host memory every stack together may hold, shared by bytes.
        draws: {key: a function giving the training batches' draws}
            (gnnsys.loading.batch_draws.BatchDraws), which "packed" packs.
        scratch_dir: where "packed" packs (a subdirectory per key besides
            HOMOGENEOUS; None: a directory of each tier's own).
        scratch_gb: the GB "packed" may hold on disk in all, shared by bytes.
        **options: build_stack's (device, cache_policy, lookahead, progress, ranks, replicate_frac).

    Returns:
        The FeatureStore; on any error every stack built so far is closed.
    """
    rows = {k: t.shape[0] for k, t in tables.items()}
    nbytes = {k: t.shape[0] * t.shape[1] * t.dtype.itemsize for k, t in tables.items()}
    row_share = {k: n / max(sum(rows.values()), 1) for k, n in rows.items()}
    byte_share = {k: n / max(sum(nbytes.values()), 1) for k, n in nbytes.items()}
    share_rows = lambda total, k: None if total is None else max(1, int(total * row_share[k])) if total else 0  # noqa: E731
    share_gb = lambda total, k: None if total is None else total * byte_share[k]  # noqa: E731
    stacks: dict = {}
    notes: dict = {}
    try:
        for key, table in tables.items():
            if features in ("ssd", "packed") and not table.mapped:
                raise ConfigError("features", _held_in_memory(key, features))
            stacks[key], plan = build_stack(
                table,
                features=features,
                degree=degree[key],
                presample=None if presample is None else presample[key],
                cache_rows=share_rows(cache_rows, key),
                cache_gb=share_gb(cache_gb, key),
                victim_rows=share_rows(victim_rows, key),
                host_mem_budget=share_gb(host_mem_budget, key),
                batch_rows=0 if batch_rows is None else batch_rows[key],
                draws=None if draws is None else draws[key],
                scratch_dir=scratch_dir if scratch_dir is None or key is HOMOGENEOUS else Path(scratch_dir) / str(key),
                scratch_gb=share_gb(scratch_gb, key),
                **options,
            )
            notes[key] = plan.note if key is HOMOGENEOUS or not plan.note else f"{key}: {plan.note}"
    except BaseException:
        FeatureStore(stacks).close()
        raise
    return FeatureStore(stacks, notes)


def _held_in_memory(key, features: str) -> str:
    if key is HOMOGENEOUS:
        return f"'{features}' reads a prepared dataset's features.bin; got an in-memory dataset"
    return f"'{features}' reads each node type's features file; {key}'s are held in memory"
