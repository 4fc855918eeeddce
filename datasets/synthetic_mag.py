"""A synthetic heterogeneous graph shaped like ogbn-mag (`gnnsys prepare
synthetic --like ogbn-mag --scale S`).

Node types and counts (x scale): paper 736,389, author 1,134,649,
institution 8,740, field_of_study 59,965; relations and edge counts (x
scale): author-affiliated_with-institution 1,043,998, author-writes-paper
7,145,660, paper-cites-paper 5,416,271, paper-has_topic-field_of_study
7,505,078; 128-dim paper features, 349 venue classes, and a time split
with ogbn-mag's sizes (train 629,571, valid 64,879, test 41,939: the oldest
papers train, the newest test) and a node year per paper (2010-2017 for
train, 2018 valid, 2019 test, as in ogbn-mag).

The papers and their citations are the homogeneous generator's model
(datasets/synthetic.py, `_Model`): a latent venue per paper from a skewed
prior, features signal * mu[venue] + N(0, I), power-law in-degrees,
popularity-weighted citing papers drawn from the cited paper's venue with a
probability set by `homophily`, and labels the venue with `label_noise`.
Every other node type gets a latent venue from the same prior and a
power-law popularity; each other relation is drawn owner by owner (the
owner's edge count from a power law with the relation's mean, so degrees
are skewed on both sides): each drawn node comes from the owner's venue
with the relation's affinity (AFFINITY), else from all nodes of its type,
weighted by popularity (at small scales a type may have no node of a
venue; such draws fall back to all nodes, and source.synthetic.same_venue_share
records the expected share of each relation's edges within one venue):

    author-writes-paper         owner: paper, drawn: its authors
    paper-has_topic-field       owner: paper, drawn: its fields of study
    author-affiliated_with-inst owner: author, drawn: its institutions

What the labels can be predicted from is known for the paper part: the
Monte Carlo accuracy (BAYES_SAMPLE papers, standard error recorded) of the
Bayes classifier that knows the model and sees a paper's features alone,
with its cited-by papers' features, and with its citing and cited papers'
features (paper-cites-paper made undirected, as --add-reverse-relations
does); the other relations only add information, so the attainable
accuracy of a model that sees the whole graph is at least the last of
these (up to Monte Carlo error) and at most label_ceiling. All of it lands
in meta.json's source.synthetic.
"""

from __future__ import annotations

import numpy as np

from gnnsys.errors import DatasetError

from .hetero_source import HeteroSource, NodeFeatures, RelationSource
from .relations import relation_name
from .synthetic_model import (
    BAYES_SAMPLE,
    CLASS_PRIOR_EXPONENT,
    ROWS_PER_CHUNK,
    ClassSampler,
    Shape,
    _Model,
    _power_law,
    _rng,
    chunk_bounds,
    power_law_counts,
)

MAG = "ogbn-mag"
PAPERS = Shape(736_389, 5_416_271, 128, 349, (629_571, 64_879, 41_939), "time", True, 0.3)
NODE_TYPES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965}
CITES = ("paper", "cites", "paper")
# relation: (edges, owner type, the owner is the source)
DRAWN = {
    ("author", "affiliated_with", "institution"): (1_043_998, "author", True),
    ("author", "writes", "paper"): (7_145_660, "paper", False),
    ("paper", "has_topic", "field_of_study"): (7_505_078, "paper", True),
}
RELATIONS = (  # in OGB's (sorted) order
    ("author", "affiliated_with", "institution"),
    ("author", "writes", "paper"),
    CITES,
    ("paper", "has_topic", "field_of_study"),
)
AFFINITY = {
    ("author", "affiliated_with", "institution"): 0.3,
    ("author", "writes", "paper"): 0.6,
    ("paper", "has_topic", "field_of_study"): 0.5,
}
TIME_YEARS = (2010, 2017)  # train papers' years, oldest ids first; valid 2018, test 2019
_TYPES, _DRAWN_STREAM = 10, 11  # generator streams beside synthetic.py's 0-3


