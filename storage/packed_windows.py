"""`WindowGrid`: which window of a packed tier (storage/packed_source.py)
holds a global batch (epoch x batches an epoch + batch).

Windows start where packing starts (`start`: the first batch of the epoch a
run starts or resumes at). The first is a lead window of a quarter of the
others' batches, so training starts once that short window is packed (a
window's scan reads the whole rows file either way, but its batches are
drawn and written in a quarter of the time); then windows of `window`
batches follow, and may cross epochs. None holds a batch at or past `end`
(the run's last batch + 1; None: no end).
"""

from __future__ import annotations


def lead_batches(window: int) -> int:
    """The batches of the lead window before windows of `window` batches: a quarter of them (at least 1)."""
    return max(1, window // 4)


class WindowGrid:
    """The windows from batch `start` (a lead window, then windows of
    `window` batches) up to `end` (None: no end); `start` is set by the tier."""

    def __init__(self, window: int, end: int | None, start: int = 0):
        self.window, self.end, self.start = int(window), end, int(start)
        self.lead = lead_batches(self.window)

    def first(self, g: int, start: int | None = None) -> int:
        """The first batch of the window holding batch `g` (>= start; windows from `start`, by default the grid's)."""
        start = self.start if start is None else start
        if g < start + self.lead:
            return start
        return start + self.lead + (g - start - self.lead) // self.window * self.window

    def count(self, first: int, start: int | None = None) -> int:
        """The batches of the window from batch `first` (the last one may be cut at `end`)."""
        n = self.lead if first == (self.start if start is None else start) else self.window
        return n if self.end is None else min(n, self.end - first)

    def after(self, first: int) -> int:
        """The first batch of the window after the one from `first`."""
        return first + (self.lead if first == self.start else self.window)

    def planned(self, g: int) -> bool:
        """Whether batch `g` is one of the run's (before `end`)."""
        return self.end is None or g < self.end
