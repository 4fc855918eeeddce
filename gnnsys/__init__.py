"""gnnsys: node-classification GNN training with GPU-direct feature access."""
import os

# numba's and torch's OpenMP pools both busy-wait by default; on a machine with
# few cores they starve each other (an arxiv-shaped sampling epoch took 17.9 s
# instead of 3.2 s on 2 cores). Must be set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from gnnsys.datasets import (Dataset, DatasetError, load_dataset, prepare_arrays, prepare_npz,  # noqa: E402
                             prepare_ogb, prepare_planetoid, prepare_synthetic)
# imported here, not lazily: importing the submodule gnnsys.train would otherwise
# rebind the attribute `gnnsys.train` to the module. It imports no model code.
from gnnsys.train import TrainResult, train  # noqa: E402

__all__ = ["Dataset", "DatasetError", "MinibatchLoader", "TrainResult", "load_dataset", "prepare_arrays",
           "prepare_npz", "prepare_ogb", "prepare_planetoid", "prepare_synthetic", "train", "train_fullgraph"]


def __getattr__(name):
    if name == "MinibatchLoader":  # imported on first use, so `import gnnsys` stays light
        from gnnsys.loader import MinibatchLoader

        return MinibatchLoader
    if name == "train_fullgraph":
        from gnnsys.fullgraph import train_fullgraph

        return train_fullgraph
    raise AttributeError(f"module 'gnnsys' has no attribute {name!r}")
