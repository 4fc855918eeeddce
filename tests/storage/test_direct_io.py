"""storage/direct_io.py's aligned buffers."""

import numpy as np

from gnnsys.storage.direct_io import aligned


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
