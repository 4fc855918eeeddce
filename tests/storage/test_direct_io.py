"""storage/direct_io.py's aligned buffers."""

import mmap
import sys

import numpy as np
import pytest

from gnnsys.storage.direct_io import HUGE_PAGE, aligned


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def test_aligned_buffers_are_page_aligned_private_memory_counted_as_anonymous():
    """What the SSD and packed tiers read into is process memory the RSS
    figures (RssAnon) count, not shared memory beside them."""
    nbytes = 64 << 20
    before = rss_kib("RssAnon"), rss_kib("RssShmem")
    buffer = aligned(nbytes)
    rows = np.frombuffer(buffer, np.uint8)
    rows[::4096] = 1  # commits every page
    anon, shmem = rss_kib("RssAnon") - before[0], rss_kib("RssShmem") - before[1]
    assert rows.ctypes.data % 4096 == 0
    assert anon >= 0.9 * nbytes / 1024 and shmem < 0.1 * nbytes / 1024


def vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(part, 16) for part in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"), reason="Linux only")
@pytest.mark.parametrize("nbytes,asks", [(HUGE_PAGE - 4096, False), (HUGE_PAGE, True), (24 << 20, True)])
def test_buffers_of_a_huge_page_or_more_ask_for_huge_pages(nbytes, asks):
    """A buffer that spans a 2 MiB page is marked for transparent huge pages
    (smaps' `hg`: MADV_HUGEPAGE); a smaller one is left as it is."""
    buffer = aligned(nbytes)
    address = np.frombuffer(buffer, np.uint8).ctypes.data
    assert ("hg" in vm_flags(address)) is asks
