"""gnnsys.ids: index arrays moved to a device in one transfer, distinct ids sorted, ids counted where they are
distinct, and the most counted ids."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.ids import count_if_distinct, distinct_inverse, indices_on, sorted_distinct, take_most_counted
from gnnsys.storage.gather_cpu import copy_rows


def test_indices_on_the_cpu_are_views_and_elsewhere_one_transfer(monkeypatch):
    a, b = np.array([3, 1], np.int32), np.array([7, 8, 9])
    on_cpu = indices_on("cpu", a, b)
    assert [t.tolist() for t in on_cpu] == [[3, 1], [7, 8, 9]] and on_cpu[1].data_ptr() == b.ctypes.data
    copies = []
    to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *args, **kw: copies.append(kw) or to(t, *args, **kw))
    moved = indices_on("meta", a, b, np.array([], np.int64))
    assert [tuple(t.shape) for t in moved] == [(2,), (3,), (0,)] and all(t.device.type == "meta" for t in moved)
    assert copies == [{"non_blocking": True}]  # one transfer for the three arrays, not one each


def test_copy_rows_off_the_cpu_sends_both_index_arrays_in_one_transfer(monkeypatch):
    src, out = torch.empty(5, 2, device="meta"), torch.empty(4, 2, device="meta")
    copies = []
    to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *args, **kw: copies.append(args) or to(t, *args, **kw))
    copy_rows(src, np.array([4, 0]), out, np.array([1, 3]))
    assert len(copies) == 1


@given(st.lists(st.integers(-(2**40), 2**40), max_size=60), st.sampled_from([np.int32, np.int64]))
def test_sorted_distinct_is_np_uniques_result(values, dtype):
    ids = np.array(values, np.int64).astype(dtype)
    got = sorted_distinct(ids)
    want = np.unique(ids)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@given(st.lists(st.integers(-(2**40), 2**40), max_size=60), st.sampled_from([np.int32, np.int64]))
def test_distinct_inverse_is_np_uniques_result(values, dtype):
    ids = np.array(values, np.int64).astype(dtype)
    uniq, inverse = distinct_inverse(ids)
    want, want_inverse = np.unique(ids, return_inverse=True)
    assert uniq.dtype == want.dtype and np.array_equal(uniq, want)
    assert inverse.shape == ids.shape and np.array_equal(inverse, want_inverse.reshape(-1))


def test_sorted_distinct_leaves_its_input_alone():
    ids = np.array([5, 1, 5, 3])
    assert sorted_distinct(ids).tolist() == [1, 3, 5] and ids.tolist() == [5, 1, 5, 3]


@settings(deadline=None)  # the first example compiles the kernel
@given(st.lists(st.integers(0, 6), max_size=80), st.integers(0, 90), st.sampled_from([np.int32, np.int64]))
def test_take_most_counted_is_a_stable_argsorts_choice(values, k, dtype):
    counts = np.array(values, dtype)
    read = np.flatnonzero(counts)
    want = np.sort(read[np.argsort(-counts[read], kind="stable")[:k]])
    left = counts.copy()
    got = take_most_counted(left, k)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
    assert np.array_equal(left < 0, np.isin(np.arange(counts.shape[0]), want))
    assert np.array_equal(left[left >= 0], counts[left >= 0])  # the others keep their counts


@settings(deadline=None)  # the first example compiles the kernel
@given(st.lists(st.integers(0, 2**31 - 2), min_size=30, max_size=30), st.lists(st.integers(0, 29), max_size=40))
def test_count_if_distinct_counts_distinct_ids_and_leaves_repeated_ones_uncounted(counts, picks):
    counts = np.array(counts, np.int32)
    before = counts.copy()
    ids = np.array(picks, np.int64)
    distinct = np.unique(ids).shape[0] == ids.shape[0]
    assert count_if_distinct(ids, counts) == distinct
    want = before + np.bincount(ids, minlength=30).astype(np.int32) if distinct else before
    assert np.array_equal(counts, want)
