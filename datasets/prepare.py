"""The Python form of `gnnsys prepare`: read one input kind, write a dataset.

    prepare_ogb("dataset/ogbn_arxiv", "data/arxiv", reorder="degree")
    prepare_planetoid("data/cora", name="cora")
    prepare_npz("tolokers.npz", "data/tolokers", split_index=0)
    prepare_arrays(out="data/mine", edges="e.npy", features="x.npy", labels="y.npy", random_split="0.6,0.2,0.2")
    prepare_synthetic(out="data/fake-arxiv", like="arxiv", scale=0.1, seed=0)
    prepare_synthetic(out="data/fake-mag", like="mag", scale=0.1)        # heterogeneous: datasets/hetero_writer.py

Each is `write_dataset(read_<kind>(...), out, PrepareOptions(**options))`:
the reader's required arguments come first, then `out`, then keywords that
are either the reader's or PrepareOptions fields (to_undirected, self_loops,
dedup, reorder, align, dtype, overwrite, nan_to_zero, normalize_features,
remap_labels, mem_limit, node_features_from_edges, progress). Readers are imported on first use.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import fields
from pathlib import Path

from .writer import PrepareOptions, write_dataset

_OPTIONS = frozenset(f.name for f in fields(PrepareOptions))


def _signature(reader) -> inspect.Signature:
    """The reader's required positional parameters, then `out`, then every
    other reader parameter and the PrepareOptions fields as keywords."""
    params = list(inspect.signature(reader).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.kind in positional and p.default is inspect.Parameter.empty]
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p not in required]
    options = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default) for f in fields(PrepareOptions)
    ]
    out = inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature(required + [out] + rest + options)


def _preparer(kind: str):
    """prepare_<kind>: bind the call to the reader's signature plus `out` and
    the options, read the source, write the dataset, return its path."""

    def prepare(*args, **kwargs) -> Path:
        reader = getattr(importlib.import_module(f"gnnsys.datasets.{kind}"), f"read_{kind}")
        bound = _signature(reader).bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        out = values.pop("out")
        options = PrepareOptions(**{k: values.pop(k) for k in _OPTIONS})
        return write_dataset(reader(**values), out, options)

    prepare.__name__ = prepare.__qualname__ = f"prepare_{kind}"
    prepare.__doc__ = (
        f"Read a `{kind}` input with gnnsys.datasets.{kind}.read_{kind} and write it to `out` as a gnnsys "
        "dataset (atomically: a temporary directory renamed into place when complete).\n\n"
        "Args:\n"
        f"    *args: read_{kind}'s required arguments, then `out`.\n"
        f"    **kwargs: `out` (the dataset directory to write), the other arguments of read_{kind}, and the "
        "fields of PrepareOptions (how the graph is written: undirected, self-loops, dedup, reorder, align, "
        "dtype, overwrite, progress, ...).\n\n"
        "Returns:\n"
        "    The path of the written dataset."
    )
    return prepare


prepare_ogb = _preparer("ogb")
prepare_planetoid = _preparer("planetoid")
prepare_npz = _preparer("npz")
prepare_arrays = _preparer("arrays")
prepare_synthetic = _preparer("synthetic")

__all__ = ["prepare_arrays", "prepare_npz", "prepare_ogb", "prepare_planetoid", "prepare_synthetic"]
