"""Neighbour sampling over a heterogeneous graph (ogbn-mag's kind): one CSC
per relation (source type, name, destination type), each sampled with the
homogeneous kernels (`NeighborSampler`, or `LaborSampler`'s LABOR-0 draws).

Layer by layer, output layer first (PyG order): every destination node of
every relation draws min(fanout, degree) of its in-neighbours of that
relation, uniformly without replacement (or as `method`/`replace` say),
where the fanout is the layer's one count or its {relation: count}. The
draws of relation number r (in the order the relations were given) in layer
l are those of the stream (seed, epoch, batch, l, r), so `sample` is a
function of its arguments, whatever the threads or scheduling
(docs/architecture.md, "Sampling randomness").

The layout is the homogeneous one per node type: the destination nodes of
type t in a layer are the first `num_dst[t]` of its source nodes of type t,
each type keeps one global -> local map for the whole batch, new sources
are appended in order of first appearance (relations in their order), and
`input_nodes[target]` starts with the seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gnnsys.datasets.hetero_dataset import relation_name
from gnnsys.errors import DatasetError

from .block import Block
from .labor import LaborSampler
from .neighbor import LocalMaps, NeighborSampler, _relabel, _sort_rows, new_map
from .random_hash import stream_key

METHODS = {"uniform": NeighborSampler, "labor": LaborSampler}


@dataclass
class HeteroBlock:
    """One layer of a heterogeneous computation graph.

    relations: {relation: Block}, each with local ids: its destinations are
    the first `num_dst[dst type]` nodes of the destination type, its sources
    index the `num_src[src type]` nodes of the source type; num_src /
    num_dst: {node type: count} for every node type (0 where none).
    """

    relations: dict
    num_src: dict
    num_dst: dict

    def to(self, device, non_blocking: bool = False) -> HeteroBlock:
        """This layer with every relation's block on `device`."""
        moved = {r: b.to(device, non_blocking) for r, b in self.relations.items()}
        return HeteroBlock(moved, dict(self.num_src), dict(self.num_dst))


@dataclass
class HeteroMiniBatch:
    """One sampled heterogeneous minibatch.

    seeds: global ids of the `target` nodes trained on; input_nodes: {node
    type: global ids of the nodes whose inputs blocks[0] reads}, every node
    type present (empty where none), the seeds first in input_nodes[target];
    blocks: one HeteroBlock per layer, input layer first; x: {node type:
    gathered rows of its input_nodes} for the types with features, y: labels
    of the seeds (both filled by the loader); timings: seconds per stage.
    """

    seeds: torch.Tensor
    target: str
    input_nodes: dict
    blocks: list
    x: dict | None = None
    y: torch.Tensor | None = None
    timings: dict = field(default_factory=dict)

    def to(self, device, non_blocking: bool = False) -> HeteroMiniBatch:
        """This minibatch (ids, blocks, x, y) on `device`."""
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return HeteroMiniBatch(
            move(self.seeds),
            self.target,
            {t: move(ids) for t, ids in self.input_nodes.items()},
            [b.to(device, non_blocking) for b in self.blocks],
            None if self.x is None else {t: move(x) for t, x in self.x.items()},
            None if self.y is None else move(self.y),
            dict(self.timings),
        )

    def tensors(self):
        """Every tensor the batch holds (what a consumer's stream must record)."""
        yield self.seeds
        yield from self.input_nodes.values()
        yield from (self.x or {}).values()
        if self.y is not None:
            yield self.y
        for layer in self.blocks:
            for block in layer.relations.values():
                yield from (block.indptr, block.indices, *block.cache.values())


def relation_fanouts(fanouts, relations) -> list[dict]:
    """Per layer (output layer first) {relation: fanout}: a layer's int
    applies to every relation; a dict gives every relation of `relations`
    its own, keyed by the relation or its `relation_name` ("src__rel__dst").
    Counts are >= 0 (0: none) or -1 (every neighbour); ValueError otherwise."""
    names = {relation_name(r): r for r in relations}
    layers = []
    if isinstance(fanouts, (int, dict)) or not len(fanouts):
        raise ValueError(f"fanouts must be a non-empty list (one entry per layer), got {fanouts!r}")
    for layer, f in enumerate(fanouts):
        if isinstance(f, dict):
            given = {names.get(r, tuple(r) if isinstance(r, (tuple, list)) else r): k for r, k in f.items()}
            unknown = [r for r in given if r not in relations]
            missing = [relation_name(r) for r in relations if r not in given]
            if unknown or missing:
                what = f"unknown relation {unknown[0]!r}" if unknown else f"no fanout for relation {missing[0]!r}"
                raise ValueError(f"fanouts[{layer}]: {what}; relations: {', '.join(names)}")
            counts = {r: given[r] for r in relations}
        else:
            counts = dict.fromkeys(relations, f)
        for r, k in counts.items():
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < -1:
                raise ValueError(f"fanouts[{layer}][{relation_name(r)!r}] must be a count >= 0 or -1 (all), got {k!r}")
        layers.append({r: int(k) for r, k in counts.items()})
    return layers


