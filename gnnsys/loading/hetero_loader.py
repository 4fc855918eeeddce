"""`HeteroMinibatchLoader`: MinibatchLoader's pipeline (sampling threads, a
gather thread, prefetch, CUDA streams, lookahead windows) over a
HeteroDataset, with the features of every featured node type gathered from
that type's own FeatureSource."""

from __future__ import annotations

from gnnsys.loading.loader import FeatureRows, MinibatchLoader
from gnnsys.loading.options import SamplingOptions
from gnnsys.samplers.hetero import HeteroMiniBatch, HeteroNeighborSampler


class HeteroMinibatchLoader(MinibatchLoader):
    """Iterate over the HeteroMiniBatches of one split of a HeteroDataset.

    Takes MinibatchLoader's arguments, with these differences: the split's
    ids are target nodes; sampling: fanouts per layer (an int, or a
    {relation: count} dict; gnnsys.samplers.hetero.relation_fanouts) with
    method and replace for the "cpu" sampler (the only kind: the relations
    are sampled by the numba kernels), or a HeteroNeighborSampler object;
    features: {node type: FeatureSource} of the types whose rows are
    gathered (default: the dataset's tables, every type that has features);
    x_dtype: one dtype, or {node type: dtype}. Each batch's `x` is {node type:
    rows of its input nodes}; with lookahead K, each type's source gets that
    type's input ids of the K batches sampled ahead (every source then needs a cache).
    """

    def _make_sampler(self, sampling: SamplingOptions, seed: int):
        if not isinstance(sampling.sampler, str):
            return sampling.sampler
        if sampling.sampler != "cpu":
            raise ValueError(
                f"sampler {sampling.sampler!r}: a heterogeneous graph is sampled by the CPU sampler ('cpu')"
            )
        assert sampling.fanouts is not None  # SamplingOptions requires them for a named sampler
        return HeteroNeighborSampler.from_dataset(
            self.dataset, list(sampling.fanouts), seed=seed, method=sampling.method, replace=sampling.replace
        )

    def _row_buffers(self) -> dict:
        unknown = sorted(set(self.features) - set(self.dataset.node_types))
        if unknown:
            raise ValueError(f"features for unknown node types {unknown}; types: {', '.join(self.dataset.node_types)}")
        dtypes = self.x_dtype if isinstance(self.x_dtype, dict) else dict.fromkeys(self.features, self.x_dtype)
        return {
            t: FeatureRows(source, dtypes[t], self.prefetch + 3, self.lookahead) for t, source in self.features.items()
        }

    def _window_ids(self, mb: HeteroMiniBatch) -> dict:
        return {t: self._to_host(mb.input_nodes[t]) for t in self._rows}

    def _set_window(self, window: list):
        for t, rows in self._rows.items():
            rows.source.set_window([ids[t] for ids in window])

    def _gather_rows(self, mb: HeteroMiniBatch, stream) -> list:
        mb.x, pending = {}, []
        for t, rows in self._rows.items():
            mb.x[t], gathering = self._gather_from(rows, mb.input_nodes[t], stream)
            pending.append(gathering)
        return pending
