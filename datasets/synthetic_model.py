"""The homogeneous synthetic graph's generative model (datasets/synthetic.py
describes it) and the drawing pieces the heterogeneous one
(datasets/synthetic_mag.py) reuses: seeded generators, truncated power
laws, edge chunk bounds and weighted per-class node draws."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from gnnsys.errors import DatasetError

EDGES_PER_CHUNK = 1 << 22
ROWS_PER_CHUNK = 1 << 16
CLASS_PRIOR_EXPONENT = 0.5
BAYES_SAMPLE = 4000
LOCAL_LOOP_REDRAWS = 3
_GLOBAL, _EDGES, _FEATURES, _BAYES, _COMMUNITIES = range(5)


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


def _rng(seed: int, stream: int, chunk: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, stream, chunk])


def _power_law(rng, n: int, exponent: float, max_factor: float) -> np.ndarray:
    """n weights >= 1 with density ~ w ** -exponent, truncated at about
    max_factor x the untruncated mean (inverse-CDF draw)."""
    a = exponent - 1.0
    cap = max(1.0, max_factor * a / (a - 1.0))
    low = cap**-a
    return (low + (1.0 - low) * rng.random(n)) ** (-1.0 / a)


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


def power_law_counts(rng, n: int, total: int, exponent: float, max_factor: float) -> np.ndarray:
    """n int32 counts (degrees) from a truncated power law (_power_law),
    scaled so that they sum to about `total`, randomly rounded."""
    w = _power_law(rng, n, exponent, max_factor)
    expected = w * (total / w.sum())
    return np.floor(expected + rng.random(n)).astype(np.int32)


def chunk_bounds(counts: np.ndarray) -> np.ndarray:
    """Node ids cutting nodes 0..len(counts) into runs of about
    EDGES_PER_CHUNK edges (`counts` edges per node), first 0 and last n."""
    ends = np.cumsum(counts, dtype=np.int64)
    total = int(ends[-1]) if ends.size else 0
    bounds = np.searchsorted(ends, np.arange(EDGES_PER_CHUNK, total, EDGES_PER_CHUNK), "left")
    return np.unique(np.concatenate([[0], bounds + 1, [counts.shape[0]]])).astype(np.int64)


class ClassSampler:
    """Draws of nodes weighted by `weights`, from a given class or from all
    nodes, optionally within a group (a community), by Walker alias tables
    (_alias_tables). Nodes are in by_class order, sorted by (group, class), so
    position p is node by_class[p % N]: segment g * C + c (positions 0..N)
    holds group g's class-c nodes and segment G * C + g (positions N..2N) all
    of group g's nodes. Without groups there is one group: segment c < C holds
    class c's nodes, segment C all nodes."""

    def __init__(self, classes: np.ndarray, weights: np.ndarray, num_classes: int, groups=None, num_groups: int = 1):
        n = classes.shape[0]
        positions = np.int32 if 2 * n < 2**31 else np.int64
        self.num_nodes, self.num_classes, self.num_groups = n, num_classes, num_groups
        keys = classes if groups is None else groups.astype(np.int64) * num_classes + classes
        self.by_class = np.argsort(keys, kind="stable").astype(positions)
        ordered = keys[self.by_class]
        key_start = np.searchsorted(ordered, np.arange(num_groups * num_classes + 1)).astype(np.int64)
        group_end = np.searchsorted(ordered, np.arange(1, num_groups + 1) * num_classes).astype(np.int64)
        starts = np.concatenate([key_start, n + group_end])
        self.segment_start, self.segment_size = starts[:-1], np.diff(starts)
        self.prob, self.alias = np.empty(2 * n, np.float32), np.empty(2 * n, positions)
        _alias_tables(
            weights, self.by_class, starts, self.prob, self.alias, np.empty(n, positions), np.empty(n, positions)
        )

    def has(self, classes: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """Whether group groups[i] has nodes of class classes[i] (>= 0)."""
        return self.segment_size[groups.astype(np.int64) * self.num_classes + classes] > 0

    def draw(self, rng, classes: np.ndarray, groups=None) -> np.ndarray:
        """One weighted node (int64) per entry of `classes`: from that class,
        or from all nodes where it is -1 or the class has no nodes; within
        groups[i] where groups are given (a sampler made with groups)."""
        c = self.num_classes
        whole = c * self.num_groups + (0 if groups is None else groups)
        keyed = classes if groups is None else groups.astype(np.int64) * c + classes
        known = np.where(classes >= 0, keyed, whole)
        segment = np.where(self.segment_size[known] > 0, known, whole)
        size = self.segment_size[segment]
        at = self.segment_start[segment] + np.minimum((rng.random(classes.shape[0]) * size).astype(np.int64), size - 1)
        keep = rng.random(classes.shape[0]) < self.prob[at]
        return self.by_class[np.where(keep, at, self.alias[at]) % self.num_nodes].astype(np.int64)


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
        communities: int = 1,
        locality: float = 0.0,
        shuffle_ids: bool = False,
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
        self.in_degree = power_law_counts(rng, n, self.target_edges, degree_exponent, max_degree_factor)
        self.popularity = _power_law(rng, n, degree_exponent, max_degree_factor)
        self.sampler = ClassSampler(self.z, self.popularity, c)
        self.communities, self.locality, self.shuffle_ids = communities, locality, shuffle_ids
        if communities > n:
            raise DatasetError("--communities", f"must be at most the node count {n}, got {communities}")
        if locality > 0:
            ids = _rng(seed, _COMMUNITIES).permutation(n) if shuffle_ids else np.arange(n)
            self.community = (ids * communities // n).astype(np.int32)
            self.local_sampler = ClassSampler(self.z, self.popularity, c, self.community, communities)
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
        self.num_edges = int(self.in_degree.sum(dtype=np.int64))
        self.chunk_nodes = chunk_bounds(self.in_degree)
        self.bayes = self.bayes_accuracy()
        del self.popularity  # as large as the node count; nothing after the Bayes estimate needs it

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

    def edge_chunk(self, k: int):
        """(src, dst) int64 of the in-edges of the nodes of chunk k."""
        a, b = self.chunk_nodes[k], self.chunk_nodes[k + 1]
        rng = _rng(self.seed, _EDGES, k)
        dst = np.repeat(np.arange(a, b, dtype=np.int64), self.in_degree[a:b])
        same = rng.random(dst.shape[0]) < self.p_same
        classes = np.where(same, self.z[dst], -1)
        if self.locality > 0:
            src = self._draw_local(rng, dst, classes)
        else:
            src = self.sampler.draw(rng, classes)
        loops = np.flatnonzero(src == dst)
        src[loops] = self.sampler.draw(rng, np.full(loops.shape[0], -1))
        loops = loops[src[loops] == dst[loops]]
        src[loops] = (dst[loops] + 1) % self.num_nodes
        return src, dst

    def _draw_local(self, rng, dst, classes):
        """Sources for in-edges of dst, from dst's community with probability
        `locality` (from its class there where `classes` asks, unless the
        community has none of that class: then from the class anywhere), else
        as without communities. A local draw that gives dst itself is redrawn
        the same way up to LOCAL_LOOP_REDRAWS times (a class's share of a
        community can be a few nodes), then as without communities."""
        group = self.community[dst]
        local = rng.random(dst.shape[0]) < self.locality
        asks = local & (classes >= 0)
        local[asks] = self.local_sampler.has(classes[asks], group[asks])
        src = np.empty(dst.shape[0], np.int64)
        src[~local] = self.sampler.draw(rng, classes[~local])
        src[local] = self.local_sampler.draw(rng, classes[local], group[local])
        for _ in range(LOCAL_LOOP_REDRAWS):
            loops = np.flatnonzero(local & (src == dst))
            src[loops] = self.local_sampler.draw(rng, classes[loops], group[loops])
        loops = np.flatnonzero(local & (src == dst))
        src[loops] = self.sampler.draw(rng, classes[loops])
        return src

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
