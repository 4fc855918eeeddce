"""gnnsys.datasets: the on-disk dataset format, its readers and writer
(below samplers/ and the trainers; a Dataset's features are a
gnnsys.storage RowTable)."""

from gnnsys.errors import DatasetError

from .arrays import read_arrays
from .dataset import Dataset, as_dataset, load_dataset
from .hetero_dataset import HeteroDataset
from .npz import read_npz
from .ogb import read_ogb
from .planetoid import read_planetoid
from .prepare import prepare_arrays, prepare_npz, prepare_ogb, prepare_planetoid, prepare_synthetic
from .source import GraphSource
from .writer import PrepareOptions, write_dataset

__all__ = [
    "Dataset",
    "DatasetError",
    "GraphSource",
    "HeteroDataset",
    "PrepareOptions",
    "as_dataset",
    "load_dataset",
    "prepare_arrays",
    "prepare_npz",
    "prepare_ogb",
    "prepare_planetoid",
    "prepare_synthetic",
    "read_arrays",
    "read_npz",
    "read_ogb",
    "read_planetoid",
    "write_dataset",
]