class _MagModel:
    """The papers' model (_Model) and the other types' venues, popularity
    and per-owner edge counts; chunk generators for every relation."""

    def __init__(self, scale: float, seed: int, papers: _Model, degree_exponent: float, max_degree_factor: float):
        self.seed, self.papers = seed, papers
        c = PAPERS.num_classes
        rng = _rng(seed, _TYPES)
        prior = np.arange(1, c + 1) ** -CLASS_PRIOR_EXPONENT
        self.counts = {"paper": papers.num_nodes}
        self.classes = {"paper": papers.z}
        self.samplers, self.class_weight = {"paper": papers.sampler}, {"paper": papers.source_share}
        for node_type in ("author", "institution", "field_of_study"):
            n = max(1, round(NODE_TYPES[node_type] * scale))
            self.counts[node_type] = n
            self.classes[node_type] = rng.choice(c, size=n, p=prior / prior.sum()).astype(np.int16)
            popularity = _power_law(rng, n, degree_exponent, max_degree_factor)
            self.samplers[node_type] = ClassSampler(self.classes[node_type], popularity, c)
            self.class_weight[node_type] = np.bincount(self.classes[node_type], popularity, c) / popularity.sum()
        self.owner_counts, self.chunks = {}, {}
        for relation, (edges, owner, _) in DRAWN.items():
            counts = power_law_counts(rng, self.counts[owner], round(edges * scale), degree_exponent, max_degree_factor)
            self.owner_counts[relation], self.chunks[relation] = counts, chunk_bounds(counts)

    def same_venue_share(self, relation) -> float:
        """The expected share of a drawn relation's edges whose two nodes
        share a venue: AFFINITY where the owner's venue has nodes of the
        drawn type (a draw from a venue without any falls back to all), plus
        the popularity-weighted share of the owner's venue among all draws."""
        _, owner, owner_is_src = DRAWN[relation]
        drawn = relation[2] if owner_is_src else relation[0]
        weight = self.class_weight[drawn]
        edges = np.bincount(self.classes[owner], self.owner_counts[relation], weight.shape[0])
        a = AFFINITY[relation]
        return float(edges @ (a * (weight > 0) + (1 - a) * weight) / max(edges.sum(), 1))

    def drawn_chunk(self, relation, k: int):
        """(src, dst) int64 of the edges of chunk k of a drawn relation."""
        _, owner, owner_is_src = DRAWN[relation]
        drawn = relation[2] if owner_is_src else relation[0]
        a, b = self.chunks[relation][k], self.chunks[relation][k + 1]
        rng = _rng(self.seed, _DRAWN_STREAM + list(DRAWN).index(relation), k)
        owners = np.repeat(np.arange(a, b, dtype=np.int64), self.owner_counts[relation][a:b])
        same = rng.random(owners.shape[0]) < AFFINITY[relation]
        others = self.samplers[drawn].draw(rng, np.where(same, self.classes[owner][owners], -1))
        return (owners, others) if owner_is_src else (others, owners)

    def edge_chunks(self, relation):
        """The re-iterable edge chunks of `relation`."""

        def chunks():
            if relation == CITES:
                for k in range(self.papers.chunk_nodes.shape[0] - 1):
                    yield self.papers.edge_chunk(k)
            else:
                for k in range(self.chunks[relation].shape[0] - 1):
                    yield self.drawn_chunk(relation, k)

        return chunks

    def num_edges(self, relation) -> int:
        """The generated edge count of `relation`."""
        counts = self.papers.in_degree if relation == CITES else self.owner_counts[relation]
        return int(counts.sum(dtype=np.int64))

    def years(self) -> np.ndarray:
        """A year per paper: train papers spread over TIME_YEARS by id, valid 2018, test 2019."""
        splits = self.papers.splits
        years = np.empty(self.papers.num_nodes, np.int64)
        train = splits["train"]
        first, last = TIME_YEARS
        years[train] = first + (np.arange(train.shape[0]) * (last - first + 1)) // max(train.shape[0], 1)
        years[splits["valid"]], years[splits["test"]] = last + 1, last + 2
        return years


