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


DOCUMENTED = [
    "train",
    "train_fullgraph",
    "MinibatchLoader",
    "predict",
    "load_dataset",
    "prepare_ogb",
    "prepare_synthetic",
]  # entry points whose docstrings the site renders


@pytest.mark.parametrize("name", DOCUMENTED)
def test_entry_points_document_every_parameter(name):
    """An `Args:` section (Google style, rendered by napoleon) names every parameter of the signature."""
    import inspect

    import gnnsys

    obj = getattr(gnnsys, name)
    doc = inspect.getdoc(obj) or ""
    assert "\nArgs:\n" in doc, f"{name}: no Args: section"
    args = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    names = [
        {p.VAR_KEYWORD: "**", p.VAR_POSITIONAL: "*"}.get(p.kind, "") + p.name
        for p in signature.parameters.values()
        if p.name != "self"
    ]
    undocumented = [n for n in names if f"    {n}:" not in args]
    assert not undocumented, f"{name}: Args: does not name {undocumented}"
