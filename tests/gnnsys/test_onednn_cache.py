"""gnnsys bounds torch's caches of oneDNN primitives (gnnsys/__init__.py):
each bf16 matmul shape's primitive holds buffers that grow with its rows, and
sampled minibatches bring new shapes every batch, so the default 1024-entry
caches grew a bf16-mixed run's memory by every epoch."""

import os
import subprocess
import sys

import pytest

import gnnsys

# bf16 matmuls of more distinct row counts than the caches hold, then the first
# shape again, printing oneDNN's primitive creations (verbose level 2) for it only.
PROGRAM = """
import torch, gnnsys
b = torch.ones(32, 32, dtype=torch.bfloat16)
shapes = [64 + i for i in range({distinct})]
for m in shapes:
    torch.ones(m, 32, dtype=torch.bfloat16) @ b
print("REPEAT", flush=True)
with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
    torch.ones(shapes[0], 32, dtype=torch.bfloat16) @ b
"""


def repeat_creations(distinct: int) -> list:
    """oneDNN's 'create' lines for the repeat of the first of `distinct` matmul shapes, in a fresh interpreter."""
    program = PROGRAM.format(distinct=distinct)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    return [line for line in out.split("REPEAT", 1)[1].splitlines() if ",create:" in line]


def test_import_bounds_both_caches_and_leaves_a_users_setting():
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(gnnsys.ONEDNN_CACHE_ENTRIES)
    assert os.environ["LRU_CACHE_CAPACITY"] == str(gnnsys.ONEDNN_CACHE_ENTRIES)
    user = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024", "LRU_CACHE_CAPACITY": "1024"}
    program = (
        "import os, gnnsys; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], os.environ['LRU_CACHE_CAPACITY'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, env={**os.environ, **user}
    )
    assert out.stdout.split() == ["1024", "1024"]


def test_a_shape_older_than_the_cache_is_built_again():
    """Past ONEDNN_CACHE_ENTRIES newer shapes, a shape's primitive is no longer
    cached (its repeat is a cache miss); a recent one still is (a hit)."""
    entries = gnnsys.ONEDNN_CACHE_ENTRIES
    recent = repeat_creations(entries // 2)
    if not recent:
        pytest.skip("bf16 matmuls do not build oneDNN primitives on this CPU")
    assert all("create:cache_hit" in line for line in recent), recent
    old = repeat_creations(4 * entries)
    assert old and all("create:cache_miss" in line for line in old), old
