"""The `gpu` marker (tests/conftest.py): its tests skip without CUDA and run with it."""

from pathlib import Path

import pytest
import torch

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
MARKED = """
import pytest

@pytest.mark.gpu
def test_on_gpu():
    pass

def test_anywhere():
    pass
"""


@pytest.fixture
def conftest(request):
    """The tests/conftest.py module this session loaded."""
    plugins = request.config.pluginmanager.get_plugins()
    return next(p for p in plugins if Path(getattr(p, "__file__", "") or "") == CONFTEST)


@pytest.mark.parametrize("cuda", [False, True])
def test_gpu_marker_skips_without_cuda(pytester, conftest, monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    pytester.makeini("[pytest]\nmarkers = gpu: needs a CUDA GPU\n")
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-rs", plugins=[conftest])
    if cuda:
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["SKIPPED * needs a CUDA GPU"])
