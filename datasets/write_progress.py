"""The progress bars of the dataset writers (a gnnsys.progress Bar, shown on a terminal only)."""

from __future__ import annotations

from gnnsys.progress import Bar


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
