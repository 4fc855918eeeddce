"""Synthetic graphs shaped like OGB node-property graphs (`gnnsys prepare synthetic`).

The graph has the named OGB graph's node count x scale, edge count x scale
(so the same average degree), feature dimension, class count and split sizes.
Its labels are learnable from features plus neighbourhood, with a known
ceiling, so that benchmark accuracy means something. The generative model:

1. Latent class z_v ~ pi with pi_c proportional to (c + 1) ** -0.5 (skewed, like OGB classes).
2. Features x_v = signal * mu[z_v] + N(0, I), mu[c] random unit vectors: a weak class signal.
3. In-degree of v from a truncated power law (tail exponent `degree_exponent`,
   largest expected degree about `max_degree_factor` x the mean) scaled to the
   target edge count; an independent popularity weight from the same law.
   Each in-edge's source is drawn with probability proportional to popularity
   (so out-degrees are heavy-tailed too), from v's own class with probability
   p, else from all nodes; p is set so the expected edge homophily (share of
   edges joining same-class nodes) equals `homophily`. A self-loop is redrawn
   once from all nodes and, if it persists, moved to the next node id.
   With `communities` K > 1 and `locality` q > 0 the nodes are split into K
   communities of equal size (contiguous id ranges; with `shuffle_ids`, a
   random partition, so that relabelling can recover the locality) and each
   in-edge's source is drawn from v's community with probability q (from v's
   class there when the draw is same-class, unless the community has none of
   it), else as above: in-degrees, popularity and the class mixing stay as
   without communities, and the share of edges inside a community is about
   q + (1 - q) / K. q = 0 gives the graph without communities.
4. Observed label = z_v, replaced with probability `label_noise` by a uniform
   class; nodes outside every split of a partly labelled shape get -1.

Edges are directed (src -> dst); `--to-undirected` adds the reverse edges.
Everything is drawn from numpy generators seeded by (seed, stream, chunk), so
`edge_chunks()` and `feature_chunks()` stream and yield identical chunks on
every pass. The attainable accuracy is estimated by Monte Carlo from the model
itself: the accuracy, against the noisy labels, of the Bayes classifier that
knows the parameters and sees a node's features and its 1-hop neighbours'
features (in-neighbours: "attainable_accuracy"; in- and out-neighbours, as
after --to-undirected: "attainable_accuracy_undirected"); the ceiling with
perfect knowledge of the latent class is "label_ceiling" = 1 - noise + noise / C.
Deeper GNNs may slightly exceed the 1-hop figures, never the ceiling. These and
the generator parameters land in `GraphSource.extra["synthetic"]`.
"""

from __future__ import annotations

import math
import numbers

from gnnsys.errors import DatasetError
from gnnsys.numbers import FLOAT_MAX, number

from .hetero_source import add_reverse_arguments, apply_reverse_choice, check_reverse_choice
from .source import GraphSource
from .synthetic_mag import MAG, read_synthetic_mag
from .synthetic_model import CLASS_PRIOR_EXPONENT, ROWS_PER_CHUNK, Shape, _Model

SHAPES = {
    "ogbn-arxiv": Shape(169_343, 1_166_243, 128, 40, (90_941, 29_799, 48_603), "time", True, 0.65),
    "ogbn-products": Shape(2_449_029, 61_859_140, 100, 47, (196_615, 39_323, 2_213_091), "popularity", True, 0.8),
    "ogbn-papers100M": Shape(111_059_956, 1_615_685_872, 128, 172, (1_207_179, 125_265, 214_338), "time", False, 0.6),
}
PROTEINS = "ogbn-proteins"  # multi-label with edge features: datasets/synthetic_proteins.py
# MAG, "ogbn-mag": heterogeneous, datasets/synthetic_mag.py
OTHERS = (PROTEINS, MAG)
ALIASES = {name.removeprefix("ogbn-"): name for name in [*SHAPES, *OTHERS]}
DEFAULTS = {"feature_signal": 2.0, "label_noise": 0.1, "degree_exponent": 2.5, "max_degree_factor": 1000.0}
COMMUNITY_DEFAULTS = {"communities": 1, "locality": 0.0, "shuffle_ids": False}


