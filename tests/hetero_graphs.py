"""Tiny heterogeneous graphs made in memory for the sampler, model and trainer tests."""

import numpy as np
import torch

from gnnsys.datasets.hetero_dataset import HeteroDataset

WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")
WRITTEN_BY = ("paper", "written_by", "author")
EMPLOYS = ("institution", "employs", "author")  # no edges


def csc(src, dst, num_dst, index_dtype=torch.int64):
    """(indptr, indices) of the edges src -> dst, in-neighbours grouped by destination."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(num_dst + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(src[order]).to(index_dtype)


def hetero_graph(num_papers=60, num_authors=40, num_institutions=5, paper_dim=6, seed=0, index_dtype=torch.int64):
    """(node_types, relations, raw edges {relation: (src, dst)}): papers cite
    papers, authors write papers (and the reverse), institutions employ no one."""
    rng = np.random.default_rng(seed)
    types = {"paper": num_papers, "author": num_authors, "institution": num_institutions}
    writes = (rng.integers(0, num_authors, 4 * num_papers), rng.integers(0, num_papers, 4 * num_papers))
    cites = (rng.integers(0, num_papers, 3 * num_papers), rng.integers(0, num_papers, 3 * num_papers))
    edges = {
        WRITES: writes,
        CITES: cites,
        WRITTEN_BY: (writes[1], writes[0]),
        EMPLOYS: (np.empty(0, np.int64), np.empty(0, np.int64)),
    }
    relations = {r: csc(s, d, types[r[2]], index_dtype) for r, (s, d) in edges.items()}
    return types, relations, edges


def hetero_dataset(num_papers=60, num_authors=40, paper_dim=6, num_classes=3, seed=0, labels=None, name="tiny-mag"):
    """A HeteroDataset over `hetero_graph`: papers have random features and
    labels (or `labels`) and a 50/20/30 split; authors and institutions have
    no features."""
    rng = np.random.default_rng(seed + 1)
    types, relations, _ = hetero_graph(num_papers, num_authors, paper_dim=paper_dim, seed=seed)
    x = torch.from_numpy(rng.standard_normal((num_papers, paper_dim)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, num_classes, num_papers)) if labels is None else labels
    perm = torch.from_numpy(rng.permutation(num_papers))
    a, b = num_papers // 2, num_papers * 7 // 10
    return HeteroDataset(
        name=name,
        node_types=types,
        relations=relations,
        features={"paper": x},
        target="paper",
        labels=y,
        splits={"train": perm[:a], "valid": perm[a:b], "test": perm[b:]},
        num_classes=num_classes,
    )
