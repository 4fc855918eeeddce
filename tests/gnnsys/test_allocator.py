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
