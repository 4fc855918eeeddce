"""Each public package lists its public names in `__all__`, and every listed name resolves."""

import importlib

import pytest

PACKAGES = [
    "gnnsys",
    "gnnsys.datasets",
    "gnnsys.samplers",
    "gnnsys.storage",
    "gnnsys.storage.cache",
    "gnnsys.training",
    "gnnsys.trainers.gnnpipe",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_names_that_resolve(name):
    module = importlib.import_module(name)
    assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


def test_loader_and_its_options_are_public():
    import gnnsys

    assert {"MinibatchLoader", "SamplingOptions", "BatchOptions", "PipelineOptions"} <= set(gnnsys.__all__)
