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

from dataclasses import dataclass

import numba
import numpy as np

from gnnsys.errors import DatasetError

from .source import GraphSource

EDGES_PER_CHUNK = 1 << 22
ROWS_PER_CHUNK = 1 << 16
CLASS_PRIOR_EXPONENT = 0.5
BAYES_SAMPLE = 4000
_GLOBAL, _EDGES, _FEATURES, _BAYES = range(4)


@dataclass(frozen=True)
class Shape:
    """An OGB graph's published sizes, and how its split is made.

    split_counts are the real train/valid/test sizes (scaled with the graph);
    split_order is "time" (node id order, oldest first) or "popularity" (most
    popular first, like ogbn-products' sales-rank split); fully_labelled says
    whether nodes outside the splits still carry labels; homophily is the
    default expected edge homophily (near the real graph's reported values
    for arxiv and products; a guess for papers100M).
    """

    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    split_counts: tuple
    split_order: str
    fully_labelled: bool
    homophily: float


SHAPES = {
    "ogbn-arxiv": Shape(169_343, 1_166_243, 128, 40, (90_941, 29_799, 48_603), "time", True, 0.65),
    "ogbn-products": Shape(2_449_029, 61_859_140, 100, 47, (196_615, 39_323, 2_213_091), "popularity", True, 0.8),
    "ogbn-papers100M": Shape(111_059_956, 1_615_685_872, 128, 172, (1_207_179, 125_265, 214_338), "time", False, 0.6),
}
PROTEINS = "ogbn-proteins"  # multi-label with edge features: datasets/synthetic_proteins.py
ALIASES = {name.removeprefix("ogbn-"): name for name in [*SHAPES, PROTEINS]}
DEFAULTS = {"feature_signal": 2.0, "label_noise": 0.1, "degree_exponent": 2.5, "max_degree_factor": 1000.0}


def _rng(seed: int, stream: int, chunk: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, stream, chunk])


def _power_law(rng, n: int, exponent: float, max_factor: float) -> np.ndarray:
    """n weights >= 1 with density ~ w ** -exponent, truncated at about
    max_factor x the untruncated mean (inverse-CDF draw)."""
    a = exponent - 1.0
    cap = max(1.0, max_factor * a / (a - 1.0))
    low = cap**-a
    return (low + (1.0 - low) * rng.random(n)) ** (-1.0 / a)


def _check(like, scale, seed, homophily, feature_signal, label_noise, degree_exponent, max_degree_factor):
    if like not in SHAPES and like != PROTEINS:
        raise DatasetError("--like", f"must be one of {', '.join([*SHAPES, PROTEINS, *ALIASES])}, got {like!r}")
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


@numba.njit(nogil=True, cache=True)
def _alias_tables(weights, nodes, starts, prob, alias, small, large):
    """Fill the Walker alias tables (Vose's method) of each segment of
    positions starts[s]:starts[s + 1], position i weighing
    weights[nodes[i % len(nodes)]]: position i keeps itself with probability
    prob[i], else gives alias[i] (a position in the same segment). small and
    large are scratch of the widest segment's size, in alias's dtype."""
    wrap = nodes.shape[0]
    for i in range(alias.shape[0]):
        alias[i] = i
        prob[i] = 1.0
    for s in range(starts.shape[0] - 1):
        a, b = starts[s], starts[s + 1]
        total = 0.0
        for i in range(a, b):
            total += weights[nodes[i % wrap]]
        n_small = n_large = 0
        for i in range(a, b):
            prob[i] = weights[nodes[i % wrap]] * (b - a) / total
            if prob[i] < 1.0:
                small[n_small] = i
                n_small += 1
            else:
                large[n_large] = i
                n_large += 1
        while n_small > 0 and n_large > 0:
            n_small -= 1
            low, high = small[n_small], large[n_large - 1]
            alias[low] = high
            prob[high] += prob[low] - 1.0
            if prob[high] < 1.0:
                n_large -= 1
                small[n_small] = high
                n_small += 1
        for k in range(n_small):
            prob[small[k]] = 1.0
        for k in range(n_large):
            prob[large[k]] = 1.0


