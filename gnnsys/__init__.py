"""gnnsys: node-classification GNN training with GPU-direct feature access.

The public API is loaded lazily (PEP 562): `import gnnsys` or
`import gnnsys.datasets` loads neither torch_geometric nor the trainers;
`gnnsys.train` and the other names below import their module on first use.
docs/architecture.md maps the layers.
"""

import importlib
import os

# numba's and torch's OpenMP pools both busy-wait by default; on a machine with
# few cores they starve each other (benchmarks/README.md, "Measurements behind
# design choices"). Must be set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# torch's CPU bf16 matmuls run on oneDNN, which keeps the primitive it builds for
# each distinct shape in two caches (oneDNN's own and ideep's, 1024 entries each),
# and each primitive holds buffers that grow with the matmul's rows (about 10 MB
# at 20,000 rows). Sampled minibatches give every batch new row counts, so
# under bf16-mixed the caches kept gigabytes of primitives that are never used
# again: memory grew by every epoch (benchmarks/README.md, "Soak"). A small
# cache still holds what repeats (a full-graph epoch's few shapes). Read by
# torch when it first builds a oneDNN primitive: set before any bf16 matmul.
ONEDNN_CACHE_ENTRIES = 16
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_ENTRIES))
os.environ.setdefault("LRU_CACHE_CAPACITY", str(ONEDNN_CACHE_ENTRIES))

_API = {  # public name -> the module that defines it
    "ConfigError": "gnnsys.errors",
    "DatasetError": "gnnsys.errors",
    "GnnsysError": "gnnsys.errors",
    "GPUUnavailableError": "gnnsys.errors",
    "Dataset": "gnnsys.datasets",
    "load_dataset": "gnnsys.datasets",
    "prepare_arrays": "gnnsys.datasets",
    "prepare_npz": "gnnsys.datasets",
    "prepare_ogb": "gnnsys.datasets",
    "prepare_planetoid": "gnnsys.datasets",
    "prepare_synthetic": "gnnsys.datasets",
    "MinibatchLoader": "gnnsys.loading.loader",
    "BatchOptions": "gnnsys.loading.options",
    "PipelineOptions": "gnnsys.loading.options",
    "SamplingOptions": "gnnsys.loading.options",
    "FullGraphOptions": "gnnsys.training.fullgraph_options",
    "MinibatchOptions": "gnnsys.training.options",
    "TrainResult": "gnnsys.training.result",
    "train": "gnnsys.api",
    "HeteroDataset": "gnnsys.datasets",
    "HeteroOptions": "gnnsys.training.hetero_options",
    "train_fullgraph": "gnnsys.trainers.fullgraph",
    "predict": "gnnsys.inference.prediction",
    "PredictOptions": "gnnsys.inference.prediction_options",
    "HeteroPredictOptions": "gnnsys.inference.prediction_options",
}

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'gnnsys' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