def _check(like, scale, seed, homophily, feature_signal, label_noise, degree_exponent, max_degree_factor, locality):
    if like not in SHAPES and like not in OTHERS:
        raise DatasetError("--like", f"must be one of {', '.join([*SHAPES, *OTHERS, *ALIASES])}, got {like!r}")
    floats = dict(scale=scale, homophily=homophily, feature_signal=feature_signal, label_noise=label_noise)
    floats.update(degree_exponent=degree_exponent, max_degree_factor=max_degree_factor, locality=locality)
    for name, value in floats.items():
        if value is not None and not (math.isfinite(value) and abs(value) <= FLOAT_MAX):
            raise DatasetError(
                f"--{name.replace('_', '-')}", f"must be a finite number at most {FLOAT_MAX:g}, got {value}"
            )
    if not scale > 0:
        raise DatasetError("--scale", f"must be positive, got {scale}")
    if seed < 0:
        raise DatasetError("--seed", f"must be >= 0, got {seed}")
    if homophily is not None and not 0 <= homophily <= 1:
        raise DatasetError("--homophily", f"must be in [0, 1], got {homophily}")
    if feature_signal < 0:
        raise DatasetError("--feature-signal", f"must be >= 0, got {feature_signal}")
    if not 0 <= label_noise <= 1:
        raise DatasetError("--label-noise", f"must be in [0, 1], got {label_noise}")
    if not degree_exponent > 2:
        raise DatasetError("--degree-exponent", f"must be > 2 (finite mean degree), got {degree_exponent}")
    if not max_degree_factor >= 1:
        raise DatasetError("--max-degree-factor", f"must be >= 1, got {max_degree_factor}")


def _check_communities(like, communities, locality, shuffle_ids):
    if not isinstance(communities, numbers.Integral) or isinstance(communities, bool) or communities < 1:
        raise DatasetError("--communities", f"must be an integer >= 1, got {communities!r}")
    if not 0 <= locality <= 1:
        raise DatasetError("--locality", f"must be in [0, 1], got {locality}")
    if like == MAG and (communities, locality, shuffle_ids) != tuple(COMMUNITY_DEFAULTS.values()):
        given = "--communities" if communities != 1 else "--locality" if locality else "--shuffle-ids"
        raise DatasetError(given, "shapes the homogeneous graphs (arxiv, products, papers100M), not ogbn-mag")
    if locality > 0 and communities == 1:
        raise DatasetError("--locality", "needs --communities >= 2 (one community is the whole graph)")
    if shuffle_ids and communities == 1:
        raise DatasetError("--shuffle-ids", "needs --communities >= 2 (it shuffles the communities' ids)")


def read_synthetic(
    like: str,
    scale: float = 1.0,
    seed: int = 0,
    *,
    homophily: float | None = None,
    feature_signal: float = DEFAULTS["feature_signal"],
    label_noise: float = DEFAULTS["label_noise"],
    degree_exponent: float = DEFAULTS["degree_exponent"],
    max_degree_factor: float = DEFAULTS["max_degree_factor"],
    communities: int = COMMUNITY_DEFAULTS["communities"],
    locality: float = COMMUNITY_DEFAULTS["locality"],
    shuffle_ids: bool = COMMUNITY_DEFAULTS["shuffle_ids"],
    add_reverse_relations="auto",
    reverse_names: str | None = None,
):
    """A GraphSource of a synthetic graph shaped like OGB graph `like` x `scale`.

    like is "ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-proteins"
    or "ogbn-mag" (or without "ogbn-"; proteins is datasets/synthetic_proteins.py's model,
    which takes scale and seed only; mag is datasets/synthetic_mag.py's
    heterogeneous model, a HeteroSource, with reverse relations as
    `add_reverse_relations` and `reverse_names` ask: hetero_source.apply_reverse_choice);
    homophily defaults to the shape's (about the real graph's edge homophily);
    communities, locality and shuffle_ids plant communities (id ranges, or
    shuffled ids) that keep a share `locality` of the edges inside (arxiv,
    products and papers100M shapes); the other knobs are described in the
    module docstring. The result's
    extra["synthetic"] holds every parameter and the attainable accuracy.
    """
    like = ALIASES.get(like, like)
    _check(like, scale, seed, homophily, feature_signal, label_noise, degree_exponent, max_degree_factor, locality)
    _check_communities(like, communities, locality, shuffle_ids)
    if like == MAG:
        knobs = dict(feature_signal=feature_signal, label_noise=label_noise, degree_exponent=degree_exponent)
        source = read_synthetic_mag(scale, seed, homophily=homophily, max_degree_factor=max_degree_factor, **knobs)
        return apply_reverse_choice(source, add_reverse_relations, reverse_names)
    check_reverse_choice(add_reverse_relations, reverse_names, hetero=False)
    if like == PROTEINS:
        from .synthetic_proteins import read_synthetic_proteins, refuse_knobs

        knobs = dict(homophily=homophily, feature_signal=feature_signal, label_noise=label_noise)
        knobs.update(degree_exponent=degree_exponent, max_degree_factor=max_degree_factor)
        knobs.update(communities=communities, locality=locality, shuffle_ids=shuffle_ids)
        defaults = {**DEFAULTS, **COMMUNITY_DEFAULTS}
        refuse_knobs([k for k, v in knobs.items() if v is not None and v != defaults.get(k)])
        return read_synthetic_proteins(scale, seed)
    shape = SHAPES[like]
    model = _Model(
        shape,
        scale,
        seed,
        shape.homophily if homophily is None else homophily,
        feature_signal,
        label_noise,
        degree_exponent,
        max_degree_factor,
        communities,
        locality,
        shuffle_ids,
    )
    return _source(like, scale, model, degree_exponent, max_degree_factor)