class _Model:
    """The drawn global state (classes, degrees, popularity) and the chunk generators."""

    def __init__(
        self,
        shape: Shape,
        scale: float,
        seed: int,
        homophily: float,
        feature_signal: float,
        label_noise: float,
        degree_exponent: float,
        max_degree_factor: float,
    ):
        self.shape, self.seed = shape, seed
        self.signal, self.label_noise = feature_signal, label_noise
        n = max(2, round(shape.num_nodes * scale))
        self.num_nodes, self.target_edges = n, round(shape.num_edges * scale)
        c = shape.num_classes
        rng = _rng(seed, _GLOBAL)
        prior = np.arange(1, c + 1) ** -CLASS_PRIOR_EXPONENT
        self.z = rng.choice(c, size=n, p=prior / prior.sum()).astype(np.int16)
        mu = rng.standard_normal((c, shape.feature_dim))
        self.centroids = (mu / np.linalg.norm(mu, axis=1, keepdims=True)).astype(np.float32)
        self.in_degree = self._degrees(rng, degree_exponent, max_degree_factor)
        self.popularity = _power_law(rng, n, degree_exponent, max_degree_factor)
        self._index_sources()
        weight = np.bincount(self.z, weights=self.popularity, minlength=c)
        self.total_weight = weight.sum()
        self.source_share = weight / self.total_weight
        self.class_share = np.bincount(self.z, minlength=c) / n
        self.baseline = float(self.class_share @ self.source_share)
        if homophily < self.baseline:
            raise DatasetError(
                "--homophily",
                f"must be >= the class baseline {self.baseline:.3f} (the share "
                f"of same-class edges when sources ignore classes), got {homophily}",
            )
        self.homophily = homophily
        self.p_same = (homophily - self.baseline) / (1.0 - self.baseline) if self.baseline < 1 else 1.0
        self.labels = self._noisy_labels(rng)
        self.splits = self._splits(rng)
        if not shape.fully_labelled:
            unlabelled = np.ones(n, bool)
            unlabelled[np.concatenate(list(self.splits.values()))] = False
            self.labels[unlabelled] = -1
        ends = np.cumsum(self.in_degree, dtype=np.int64)
        self.num_edges = int(ends[-1])
        bounds = np.searchsorted(ends, np.arange(EDGES_PER_CHUNK, self.num_edges, EDGES_PER_CHUNK), "left")
        self.chunk_nodes = np.unique(np.concatenate([[0], bounds + 1, [n]])).astype(np.int64)
        self.bayes = self.bayes_accuracy()
        del self.popularity  # as large as the node count; nothing after the Bayes estimate needs it

    def _index_sources(self):
        """Alias tables for popularity-weighted draws: segment c < C holds class
        c's nodes, segment C all nodes, both in by_class order, so position p is
        node by_class[p % N]."""
        n, c = self.num_nodes, self.shape.num_classes
        positions = np.int32 if 2 * n < 2**31 else np.int64
        self.by_class = np.argsort(self.z, kind="stable").astype(positions)
        class_start = np.searchsorted(self.z[self.by_class], np.arange(c + 1)).astype(np.int64)
        starts = np.concatenate([class_start, [2 * n]])
        self.segment_start, self.segment_size = starts[:-1], np.diff(starts)
        self.prob, self.alias = np.empty(2 * n, np.float32), np.empty(2 * n, positions)
        _alias_tables(
            self.popularity,
            self.by_class,
            starts,
            self.prob,
            self.alias,
            np.empty(n, positions),
            np.empty(n, positions),
        )

    def _degrees(self, rng, exponent, max_factor):
        w = _power_law(rng, self.num_nodes, exponent, max_factor)
        expected = w * (self.target_edges / w.sum())
        return np.floor(expected + rng.random(self.num_nodes)).astype(np.int32)

    def _noisy_labels(self, rng):
        labels = self.z.astype(np.int64)
        flip = rng.random(self.num_nodes) < self.label_noise
        labels[flip] = rng.integers(0, self.shape.num_classes, int(flip.sum()))
        return labels

    def _splits(self, rng):
        n, s = self.num_nodes, self.shape
        counts = [max(1, round(k * n / s.num_nodes)) for k in s.split_counts]
        if s.fully_labelled:
            counts[2] = n - counts[0] - counts[1]
        if counts[2] < 1 or sum(counts) > n:
            raise DatasetError("--scale", f"{n} nodes are too few for a train/valid/test split")
        if s.split_order == "popularity":
            candidates = np.argsort(-self.popularity, kind="stable")
        elif s.fully_labelled:
            candidates = np.arange(n)
        else:
            candidates = np.sort(rng.choice(n, size=sum(counts), replace=False))
        cut = np.cumsum(counts)
        return {
            name: np.sort(candidates[a:b]).astype(np.int64)
            for name, a, b in zip(("train", "valid", "test"), [0, *cut[:2]], cut)
        }

    def sources(self, rng, classes):
        """One popularity-weighted source per entry of `classes` (-1 = any class)."""
        segment = np.where(classes >= 0, classes, self.shape.num_classes)
        size = self.segment_size[segment]
        at = self.segment_start[segment] + np.minimum((rng.random(classes.shape[0]) * size).astype(np.int64), size - 1)
        keep = rng.random(classes.shape[0]) < self.prob[at]
        return self.by_class[np.where(keep, at, self.alias[at]) % self.num_nodes].astype(np.int64)

    def edge_chunk(self, k: int):
        """(src, dst) int64 of the in-edges of the nodes of chunk k."""
        a, b = self.chunk_nodes[k], self.chunk_nodes[k + 1]
        rng = _rng(self.seed, _EDGES, k)
        dst = np.repeat(np.arange(a, b, dtype=np.int64), self.in_degree[a:b])
        same = rng.random(dst.shape[0]) < self.p_same
        src = self.sources(rng, np.where(same, self.z[dst], -1))
        loops = np.flatnonzero(src == dst)
        src[loops] = self.sources(rng, np.full(loops.shape[0], -1))
        loops = loops[src[loops] == dst[loops]]
        src[loops] = (dst[loops] + 1) % self.num_nodes
        return src, dst

    def feature_chunk(self, k: int) -> np.ndarray:
        """[rows, dim] float32 features of nodes k * ROWS_PER_CHUNK onwards."""
        a = k * ROWS_PER_CHUNK
        b = min(self.num_nodes, a + ROWS_PER_CHUNK)
        x = _rng(self.seed, _FEATURES, k).standard_normal((b - a, self.shape.feature_dim), dtype=np.float32)
        x += self.signal * self.centroids[self.z[a:b]]
        return x

    def mixing(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[C, C] class distributions of a node's neighbours given its class:
        row c of the first is P(class of an in-neighbour | c), of the second
        P(class of an out-neighbour | c); and the expected out-degree per unit
        popularity for each class."""
        c, p = self.shape.num_classes, self.p_same
        into = p * np.eye(c) + (1 - p) * self.source_share[None, :]
        total = self.total_weight
        class_weight = self.source_share * total
        own = np.divide(p * self.class_share, class_weight, out=np.zeros(c), where=class_weight > 0)
        out = np.diag(own) + (1 - p) * self.class_share[None, :] / total
        rate = out.sum(axis=1)
        return into, out / rate[:, None], rate * self.num_edges

    def bayes_accuracy(self) -> dict:
        """Monte Carlo accuracy (against the noisy labels) of the Bayes classifier
        that knows the model, on sampled nodes: from a node's features alone, plus
        its in-neighbours' features (the graph as generated), plus its in- and
        out-neighbours' features (the graph after --to-undirected)."""
        rng = _rng(self.seed, _BAYES)
        c, d = self.shape.num_classes, self.shape.feature_dim
        nodes = rng.choice(self.num_nodes, size=min(BAYES_SAMPLE, self.num_nodes), replace=False)
        z = self.z[nodes].astype(np.int64)
        mu = self.centroids.astype(np.float64)

        def loglik(classes):
            x = self.signal * mu[classes] + rng.standard_normal((classes.shape[0], d))
            return self.signal * x @ mu.T - 0.5 * self.signal**2

        def neighbour_terms(degree, mixing):
            owner = np.repeat(np.arange(nodes.shape[0]), degree)
            cdf = np.cumsum(mixing, axis=1)[z[owner]]
            classes = np.minimum((rng.random(owner.shape[0])[:, None] > cdf).sum(axis=1), c - 1)
            ll = loglik(classes)
            top = ll.max(axis=1, keepdims=True)
            terms = np.zeros((nodes.shape[0], c))
            np.add.at(terms, owner, np.log(np.exp(ll - top) @ mixing.T + 1e-300) + top)
            return terms

        into, out, rate = self.mixing()
        own = np.log(self.class_share + 1e-300) + loglik(z)
        with_in = own + neighbour_terms(self.in_degree[nodes], into)
        out_degree = rng.poisson(self.popularity[nodes] * rate[z])
        with_all = with_in + neighbour_terms(out_degree, out)
        noise = self.label_noise
        scores = {"features_only": own, "features_and_in_neighbours": with_in, "features_and_all_neighbours": with_all}
        return {
            name: float((1 - noise) * np.mean(score.argmax(axis=1) == z) + noise / c) for name, score in scores.items()
        }


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
) -> GraphSource:
    """A GraphSource of a synthetic graph shaped like OGB graph `like` x `scale`.

    like is "ogbn-arxiv", "ogbn-products", "ogbn-papers100M" or "ogbn-proteins"
    (or without "ogbn-"; proteins is datasets/synthetic_proteins.py's model,
    which takes scale and seed only);
    homophily defaults to the shape's (about the real graph's edge homophily);
    the other knobs are described in the module docstring. The result's
    extra["synthetic"] holds every parameter and the attainable accuracy.
    """
    like = ALIASES.get(like, like)
    _check(like, scale, seed, homophily, feature_signal, label_noise, degree_exponent, max_degree_factor)
    if like == PROTEINS:
        from .synthetic_proteins import read_synthetic_proteins, refuse_knobs

        knobs = dict(homophily=homophily, feature_signal=feature_signal, label_noise=label_noise)
        knobs.update(degree_exponent=degree_exponent, max_degree_factor=max_degree_factor)
        refuse_knobs([k for k, v in knobs.items() if v is not None and v != DEFAULTS.get(k)])
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
        choices=[*SHAPES, PROTEINS, *ALIASES],
        help="the OGB graph to imitate (ogbn-proteins: multi-label, edge features, no node features; "
        "prepare it with --node-features-from-edges)",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="node and edge count multiplier (default 1.0)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--homophily",
        type=float,
        default=None,
        help="expected share of same-class edges (default: the shape's, about the real graph's)",
    )
    parser.add_argument(
        "--feature-signal",
        type=float,
        default=DEFAULTS["feature_signal"],
        help="distance of a class's feature mean from the origin, in noise std units",
    )
    parser.add_argument(
        "--label-noise",
        type=float,
        default=DEFAULTS["label_noise"],
        help="probability that a label is replaced by a uniform random class",
    )
    parser.add_argument(
        "--degree-exponent",
        type=float,
        default=DEFAULTS["degree_exponent"],
        help="power-law tail exponent of in-degree and source popularity (> 2)",
    )
    parser.add_argument(
        "--max-degree-factor",
        type=float,
        default=DEFAULTS["max_degree_factor"],
        help="truncate the power law at about this many times the mean degree",
    )


def source_from_args(args) -> GraphSource:
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
    )
