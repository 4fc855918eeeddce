"""A synthetic graph shaped like ogbn-proteins (`gnnsys prepare synthetic --like ogbn-proteins`).

ogbn-proteins: 132,534 nodes (proteins of 8 species), 39,561,252 undirected
edges stored once (OGB adds the inverse edges), 8 edge features in [0, 1] per
edge, no node features, 112 binary tasks, split by species (86,619 / 21,236 /
24,679 nodes). The generator keeps these sizes x scale and:

1. gives node v a latent vector h_v ~ N(0, I_8) and a species (6 training
   species, one validation, one test species, sized like the real split);
2. draws each undirected edge's first end with probability proportional to a
   log-normal activity weight, and its second end from the same species with
   probability SAME_SPECIES (else from all nodes), by the same weights; a
   self-loop moves its second end to the next node of the first's species;
3. sets the edge's features to sigmoid(EDGE_SIGNAL * (h_u + h_v) / 2 + noise),
   symmetric in its ends, so an inverse edge shares them;
4. labels task t of node v 1 when w_t . h_v + b_t + logistic noise (scale
   LABEL_NOISE) > 0, with random w_t and offsets b_t that make the tasks'
   positive rates differ.

The edges come as (src, dst, row) twice per undirected edge (both directions,
one edge-feature row), as OGB loads them. Node features are derived with
`--node-features-from-edges`; they see h_v only through the noisy means of the
neighbours' edges, so a GNN stays below the oracle: the ROC-AUC of the latent
scores w_t . h_v + b_t (`ProteinsModel.latent_scores`), which know h_v
exactly. Every chunk is drawn from generators seeded by
(seed, stream, chunk), so each pass yields the same chunks.
"""

from __future__ import annotations

import numpy as np

from gnnsys.errors import DatasetError

from .source import GraphSource

NUM_NODES, NUM_EDGES, EDGE_DIM, NUM_TASKS = 132_534, 39_561_252, 8, 112
SPLIT_COUNTS = (86_619, 21_236, 24_679)
TRAIN_SPECIES = 6
LATENT_DIM = 8
SAME_SPECIES = 0.95
EDGE_SIGNAL, EDGE_NOISE, LABEL_NOISE = 1.5, 0.5, 0.5
EDGES_PER_CHUNK = 1 << 21
_GLOBAL, _EDGES, _EDGE_FEATURES = range(3)


def _rng(seed: int, stream: int, chunk: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, stream, chunk])


