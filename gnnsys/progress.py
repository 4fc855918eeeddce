"""`Bar`: the one live progress bar every command draws on a terminal (a leaf)."""

from __future__ import annotations

from tqdm.auto import tqdm


class Bar(tqdm):
    """tqdm's live bar (a notebook's widget under Jupyter) whose `update`
    returns nothing: tqdm's returns True when it redraws, which only a
    terminal makes happen, so a caller using that value (`bar.update(n) or
    rows`) would break there alone. Every bar of the program is a Bar."""

    def update(self, n=1) -> None:
        """Count `n` more steps (redrawing when due); returns None."""
        super().update(n)