class HeteroNeighborSampler:
    """Samples the multi-layer computation graph of a batch of target nodes.

    node_types: {type: number of nodes}; relations: {(src, rel, dst):
    (indptr, indices)}, per relation the CSC of in-neighbours over the
    destination type (the sources are ids of the source type); target: the
    seeds' node type; fanouts: one entry per layer, output layer first, an
    int for every relation or a {relation: count} dict (`relation_fanouts`);
    method "uniform" (min(fanout, degree) neighbours, without replacement
    unless `replace`) or "labor" (LABOR-0 per relation); seed: the draws'
    seed. `sample(seeds, epoch, batch)` -> HeteroMiniBatch, the same for the
    same arguments. Safe to call from several threads at once.
    """

    device = torch.device("cpu")  # where its minibatches come out

    def __init__(
        self,
        node_types: dict,
        relations: dict,
        target: str,
        fanouts,
        *,
        seed: int = 0,
        method: str = "uniform",
        replace: bool = False,
    ):
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        if method == "labor" and replace:
            raise ValueError("method 'labor' draws without replacement; replace=True applies to 'uniform' only")
        if target not in node_types:
            raise ValueError(f"target {target!r} is not a node type ({', '.join(node_types)})")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.node_types = {str(t): int(n) for t, n in node_types.items()}
        self.relations = [tuple(r) for r in relations]
        self.target, self.seed, self.method, self.replace = target, int(seed), method, bool(replace)
        self.fanouts = relation_fanouts(fanouts, self.relations)
        self._kernels = {r: self._kernel(r, *relations[r]) for r in self.relations}
        self._maps = LocalMaps(lambda: {t: new_map(n) for t, n in self.node_types.items()}, key=target)

    @classmethod
    def from_dataset(cls, dataset, fanouts, **options) -> HeteroNeighborSampler:
        """The sampler over a HeteroDataset's relations, its target type as the seeds' type."""
        return cls(dataset.node_types, dataset.relations, dataset.target, fanouts, **options)

    def _kernel(self, relation, indptr, indices) -> NeighborSampler:
        """The homogeneous sampler whose kernels draw `relation`'s neighbours."""
        src, _, dst = relation
        for node_type in (src, dst):
            if node_type not in self.node_types:
                raise ValueError(f"relation {relation_name(relation)!r} names an unknown node type {node_type!r}")
        if len(indptr) != self.node_types[dst] + 1:
            raise ValueError(
                f"relation {relation_name(relation)!r}: indptr has {len(indptr)} entries "
                f"for {self.node_types[dst]} {dst!r} nodes"
            )
        extra = {"replace": self.replace} if self.method == "uniform" else {}
        return METHODS[self.method](indptr, indices, [0], seed=self.seed, **extra)

    def __repr__(self):
        types = ", ".join(f"{t}={n:,}" for t, n in self.node_types.items())
        return (
            f"HeteroNeighborSampler({types}, relations={len(self.relations)}, layers={len(self.fanouts)}, "
            f"method={self.method!r}, seed={self.seed})"
        )

    def sample(self, seeds, epoch: int = 0, batch: int = 0) -> HeteroMiniBatch:
        """The HeteroMiniBatch of `seeds` (distinct target ids) for draw stream (epoch, batch)."""
        seeds, maps = self._maps.claim(seeds, epoch, batch)
        blocks, frontier = self._sample(seeds, epoch, batch, maps)  # on error the maps are dropped
        for t, nodes in frontier.items():
            maps[t][nodes] = -1
        self._maps.release(maps)
        inputs = {t: torch.from_numpy(nodes) for t, nodes in frontier.items()}
        return HeteroMiniBatch(torch.from_numpy(seeds), self.target, inputs, blocks)

    def _sample(self, seeds, epoch, batch, maps):
        """(HeteroBlocks input layer first, {type: input node ids})."""
        frontier = {t: np.empty(0, np.int64) for t in self.node_types}
        frontier[self.target] = seeds
        layers = []
        for layer, fanout in enumerate(self.fanouts):
            num_dst = {t: nodes.shape[0] for t, nodes in frontier.items()}
            drawn = {}
            for index, relation in enumerate(self.relations):
                src, dst = relation[0], relation[2]
                stream = np.uint64(stream_key(self.seed, epoch, batch, layer, index))
                indptr, sources = self._kernels[relation]._draw(frontier[dst][: num_dst[dst]], fanout[relation], stream)
                frontier[src], ids = self._relabel(relation, sources, indptr, frontier, maps[src])
                _sort_rows(indptr, ids)
                drawn[relation] = (indptr, ids)
            num_src = {t: nodes.shape[0] for t, nodes in frontier.items()}
            blocks = {
                r: Block(torch.from_numpy(indptr), torch.from_numpy(ids), num_src[r[0]], num_dst[r[2]])
                for r, (indptr, ids) in drawn.items()
            }
            layers.append(HeteroBlock(blocks, num_src, num_dst))
        layers.reverse()
        return layers, frontier

    def _relabel(self, relation, sources, indptr, frontier, local):
        """(the source type's nodes with the unseen `sources` appended, local ids of
        `sources`); DatasetError naming the relation for a source id out of range."""
        src, dst = relation[0], relation[2]
        known = frontier[src]
        grown = np.empty(known.shape[0] + sources.shape[0], np.int64)
        grown[: known.shape[0]] = known
        ids, size, bad = _relabel(sources, local, grown, known.shape[0])
        if bad >= 0:
            v = int(frontier[dst][np.searchsorted(indptr, bad, side="right") - 1])
            raise DatasetError(
                f"{relation_name(relation)}.indices",
                f"{dst} node {v}'s in-neighbour list holds {src} id {int(sources[bad])}, "
                f"out of range [0, {local.shape[0]}): a corrupted graph",
            )
        return grown[:size], ids