def _source(like, scale, model: _Model, degree_exponent, max_degree_factor) -> GraphSource:
    def edge_chunks():
        for k in range(model.chunk_nodes.shape[0] - 1):
            yield model.edge_chunk(k)

    def feature_chunks():
        for k in range(-(-model.num_nodes // ROWS_PER_CHUNK)):
            yield model.feature_chunk(k)

    bayes = model.bayes
    c = model.shape.num_classes
    extra = {
        "like": like,
        "scale": scale,
        "seed": model.seed,
        "num_nodes": model.num_nodes,
        "generated_edges": model.num_edges,
        "directed": True,
        "homophily": model.homophily,
        "class_baseline_homophily": model.baseline,
        "same_class_draw_probability": model.p_same,
        "feature_signal": model.signal,
        "label_noise": model.label_noise,
        "degree_exponent": degree_exponent,
        "max_degree_factor": max_degree_factor,
        "communities": model.communities,
        "locality": model.locality,
        "shuffle_ids": model.shuffle_ids,
        "class_prior_exponent": CLASS_PRIOR_EXPONENT,
        "split_order": model.shape.split_order,
        "label_ceiling": (1 - model.label_noise) + model.label_noise / c,
        "bayes_accuracy": bayes,
        "attainable_accuracy": bayes["features_and_in_neighbours"],
        "attainable_accuracy_undirected": bayes["features_and_all_neighbours"],
    }
    return GraphSource(
        name=f"synthetic-{like}-x{scale:g}",
        kind="synthetic",
        num_nodes=model.num_nodes,
        feature_dim=model.shape.feature_dim,
        edge_chunks=edge_chunks,
        feature_chunks=feature_chunks,
        labels=model.labels,
        splits=model.splits,
        num_classes=c,
        edge_file=f"synthetic {like} edges",
        feature_file=f"synthetic {like} features",
        label_file=f"synthetic {like} labels",
        extra={"synthetic": extra},
        expected_num_edges=model.num_edges,
    )


def add_arguments(parser):
    """Register --like, --scale, --seed and the generator knobs."""
    parser.add_argument(
        "--like",
        required=True,
        choices=[*SHAPES, *OTHERS, *ALIASES],
        help="the OGB graph to imitate (ogbn-proteins: multi-label, edge features, no node features; "
        "prepare it with --node-features-from-edges; ogbn-mag: heterogeneous, four node types and relations)",
    )
    parser.add_argument(
        "--scale", type=number, default=1.0, help="node and edge count multiplier (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    parser.add_argument(
        "--homophily",
        type=number,
        default=None,
        help="expected share of same-class edges (default: the shape's, about the real graph's)",
    )
    parser.add_argument(
        "--feature-signal",
        type=number,
        default=DEFAULTS["feature_signal"],
        help="distance of a class's feature mean from the origin, in noise std units (default: %(default)s)",
    )
    parser.add_argument(
        "--label-noise",
        type=number,
        default=DEFAULTS["label_noise"],
        help="probability that a label is replaced by a uniform random class (default: %(default)s)",
    )
    parser.add_argument(
        "--degree-exponent",
        type=number,
        default=DEFAULTS["degree_exponent"],
        help="power-law tail exponent of in-degree and source popularity, > 2 (default: %(default)s)",
    )
    parser.add_argument(
        "--max-degree-factor",
        type=number,
        default=DEFAULTS["max_degree_factor"],
        help="truncate the power law at about this many times the mean degree (default: %(default)s)",
    )
    parser.add_argument(
        "--communities",
        type=int,
        default=COMMUNITY_DEFAULTS["communities"],
        help="split the nodes into this many communities of equal size, contiguous id ranges (default: %(default)s)",
    )
    parser.add_argument(
        "--locality",
        type=number,
        default=COMMUNITY_DEFAULTS["locality"],
        help="probability that an edge's source is drawn from its target's community, else from the whole graph; "
        "needs --communities >= 2; 0: no locality (default: %(default)s)",
    )
    parser.add_argument(
        "--shuffle-ids",
        action="store_true",
        help="give the communities' nodes random ids instead of contiguous ranges (to test relabelling)",
    )
    add_reverse_arguments(parser)


def source_from_args(args):
    """The GraphSource described by parsed arguments."""
    return read_synthetic(
        args.like,
        args.scale,
        args.seed,
        homophily=args.homophily,
        feature_signal=args.feature_signal,
        label_noise=args.label_noise,
        degree_exponent=args.degree_exponent,
        max_degree_factor=args.max_degree_factor,
        communities=args.communities,
        locality=args.locality,
        shuffle_ids=args.shuffle_ids,
        add_reverse_relations=args.add_reverse_relations,
        reverse_names=args.reverse_names,
    )
