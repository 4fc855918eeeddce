"""The invariants checked whenever a Dataset is made (datasets.invariants):
each broken array of a Dataset made in memory is one DatasetError naming it.
The same checks on a loaded dataset, naming its files, are rows of
tests/test_bad_input.py."""

import re

import pytest
import torch

from gnnsys.datasets import Dataset, DatasetError


def parts(**changes) -> dict:
    """The arguments of a valid 5-node, 3-class Dataset, with `changes` applied."""
    base = dict(
        name="tiny",
        indptr=torch.tensor([0, 1, 2, 3, 4, 4]),
        indices=torch.tensor([1, 2, 3, 4], dtype=torch.int32),
        features=torch.ones(5, 2),
        labels=torch.tensor([0, 1, 2, -1, 0]),
        splits={"train": torch.tensor([0, 1]), "valid": torch.tensor([2]), "test": torch.tensor([4])},
        num_classes=3,
    )
    return {**base, **changes}


CASES = {  # case: (changed arguments, the error message)
    "id out of range": (
        dict(indices=torch.tensor([1, 2, 5, 4], dtype=torch.int32)),
        "Dataset.indices: row 2: node id 5 out of range [0, 5)",
    ),
    "negative id": (dict(indices=torch.tensor([1, -3, 3, 4])), "Dataset.indices: row 1: node id -3 out of range"),
    "float ids": (dict(indices=torch.tensor([1.0, 2, 3, 4])), "Dataset.indices: expected int32 or int64, got float32"),
    "indptr decreases": (dict(indptr=torch.tensor([0, 3, 2, 3, 4, 4])), "Dataset.indptr: row 2: decreases from 3 to 2"),
    "indptr start": (dict(indptr=torch.tensor([1, 1, 2, 3, 4, 4])), "Dataset.indptr: must start with 0"),
    "indptr end": (dict(indptr=torch.tensor([0, 1, 2, 3, 3, 3])), "Dataset.indptr: ends at 3, but indices holds 4"),
    "indptr int32": (
        dict(indptr=torch.tensor([0, 1, 2, 3, 4, 4], dtype=torch.int32)),
        "Dataset.indptr: expected int64, got int32",
    ),
    "label too big": (
        dict(labels=torch.tensor([0, 3, 2, -1, 0])),
        "Dataset.labels: row 1: label 3 out of range [-1, 3)",
    ),
    "label below -1": (dict(labels=torch.tensor([0, 1, -2, -1, 0])), "Dataset.labels: row 2: label -2 out of range"),
    "labels short": (dict(labels=torch.tensor([0, 1, 2])), "Dataset.labels: holds 3 labels for 5 nodes"),
    "labels 2-D": (dict(labels=torch.zeros(5, 1, dtype=torch.long)), "Dataset.labels: expected a 1-D integer tensor"),
    "split id": (
        dict(splits={"train": torch.tensor([0, 9]), "valid": torch.tensor([2]), "test": torch.tensor([4])}),
        "Dataset.splits['train']: row 1: node id 9 out of range [0, 5)",
    ),
    "feature rows": (dict(features=torch.ones(4, 2)), "Dataset.features: holds 4 rows for 5 nodes"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_array_is_one_error_naming_it(case):
    changes, message = CASES[case]
    with pytest.raises(DatasetError, match="^" + re.escape(message)):
        Dataset(**parts(**changes))


def test_a_valid_dataset_passes():
    ds = Dataset(**parts())
    assert (ds.num_nodes, ds.num_edges, ds.num_classes) == (5, 4, 3)
