"""WindowGrid (storage/packed_windows.py): the windows from a start batch, a
lead window of a quarter of the others and then windows of `window` batches,
cover every batch of the run once, in order, and none past its end."""

from hypothesis import given
from hypothesis import strategies as st

from gnnsys.storage.packed_windows import WindowGrid, lead_batches


@given(st.integers(1, 40), st.integers(0, 50), st.integers(1, 120))
def test_the_windows_cover_the_run_in_order_a_lead_window_first(window, start, length):
    end = start + length
    grid = WindowGrid(window, end, start)
    firsts = [start]
    while grid.planned(grid.after(firsts[-1])):
        firsts.append(grid.after(firsts[-1]))
    assert grid.count(start) == min(grid.lead, length)
    for a, b in zip(firsts, firsts[1:]):
        assert b - a == grid.count(a) == (grid.lead if a == start else window)
    assert firsts[-1] + grid.count(firsts[-1]) == end  # the last window is cut at the run's end
    for g in range(start, end):
        first = grid.first(g)
        assert first in firsts and first <= g < first + grid.count(first)


def test_the_lead_window_is_a_quarter_of_the_others():
    assert [lead_batches(w) for w in (1, 3, 4, 24, 95)] == [1, 1, 1, 6, 23]
    grid = WindowGrid(24, 96, start=24)
    assert [grid.first(g) for g in (24, 29, 30, 53, 54)] == [24, 24, 30, 30, 54]
    assert [grid.count(f) for f in (24, 30, 78)] == [6, 24, 18]  # the last one cut at the run's end
    assert grid.first(29, start=0) == 6 and grid.count(6, start=0) == 24  # windows from another start
