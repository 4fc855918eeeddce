"""`gnnsys info` for a heterogeneous dataset: its summary and `--verify`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .class_balance import class_balance
from .file_checks import loaded_problems, padding_problem
from .finite_rows import nonfinite_problem
from .hetero_dataset import HeteroDataset
from .hetero_meta import data_files
from .meta import HETERO, SPLITS
from .relations import relation_name


def summarize_hetero(ds: HeteroDataset) -> dict:
    """Per node type its count, features and node years; per relation its
    edges, in-degree statistics over its destination type and what it
    reverses; split sizes and class balance of the target; the source."""
    meta = ds.meta
    relations = []
    for section in meta["relations"]:
        relation = (section["src"], section["rel"], section["dst"])
        degree = np.diff(ds.relations[relation][0].numpy())
        relations.append(
            {
                "name": relation_name(relation),
                "num_edges": section["num_edges"],
                "in_degree": {
                    "mean": float(degree.mean()) if degree.size else 0.0,
                    "max": int(degree.max()) if degree.size else 0,
                    "zero": int((degree == 0).sum()),
                },
                "reverse_of": section["reverse_of"],
                "undirected": section["undirected"],
            }
        )
    labels = ds.labels.numpy()
    return {
        "kind": HETERO,
        "name": meta["name"],
        "node_types": meta["node_types"],
        "relations": relations,
        "target": ds.target,
        "splits": {s: int(ds.split(s).shape[0]) for s in SPLITS},
        "classes": {
            "num_classes": ds.num_classes,
            "task": ds.task,
            "counts": np.bincount(labels[labels >= 0], minlength=ds.num_classes).tolist(),
            "unlabelled": int((labels < 0).sum()),
        },
        "reverse_relations": meta.get("reverse_relations", {}),
        "source": meta.get("source", {}),
    }


def format_hetero_summary(s: dict) -> str:
    """The heterogeneous summary as aligned text lines."""
    lines = [f"dataset      {s['name']}  ({s['source'].get('kind', '?')}, heterogeneous, target {s['target']})"]
    for node_type, section in s["node_types"].items():
        f = section["features"]
        feats = f"features {f['dim']} x {f['dtype']}, row stride {f['row_stride']} B" if f else "no features"
        year = ", node years" if "node_year" in section else ""
        lines.append(f"node type    {node_type}: {section['num_nodes']:,} nodes, {feats}{year}")
    for r in s["relations"]:
        how = (
            f"reverse of {'__'.join(r['reverse_of'])}" if r["reverse_of"] else ("undirected" if r["undirected"] else "")
        )
        d = r["in_degree"]
        lines.append(
            f"relation     {r['name']}: {r['num_edges']:,} edges, in-degree mean {d['mean']:.2f} max {d['max']:,} "
            f"zero {d['zero']:,}" + (f" ({how})" if how else "")
        )
    c = s["classes"]
    lines += [
        "splits       " + "  ".join(f"{k} {v:,}" for k, v in s["splits"].items()),
        f"classes      {c['num_classes']}  unlabelled {c['unlabelled']:,}",
        f"balance      {class_balance(c)}",
    ]
    return "\n".join(lines)


def verify_hetero(path: Path, meta: dict) -> list[str]:
    """The problems of the heterogeneous dataset at `path` (empty = ok):
    checksums of every file meta.json names, the load-time checks, empty
    splits, and zero padding after every feature row of every node type."""
    problems, ds = loaded_problems(path, meta, data_files(meta))
    if ds is None:
        return problems
    for section in meta["node_types"].values():
        padding = padding_problem(path, section["features"], section["num_nodes"]) if section["features"] else None
        if padding:
            problems.append(padding)
    for t, table in ds.features.items():
        nonfinite = nonfinite_problem(table, path / meta["node_types"][t]["features"]["file"])
        if nonfinite:
            problems.append(nonfinite)
    return problems
