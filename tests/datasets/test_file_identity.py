"""A run holds the dataset it started with: a dataset replaced while it is
loaded (`prepare --overwrite` of the same directory) stays invisible to the
arrays it mapped, and every reader that opens a file again (layer-wise
inference, the SSD tier, a worker process, --verify) either reads the file
it loaded or stops with one line naming it: never half old, half new."""

import numpy as np
import pytest
import torch

from gnnsys import DatasetError, train
from gnnsys.datasets import PrepareOptions, as_dataset, load_dataset, write_dataset
from gnnsys.datasets.file_identity import check_unchanged, dataset_handle
from gnnsys.inference.rows_io import input_rows
from gnnsys.storage import HOMOGENEOUS, build_store
from gnnsys.storage.ssd import SSDFeatures
from tests.conftest import random_source

FAST = dict(fanouts=[3, 2], hidden=8, batch_size=8, progress=False, prefetch=1)


def replace(path, seed=1):
    """Prepare another dataset over `path`, as `gnnsys prepare --overwrite` does."""
    source, _ = random_source(num_nodes=60, seed=seed)
    write_dataset(source, path, PrepareOptions(overwrite=True, progress=False))


@pytest.fixture
def loaded(make_dataset):
    return make_dataset(num_nodes=60)[0]


def test_the_mapped_arrays_keep_the_old_dataset(loaded):
    before = loaded.features[torch.arange(60)].clone()
    replace(loaded.path)
    assert torch.equal(loaded.features[torch.arange(60)], before)
    assert not torch.equal(load_dataset(loaded.path).features[torch.arange(60)], before)


def test_readers_that_open_a_file_again_refuse_a_replaced_one(loaded):
    input_rows(loaded).close()  # the file it loaded: reads
    SSDFeatures(loaded.features, direct=False, engine="threads").close()
    replace(loaded.path)
    for open_again in (
        lambda: input_rows(loaded),
        lambda: SSDFeatures(loaded.features, direct=False, engine="threads"),
        lambda: build_store({HOMOGENEOUS: loaded.features}, degree={HOMOGENEOUS: None}, features="ssd", progress=False),
    ):
        with pytest.raises(DatasetError, match=r"features.bin: was replaced or changed since this run loaded"):
            open_again()
    with pytest.raises(DatasetError, match=r"meta.json: was replaced or changed since this run loaded"):
        check_unchanged(loaded)


def test_a_worker_opens_the_files_its_parent_loaded_or_stops(loaded):
    handle = dataset_handle(loaded)
    assert as_dataset(handle).files == loaded.files  # unchanged: the same files
    replace(loaded.path)
    with pytest.raises(DatasetError, match="was replaced or changed since this run loaded the dataset"):
        as_dataset(handle)


def test_a_dataset_replaced_between_epochs_stops_the_run_at_evaluation(loaded):
    def overwrite_after_the_first_epoch(record):
        if record["epoch"] == 0:
            replace(loaded.path)

    with pytest.raises(DatasetError, match="was replaced or changed since this run loaded"):
        train(
            loaded,
            epochs=3,
            features="cpu-gather",
            eval="layerwise",
            on_epoch_end=overwrite_after_the_first_epoch,
            **FAST,
        )


def test_a_file_replaced_while_the_dataset_is_loading_is_refused(loaded, monkeypatch):
    from gnnsys.datasets import open_arrays

    real = open_arrays.load_int_array

    def replace_labels_midway(path, name, mmap=False, record=None):
        out = real(path, name, mmap, record)
        if name == "labels.npy":
            np.save(path / "labels.npy", np.zeros(60, np.int64))  # a new file (new inode) after it was read
        return out

    monkeypatch.setattr(open_arrays, "load_int_array", replace_labels_midway)
    from gnnsys.datasets import dataset as dataset_module

    monkeypatch.setattr(dataset_module, "load_int_array", replace_labels_midway)
    with pytest.raises(DatasetError, match="labels.npy: was replaced or changed"):
        load_dataset(loaded.path)
