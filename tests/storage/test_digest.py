"""storage/digest.py: XXH3-64 (seed 0) of packed files, whole or in pieces,
and any change to a file's bytes changes it."""

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from gnnsys.storage.digest import Digest, digest

EMPTY = 0x2D06800538D394C2  # XXH3-64 of no bytes, seed 0: the value xxHash's own tests check


def content(n: int) -> bytes:
    return bytes((i * 131 + 7) % 251 for i in range(n))


def test_the_digest_of_nothing_is_xxh3s():
    assert digest(b"") == EMPTY == Digest().value()


@pytest.mark.parametrize("n", [1, 32, 240, 241, 4096, 12449])
@pytest.mark.parametrize("cut", [0, 1, 100])
def test_the_digest_is_the_same_whole_and_in_pieces(n, cut):
    data = content(n)
    whole = xxhash.xxh3_64_intdigest(data)
    assert digest(data) == whole
    assert digest(np.frombuffer(data, np.uint8)) == whole  # any buffer
    assert digest(memoryview(bytearray(data))) == whole
    cut = min(cut, n)
    assert Digest().update(data[:cut]).update(data[cut:]).value() == whole


@given(st.integers(0, 12448 * 8 - 1))
def test_a_flipped_bit_changes_the_digest(bit):
    data = bytearray(content(12448))
    data[bit // 8] ^= 1 << (bit % 8)
    assert digest(bytes(data)) != digest(content(12448))


def test_two_swapped_words_change_the_digest():
    words = np.frombuffer(content(4096), np.uint64).copy()
    swapped = words.copy()
    swapped[[3, 7]] = swapped[[7, 3]]
    assert digest(swapped) != digest(words)
