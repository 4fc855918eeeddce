"""The largest values of quantities sampled on a thread while a benchmark
runs (a process's anonymous memory, a file system's use)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class Peaks:
    """Calls each probe of `probes` ({name: () -> number}) every `period`
    seconds on a thread, keeping each one's largest value; `take()` returns
    {name: peak} since the previous take (after a sample now) and starts
    afresh; `stop()` takes a last sample and returns {name: peak}."""

    def __init__(self, probes: dict[str, Callable[[], float]], period: float = 0.2):
        self.probes, self.peaks = probes, dict.fromkeys(probes, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _sample(self):
        values = {name: probe() for name, probe in self.probes.items()}
        with self._lock:
            for name, value in values.items():
                self.peaks[name] = max(self.peaks[name], value)

    def take(self) -> dict:
        self._sample()
        with self._lock:
            peaks, self.peaks = self.peaks, dict.fromkeys(self.probes, 0)
        return peaks

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
