import ctypes
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc malloc (mallinfo2) only",
)

# mmap'd bytes (mallinfo2's hblkhd) while a 64 MiB tensor is alive, in a fresh interpreter
PROBE = """
import ctypes, sys, torch
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
if sys.argv[1] == "retain":
    from gnnsys.runtime.allocator import retain_freed_memory
    assert retain_freed_memory() and retain_freed_memory()
before = mallinfo2().hblkhd
t = torch.ones(16 << 20)
print(mallinfo2().hblkhd - before)
"""


@glibc
@pytest.mark.parametrize("mode, mmapped", [("default", True), ("retain", False)])
def test_large_blocks_stop_being_mmapped(mode, mmapped):
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    grew = int(out.stdout.split()[-1])
    assert (grew >= 64 << 20) == mmapped


# anonymous memory after freeing 64 MiB the heap keeps, then after release_freed_memory, in a fresh interpreter
RELEASE = """
import torch
from gnnsys.host_memory import anonymous_bytes
from gnnsys.runtime.allocator import release_freed_memory, retain_freed_memory
assert retain_freed_memory()  # large blocks from the heap, kept when freed
t = torch.ones(16 << 20)
small = torch.ones(1)  # above it in the heap, so that freeing it does not free the heap's top
del t
kept = anonymous_bytes()
assert release_freed_memory()
print(kept, anonymous_bytes())
"""


@glibc
def test_release_hands_the_heaps_freed_memory_back():
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True)
    kept, after = (int(v) for v in out.stdout.split()[-2:])
    assert after < kept - (60 << 20)
