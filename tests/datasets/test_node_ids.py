"""Node-id files and arrays (gnnsys.datasets.node_ids): any file given as
node ids (a .npy of any dtype, text, an empty file, garbage bytes) is read
as native int64 ids or refused with one DatasetError line naming it; a bad
id is reported with its true value."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gnnsys.datasets.node_ids import node_ids, read_node_ids
from gnnsys.errors import DatasetError

SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
DTYPES = st.one_of(
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?"),
    hnp.complex_number_dtypes(),
    hnp.boolean_dtypes(),
    hnp.datetime64_dtypes(),
    hnp.timedelta64_dtypes(),
    hnp.unicode_string_dtypes(),
    hnp.byte_string_dtypes(),
    st.just(np.dtype([("a", "<i4"), ("b", "<f8")])),
)
ARRAYS = DTYPES.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4)))
NUM_NODES = 10


def _check(path, source=None):
    """read_node_ids(path) then the range check: ids equal to `source`'s (when
    given and valid) or one DatasetError line naming the file."""
    try:
        ids = node_ids(read_node_ids(path), path, NUM_NODES)
    except DatasetError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return None
    assert ids.dtype == np.int64 and ids.dtype.isnative and ids.ndim == 1
    assert ((ids >= 0) & (ids < NUM_NODES)).all()
    if source is not None:
        assert np.array_equal(ids, source.astype(np.int64))
    return ids


@SETTINGS
@given(array=ARRAYS)
def test_any_npy_is_read_or_refused_in_one_line(tmp_path, array):
    path = tmp_path / "ids.npy"
    np.save(path, array)
    ids = _check(path, array)
    if array.dtype.kind in "iu" and array.ndim == 1 and ((array >= 0) & (array < NUM_NODES)).all():
        assert ids is not None  # valid ids of any width and byte order are read


@SETTINGS
@given(
    data=st.one_of(st.binary(max_size=64), st.text(max_size=40).map(str.encode)),
    suffix=st.sampled_from([".npy", ".txt"]),
)
def test_any_bytes_are_read_or_refused_in_one_line(tmp_path, data, suffix):
    path = tmp_path / f"ids{suffix}"
    path.write_bytes(data)
    _check(path)


@pytest.mark.parametrize(
    "values, problem",
    [
        (np.array(["1", "2"]), "node ids must be integers, got strings (<U1)"),
        (np.array([b"1"]), "got bytes"),
        (np.zeros(2, "i4,f8"), "got records"),
        (np.array(["2020-01-01"], "M8[D]"), "got datetimes"),
        (np.array([1, None], dtype=object), "got Python objects"),
        (np.array([1.0]), "got floats"),
        (np.array([True]), "got booleans"),
        (np.array([[1]]), "must be a 1-D array"),
        (np.array([3, 2**64 - 1], np.uint64), "row 1: node id 18446744073709551615 out of range [0, 10)"),
        (np.array([3, -2], ">i8"), "row 1: node id -2 out of range [0, 10)"),
    ],
)
def test_bad_ids_are_named(values, problem):
    with pytest.raises(
        DatasetError, match="^ids: .*" + problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        node_ids(values, "ids", NUM_NODES)


def test_good_ids_of_any_width_and_byte_order(tmp_path):
    for dtype in (">i4", "<u2", ">u8", "i1"):
        assert node_ids(np.array([9, 0, 3], dtype), "ids", NUM_NODES).tolist() == [9, 0, 3]
    (tmp_path / "ids.txt").write_text("4\n0\n")
    assert read_node_ids(tmp_path / "ids.txt").tolist() == [4, 0]
    (tmp_path / "big.txt").write_text("1\n18446744073709551615\n")
    with pytest.raises(DatasetError, match="big.txt: row 1: column 1 holds 18446744073709551615, beyond int64"):
        read_node_ids(tmp_path / "big.txt")
    (tmp_path / "empty.npy").write_bytes(b"")
    with pytest.raises(DatasetError, match="empty.npy: cannot read"):
        read_node_ids(tmp_path / "empty.npy")