def _bayes_record(papers: _Model, label_noise: float) -> dict:
    """The Bayes accuracies of the paper part and their Monte Carlo standard errors."""
    sample = min(BAYES_SAMPLE, papers.num_nodes)
    accuracy = papers.bayes
    errors = {k: float(np.sqrt(max(v * (1 - v), 0.0) / sample)) for k, v in accuracy.items()}
    return {
        "bayes_accuracy": accuracy,
        "bayes_standard_error": errors,
        "bayes_method": f"Monte Carlo over {sample} papers of the model itself (not the drawn graph)",
        "label_ceiling": (1 - label_noise) + label_noise / PAPERS.num_classes,
        "attainable_accuracy_at_least": accuracy["features_and_all_neighbours"],
    }


def read_synthetic_mag(
    scale: float,
    seed: int,
    *,
    homophily: float | None,
    feature_signal: float,
    label_noise: float,
    degree_exponent: float,
    max_degree_factor: float,
) -> HeteroSource:
    """A HeteroSource of an ogbn-mag-shaped graph x `scale` (module
    docstring); `homophily` (default PAPERS.homophily) is the expected share
    of citations between papers of one venue; the other knobs are
    datasets/synthetic.py's, applied to the papers and to every power law."""
    papers = _Model(
        PAPERS,
        scale,
        seed,
        PAPERS.homophily if homophily is None else homophily,
        feature_signal,
        label_noise,
        degree_exponent,
        max_degree_factor,
    )
    model = _MagModel(scale, seed, papers, degree_exponent, max_degree_factor)
    for node_type, n in model.counts.items():
        if n < 1:
            raise DatasetError("--scale", f"{scale} leaves no {node_type} nodes")

    def feature_chunks():
        for k in range(-(-papers.num_nodes // ROWS_PER_CHUNK)):
            yield papers.feature_chunk(k)

    counts = {t: model.counts[t] for t in NODE_TYPES}
    extra = {
        "like": MAG,
        "scale": scale,
        "seed": seed,
        "node_types": counts,
        "generated_edges": {relation_name(r): model.num_edges(r) for r in RELATIONS},
        "directed": True,
        "homophily": papers.homophily,
        "class_baseline_homophily": papers.baseline,
        "same_class_draw_probability": papers.p_same,
        "affinity": {relation_name(r): a for r, a in AFFINITY.items()},
        "same_venue_share": {relation_name(r): model.same_venue_share(r) for r in AFFINITY},
        "feature_signal": papers.signal,
        "label_noise": papers.label_noise,
        "degree_exponent": degree_exponent,
        "max_degree_factor": max_degree_factor,
        "class_prior_exponent": CLASS_PRIOR_EXPONENT,
        "split_order": "time",
        "node_years": {"train": list(TIME_YEARS), "valid": TIME_YEARS[1] + 1, "test": TIME_YEARS[1] + 2},
        **_bayes_record(papers, label_noise),
    }
    label = f"synthetic {MAG}"
    return HeteroSource(
        name=f"synthetic-{MAG}-x{scale:g}",
        kind="synthetic",
        node_types=counts,
        relations={
            r: RelationSource(model.edge_chunks(r), f"{label} {relation_name(r)} edges", model.num_edges(r))
            for r in RELATIONS
        },
        features={"paper": NodeFeatures(papers.num_nodes, PAPERS.feature_dim, feature_chunks, f"{label} features")},
        target="paper",
        labels=papers.labels,
        splits=papers.splits,
        num_classes=PAPERS.num_classes,
        label_file=f"{label} labels",
        node_years={"paper": model.years()},
        extra={"synthetic": extra},
    )
