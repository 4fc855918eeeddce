"""gnnsys: node-classification GNN training with GPU-direct feature access."""
from gnnsys.datasets import Dataset, DatasetError, load_dataset

# imported on first use, so `import gnnsys` stays light
_LAZY = {"train": "gnnsys.train", "TrainResult": "gnnsys.train", "MinibatchLoader": "gnnsys.loader"}

__all__ = ["Dataset", "DatasetError", "MinibatchLoader", "TrainResult", "load_dataset", "train"]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gnnsys' has no attribute {name!r}")
