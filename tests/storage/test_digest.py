"""storage/digest.py: XXH64 (seed 0) of packed files, whole or in pieces,
and any change to a file's bytes changes it."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnnsys.storage.digest import STRIPE, Digest, digest

# XXH64 of bytes((i * 131 + 7) % 251 for i in range(n)), seed 0, from the reference implementation (xxhash 4.1.0)
KNOWN = {0: 0xEF46DB3751D8E999, 32: 0xE4D66D9393E3A596, 64: 0x7D4E619B9AB28955, 4096: 0x16EDBCEB4F6E3735}
KNOWN[12448] = 0x25FB9F1C31AD1A93


def content(n: int) -> bytes:
    return bytes((i * 131 + 7) % 251 for i in range(n))


@pytest.mark.parametrize("n", sorted(KNOWN))
def test_the_digest_is_xxh64_whole_and_in_pieces(n):
    data = content(n)
    assert digest(data) == KNOWN[n]
    assert digest(np.frombuffer(data, np.uint8)) == KNOWN[n]  # any buffer
    if n >= 3 * STRIPE:
        pieces = Digest().update(data[:STRIPE]).update(data[STRIPE : n - STRIPE]).update(data[n - STRIPE :])
        assert pieces.value() == KNOWN[n]


@given(st.integers(0, 12448 * 8 - 1))
def test_a_flipped_bit_changes_the_digest(bit):
    data = bytearray(content(12448))
    data[bit // 8] ^= 1 << (bit % 8)
    assert digest(bytes(data)) != KNOWN[12448]


def test_two_swapped_words_change_the_digest():
    words = np.frombuffer(content(4096), np.uint64).copy()
    words[[3, 7]] = words[[7, 3]]  # the same lane, other positions
    assert digest(words) != KNOWN[4096]


def test_a_length_that_is_not_whole_stripes_is_refused():
    with pytest.raises(ValueError, match="multiples of 32 bytes, got 40"):
        digest(bytes(40))
