"""gnnsys: node-classification GNN training with GPU-direct feature access."""
from gnnsys.datasets import Dataset, DatasetError, load_dataset
# imported here, not lazily: importing the submodule gnnsys.train would otherwise
# rebind the attribute `gnnsys.train` to the module. It imports no model code.
from gnnsys.train import TrainResult, train

__all__ = ["Dataset", "DatasetError", "MinibatchLoader", "TrainResult", "load_dataset", "train"]


def __getattr__(name):
    if name == "MinibatchLoader":  # imported on first use, so `import gnnsys` stays light
        from gnnsys.loader import MinibatchLoader

        return MinibatchLoader
    raise AttributeError(f"module 'gnnsys' has no attribute {name!r}")
