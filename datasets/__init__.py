"""gnnsys.datasets: the on-disk dataset format, its readers and writer."""
from .dataset import Dataset, load_dataset
from .errors import DatasetError
from .source import GraphSource
from .writer import PrepareOptions, write_dataset

__all__ = ["Dataset", "DatasetError", "GraphSource", "PrepareOptions", "load_dataset", "write_dataset"]
