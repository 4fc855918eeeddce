"""gnnsys: node-classification GNN training with GPU-direct feature access."""
from gnnsys.datasets import Dataset, DatasetError, load_dataset

__all__ = ["Dataset", "DatasetError", "load_dataset"]
