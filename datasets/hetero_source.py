"""`HeteroSource`: what a reader of a heterogeneous graph (ogbn-mag's raw
layout, the mag-shaped generator) produces and datasets/hetero_writer.py
consumes, and the reverse relations a prepare adds to it.

Like GraphSource, counts, labels and splits are in memory and the big parts
(each relation's edges, each node type's feature rows) are re-iterable
streams of chunks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from gnnsys.errors import DatasetError

from .hetero_dataset import Relation, relation_name
from .hetero_meta import REVERSE_NAMES
from .source import EdgeChunks, FeatureChunks

REVERSE_CHOICES = ("auto", "yes", "no")


@dataclass
class RelationSource:
    """The edges of one relation: edge_chunks() yields (src, dst) arrays
    (source-type ids, destination-type ids), re-iterable; `file` names them
    in messages; expected_num_edges is what the input says it holds (for
    progress and the space check), None when unknown. reverse_of is the
    relation this one reverses (its edges swapped), undirected says the
    writer adds the reverse of every edge (a relation within one type)."""

    edge_chunks: EdgeChunks
    file: str
    expected_num_edges: int | None = None
    reverse_of: Relation | None = None
    undirected: bool = False


@dataclass
class NodeFeatures:
    """The feature rows of one node type: feature_chunks() yields float
    [rows, feature_dim] arrays covering its nodes in order (the attributes the
    homogeneous feature writer reads)."""

    num_nodes: int
    feature_dim: int
    feature_chunks: FeatureChunks
    feature_file: str


@dataclass
class LabelledNodes:
    """The target type's labels and splits, under the names the label and
    split checks of datasets/writer.py read."""

    num_nodes: int
    labels: np.ndarray
    splits: dict
    num_classes: int | None
    label_file: str
    split_files: dict


@dataclass
class HeteroSource:
    """A heterogeneous graph to be written in the gnnsys format.

    node_types: {type: count}; relations: {(src, rel, dst): RelationSource};
    features: {type: NodeFeatures} for the types that have them; target: the
    labelled type; labels: int64 [target count] (-1 = no label) and splits
    {"train", "valid", "test"}: target ids; node_years: {type: int64 [count]};
    label_file / split_files / node_year_files name inputs in messages;
    inputs, extra and notes as GraphSource's.
    """

    name: str
    kind: str
    node_types: dict
    relations: dict
    features: dict
    target: str
    labels: np.ndarray
    splits: dict
    num_classes: int | None = None
    label_file: str = "labels"
    split_files: dict = field(default_factory=dict)
    node_years: dict = field(default_factory=dict)
    node_year_files: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def labelled_nodes(self) -> LabelledNodes:
        """The target's labels and splits as the writer's checks take them."""
        return LabelledNodes(
            self.node_types[self.target],
            self.labels,
            self.splits,
            self.num_classes,
            self.label_file,
            self.split_files,
        )


def reverse_relation(relation: Relation, names: str) -> Relation:
    """The reverse of (src, rel, dst): (dst, "to", src) with names "ogb" (as
    OGB's ogbn-mag examples name them: rgcn.py, sampler.py), (dst,
    "rev_<rel>", src) with "pyg" (as torch_geometric's ToUndirected does)."""
    src, rel, dst = relation
    return (dst, "to" if names == "ogb" else f"rev_{rel}", src)


def _swapped(edge_chunks: EdgeChunks) -> EdgeChunks:
    def chunks():
        for src, dst, *_ in edge_chunks():
            yield dst, src

    return chunks


def with_reverse_relations(source: HeteroSource, names: str) -> HeteroSource:
    """`source` made usable for message passing towards every type, as OGB's
    R-GCN example does for ogbn-mag: a relation within one node type
    (paper-cites-paper) becomes undirected (the writer adds each edge's
    reverse and removes repeats, as torch_geometric's to_undirected), and
    every other relation gets a reverse relation named by
    `reverse_relation(relation, names)`, listed after the originals.
    DatasetError("--reverse-names") when a reverse's name is already taken."""
    if names not in REVERSE_NAMES:
        raise DatasetError("--reverse-names", f"must be one of {', '.join(REVERSE_NAMES)}, got {names!r}")
    relations = {}
    added = {}
    for relation, rel_source in source.relations.items():
        if relation[0] == relation[2]:
            relations[relation] = dataclasses.replace(rel_source, undirected=True)
            continue
        relations[relation] = rel_source
        reverse = reverse_relation(relation, names)
        if reverse in source.relations or reverse in added:
            taken = relation_name(reverse)
            raise DatasetError(
                "--reverse-names",
                f"the reverse of {relation_name(relation)} would be {taken}, a name already taken; "
                f"choose the other naming ({', '.join(n for n in REVERSE_NAMES if n != names)})",
            )
        added[reverse] = RelationSource(
            _swapped(rel_source.edge_chunks),
            rel_source.file,
            rel_source.expected_num_edges,
            reverse_of=relation,
        )
    return dataclasses.replace(source, relations={**relations, **added})


def apply_reverse_choice(source: HeteroSource, choice, names: str | None) -> HeteroSource:
    """`source` with reverse relations when `choice` ("auto" or "yes": yes;
    "no"; or a bool) asks for them, and the choice recorded in
    extra["reverse_relations"]; `names` (default "ogb") is refused with "no"."""
    add = check_reverse_choice(choice, names, hetero=True)
    if add:
        source = with_reverse_relations(source, names or "ogb")
    source.extra["reverse_relations"] = {"added": add, "names": (names or "ogb") if add else None}
    return source


def check_reverse_choice(choice, names: str | None, hetero: bool) -> bool:
    """Whether reverse relations are to be added ("auto" means yes for a
    heterogeneous input); DatasetError naming the option that does not apply:
    an unknown value, "yes" or --reverse-names for a homogeneous input, or
    --reverse-names with "no"."""
    if not isinstance(choice, bool) and choice not in REVERSE_CHOICES:
        raise DatasetError("--add-reverse-relations", f"must be one of {', '.join(REVERSE_CHOICES)}, got {choice!r}")
    if names is not None and names not in REVERSE_NAMES:
        raise DatasetError("--reverse-names", f"must be one of {', '.join(REVERSE_NAMES)}, got {names!r}")
    add = choice in ("auto", "yes", True)
    if not hetero:
        if choice in ("yes", True):
            raise DatasetError(
                "--add-reverse-relations", "applies to a heterogeneous graph (several node types); this one has one"
            )
        if names is not None:
            raise DatasetError("--reverse-names", "names reverse relations, which only a heterogeneous graph has")
        return False
    if names is not None and not add:
        raise DatasetError("--reverse-names", "names the reverse relations, but --add-reverse-relations is no")
    return add


def add_reverse_arguments(parser):
    """--add-reverse-relations and --reverse-names, for the kinds that may read a heterogeneous graph."""
    parser.add_argument(
        "--add-reverse-relations",
        choices=REVERSE_CHOICES,
        default="auto",
        help="heterogeneous graphs (ogbn-mag): make each relation within one node type undirected and add the "
        "reverse of every other relation, as OGB's R-GCN example does (auto: yes for a heterogeneous graph; "
        "refused for a homogeneous one) (default: %(default)s)",
    )
    parser.add_argument(
        "--reverse-names",
        choices=REVERSE_NAMES,
        default=None,
        help="names of the reverse relations: ogb as OGB's examples, (paper, to, author); "
        "pyg as torch_geometric's ToUndirected, (paper, rev_writes, author) (default: ogb's)",
    )
