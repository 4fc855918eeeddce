"""`WindowJobs`: the packing of a packed tier's windows (storage/packed_source.py)
on two threads. A window's plan (storage.packer.Packer.plan: its batches
drawn and their sampled arrays written, its cache chosen) runs on a planning
thread, and its scan of the rows file and its writes on the tier's packing
thread once the plan is done. The tier asks for the plan of the window after
the next one ahead, so that it is drawn while the next one is scanned: a
window then costs the longer of the two, not their sum. Both threads run
below training's priority (`packing_executor`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from .packed_reads import quiet

PACKING_NICE = 10  # how far below the caller's priority windows are drawn and packed


def packing_executor(name: str) -> ThreadPoolExecutor:
    """One thread, named `name`, that draws or packs windows at PACKING_NICE
    below its caller's priority where threads have their own (Linux; the
    threads it starts inherit it): it takes the cores training leaves."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=_lower_priority)


def _lower_priority() -> None:
    if sys.platform.startswith("linux"):
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + PACKING_NICE)


class WindowJobs:
    """The plan and pack jobs of the windows of `packer` (a Packer), by their
    first global batch: `count(first)` batches in the window from `first`,
    `planned(first)` whether it is one of the run's. `packing`: the executor
    the scans run on (the tier's packing thread)."""

    def __init__(
        self, packer, packing: ThreadPoolExecutor, count: Callable[[int], int], planned: Callable[[int], bool]
    ):
        self.packer, self._packing, self._count, self._planned = packer, packing, count, planned
        self._planning = packing_executor("gnnsys-pack-plan")
        self.windows: dict[int, Future] = {}
        self._plans: dict[int, Future] = {}
        self.stop = threading.Event()

    def plan(self, first: int) -> None:
        """Start drawing the window from `first` (once; nothing past the run's end or for a window already packing)."""
        if self._planned(first) and first not in self.windows and first not in self._plans:
            self._plans[first] = self._planning.submit(self.packer.plan, first, self._count(first), self.stop)

    def window(self, first: int, pack: Callable) -> Future | None:
        """The packing of the window from `first`: `pack(first, stop, plan)`
        (plan: the Future of its WindowPlan) submitted now if it was not;
        None past the run's end."""
        if not self._planned(first):
            return None
        if first not in self.windows:
            self.plan(first)
            plans = self._plans  # the plan is let go once packed (a drop meanwhile makes a new dict)
            job = self._packing.submit(pack, first, self.stop, plans[first])
            job.add_done_callback(lambda _: plans.pop(first, None))
            self.windows[first] = job
        return self.windows[first]

    def forget(self, first: int) -> None:
        """The window from `first` is done with (its files are removed by the caller)."""
        self.windows.pop(first, None)

    def drop(self, keep: int | None = None) -> None:
        """Stop every job, wait them out and remove the files of every window
        but the one from `keep`; later jobs get a fresh stop, and the next
        window planned has its cache written whole (storage.packer.Packer.restart)."""
        self.stop.set()
        for first in dict.fromkeys([*self.windows, *self._plans]):
            for job in (self.windows.get(first), self._plans.get(first)):
                if job is not None:
                    job.cancel()
                    quiet(job)
            if first != keep:
                self.packer.remove(first, self._count(first))
        self.windows, self._plans, self.stop = {}, {}, threading.Event()
        self.packer.restart()

    def shutdown(self) -> None:
        """Stop the planning thread (after drop)."""
        self._planning.shutdown(wait=True)
