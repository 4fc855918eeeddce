"""The largest values of quantities sampled on a thread while a benchmark
runs (a process's anonymous memory, a file system's use)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class Peaks:
    """Calls each probe of `probes` ({name: () -> number}) every `period`
    seconds on a thread, keeping each one's largest value; `stop()` takes a
    last sample and returns {name: peak}."""

    def __init__(self, probes: dict[str, Callable[[], float]], period: float = 0.2):
        self.probes, self.peaks = probes, dict.fromkeys(probes, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _sample(self):
        for name, probe in self.probes.items():
            self.peaks[name] = max(self.peaks[name], probe())

    def _run(self, period: float):
        while not self._stop.wait(period):
            self._sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        return dict(self.peaks)


def disk_used(path) -> int:
    """Bytes in use on the file system holding `path`."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize
