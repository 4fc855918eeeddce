"""Progress bars: `Bar`, the one live bar every command draws on a terminal,
and the bars of the dataset writers (shown on a terminal only)."""

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


def progress_bar(opts, total, desc, unit):
    """A Bar of `total` `unit`s named `desc`, shown when opts.progress
    and stderr is a terminal (so logs and captured stderr keep just the messages)."""
    return Bar(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        disable=None if opts.progress else True,
        dynamic_ncols=True,
        leave=False,
    )


class Phases:
    """One progress bar per phase of the edge passes (`bar` of write_csc);
    each call closes the last. `label` (a relation's name) prefixes the phases."""

    def __init__(self, opts, label: str = ""):
        self.opts, self.bar, self.label = opts, None, label

    def __call__(self, desc, total):
        self.close()
        unit = "edges" if desc != "sort buckets" else "buckets"
        self.bar = progress_bar(self.opts, total, f"{self.label}: {desc}" if self.label else desc, unit)
        return self.bar.update

    def close(self):
        if self.bar is not None:
            self.bar.close()