class ProteinsModel:
    """The drawn global state (latent vectors, species, weights, task
    parameters, labels, split) and the chunk generators."""

    def __init__(self, scale: float, seed: int):
        n = round(NUM_NODES * scale)
        counts = [round(k * scale) for k in SPLIT_COUNTS]
        if min(counts) < 1 or counts[0] < TRAIN_SPECIES:
            raise DatasetError("--scale", f"{n} nodes are too few for a species split of ogbn-proteins' shape")
        n = sum(counts)
        self.seed, self.num_nodes = seed, n
        self.num_undirected = max(1, round(NUM_EDGES * scale))
        rng = _rng(seed, _GLOBAL)
        self.latent = rng.standard_normal((n, LATENT_DIM)).astype(np.float32)
        train_species = np.array_split(np.arange(counts[0]), TRAIN_SPECIES)
        sizes = [len(s) for s in train_species] + counts[1:]
        self.species = np.repeat(np.arange(len(sizes)), sizes)
        self.species_start = np.concatenate([[0], np.cumsum(sizes)])
        weight = rng.lognormal(0.0, 1.0, n)
        self.cum_weight = np.concatenate([[0.0], np.cumsum(weight)])
        self.task_weights = (rng.standard_normal((LATENT_DIM, NUM_TASKS)) / np.sqrt(LATENT_DIM)).astype(np.float32)
        self.task_offsets = rng.uniform(-1.5, 0.5, NUM_TASKS).astype(np.float32)
        noise = rng.logistic(0.0, LABEL_NOISE, (n, NUM_TASKS)).astype(np.float32)
        self.labels = (self.latent_scores() + noise > 0).astype(np.int8)
        ends = np.cumsum(counts)
        self.splits = {
            name: np.arange(a, b, dtype=np.int64)
            for name, a, b in zip(("train", "valid", "test"), [0, *ends[:2]], ends)
        }

    def latent_scores(self) -> np.ndarray:
        """[N, tasks] w_t . h_v + b_t: the scores the labels are drawn from, noise aside."""
        return self.latent @ self.task_weights + self.task_offsets

    def _draw(self, rng, lo, hi, count):
        """`count` nodes in [lo, hi) (arrays) drawn by activity weight."""
        u = self.cum_weight[lo] + rng.random(count) * (self.cum_weight[hi] - self.cum_weight[lo])
        return np.minimum(np.searchsorted(self.cum_weight, u, "right") - 1, hi - 1)

    def num_chunks(self) -> int:
        return -(-self.num_undirected // EDGES_PER_CHUNK)

    def pairs(self, k: int):
        """The undirected edges (u, v) of chunk k, int64."""
        count = min(EDGES_PER_CHUNK, self.num_undirected - k * EDGES_PER_CHUNK)
        rng = _rng(self.seed, _EDGES, k)
        n = self.num_nodes
        u = self._draw(rng, np.zeros(count, np.int64), np.full(count, n), count)
        species = self.species[u]
        same = rng.random(count) < SAME_SPECIES
        lo = np.where(same, self.species_start[species], 0)
        hi = np.where(same, self.species_start[species + 1], n)
        v = self._draw(rng, lo, hi, count)
        loops = u == v
        a, b = self.species_start[species[loops]], self.species_start[species[loops] + 1]
        v[loops] = a + (v[loops] - a + 1) % np.maximum(b - a, 1)
        return u.astype(np.int64), v.astype(np.int64)

    def edge_chunk(self, k: int):
        """(src, dst, row) of chunk k: each undirected edge in both directions, sharing its row."""
        u, v = self.pairs(k)
        rows = np.arange(k * EDGES_PER_CHUNK, k * EDGES_PER_CHUNK + u.shape[0])
        return np.concatenate([u, v]), np.concatenate([v, u]), np.concatenate([rows, rows])

    def edge_feature_chunk(self, k: int) -> np.ndarray:
        """[edges of chunk k, 8] float32 features in [0, 1]."""
        u, v = self.pairs(k)
        noise = _rng(self.seed, _EDGE_FEATURES, k).standard_normal((u.shape[0], EDGE_DIM), dtype=np.float32)
        z = EDGE_SIGNAL * (self.latent[u] + self.latent[v]) / 2 + EDGE_NOISE * noise
        return 1.0 / (1.0 + np.exp(-z))


def refuse_knobs(given: list):
    """DatasetError naming the first knob of the class-labelled generator (datasets/synthetic.py) in `given`."""
    if given:
        raise DatasetError(
            f"--{given[0].replace('_', '-')}",
            "shapes the class-labelled graphs (arxiv, products, papers100M), not ogbn-proteins, whose model takes "
            "--scale and --seed only",
        )


def read_synthetic_proteins(scale: float = 1.0, seed: int = 0) -> GraphSource:
    """A GraphSource of a synthetic graph shaped like ogbn-proteins x `scale`
    (multi-label, edge features, no node features: prepare it with
    --node-features-from-edges); extra["synthetic"] records the parameters
    (the latent scores, the oracle's, are ProteinsModel(scale, seed).latent_scores())."""
    model = ProteinsModel(scale, seed)

    def edge_chunks():
        for k in range(model.num_chunks()):
            yield model.edge_chunk(k)

    def edge_feature_chunks():
        for k in range(model.num_chunks()):
            yield model.edge_feature_chunk(k)

    extra = {
        "like": "ogbn-proteins",
        "scale": scale,
        "seed": seed,
        "num_nodes": model.num_nodes,
        "undirected_edges": model.num_undirected,
        "directed": False,
        "num_tasks": NUM_TASKS,
        "edge_feature_dim": EDGE_DIM,
        "latent_dim": LATENT_DIM,
        "same_species_probability": SAME_SPECIES,
        "edge_signal": EDGE_SIGNAL,
        "edge_noise": EDGE_NOISE,
        "label_noise_scale": LABEL_NOISE,
        "split_order": "species",
        "positive_rate": float(model.labels.mean()),
    }
    return GraphSource(
        name=f"synthetic-ogbn-proteins-x{scale:g}",
        kind="synthetic",
        num_nodes=model.num_nodes,
        feature_dim=0,
        edge_chunks=edge_chunks,
        feature_chunks=lambda: iter(()),
        labels=model.labels,
        splits=model.splits,
        edge_file="synthetic ogbn-proteins edges",
        feature_file="synthetic ogbn-proteins (no node features)",
        label_file="synthetic ogbn-proteins labels",
        edge_feature_dim=EDGE_DIM,
        edge_feature_chunks=edge_feature_chunks,
        edge_feature_file="synthetic ogbn-proteins edge features",
        extra={"synthetic": extra},
        expected_num_edges=2 * model.num_undirected,
    )
