"""The threads and queues of one pass of a MinibatchLoader: sampling threads,
one gather thread, the consumer; a stage's error re-raised in the consumer."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

_POLL_S = 0.05  # how often a blocked stage looks at the stop event


class Stopped(Exception):
    """Raised inside a stage when the pipeline is being shut down."""


class Failed:
    """A stage's exception, passed downstream in place of a batch."""

    def __init__(self, stage: str, index: int, error: BaseException):
        self.stage, self.index, self.error = stage, index, error


class Pipeline:
    """The threads and queues of one pass over the batches."""

    def __init__(self, loader, epoch: int, batches: list):
        self.loader, self.epoch, self.batches = loader, epoch, batches
        self.stop = threading.Event()
        self.gate = threading.Condition()
        self.handed_out = 0
        workers = loader.sampling_threads
        self.sampled: list[queue.Queue] = [queue.Queue() for _ in range(workers)]
        self.ready: queue.Queue = queue.Queue()
        self.threads = [
            threading.Thread(target=self._sample_loop, args=(w,), daemon=True, name=f"gnnsys-sample-{w}")
            for w in range(workers)
        ]
        self.threads.append(threading.Thread(target=self._gather_loop, daemon=True, name="gnnsys-gather"))

    def run(self):
        """Generator of the batches in order; joins the threads when it ends or is closed."""
        try:
            for t in self.threads:  # inside the try: an interrupt between two starts stops those started
                t.start()
            for _ in range(len(self.batches)):
                began = time.perf_counter()
                item = self._get(self.ready)
                wait = time.perf_counter() - began
                with self.gate:
                    self.handed_out += 1
                    self.gate.notify_all()
                if isinstance(item, Failed):
                    _reraise(item)
                mb = self.loader._hand_out(item)
                mb.timings["wait_s"] = wait
                yield mb
        finally:
            self.close()

    def close(self, timeout: float = 5.0):
        """Stop every stage and join its thread."""
        self.stop.set()
        with self.gate:
            self.gate.notify_all()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            if t.is_alive() and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def _get(self, q: queue.Queue):
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stopped from None

    def _sample_loop(self, worker: int):
        lower_priority(self.loader.nice)
        step = self.loader.sampling_threads
        for index in range(worker, len(self.batches), step):
            with self.gate:
                while (
                    index >= self.handed_out + self.loader.prefetch + self.loader.lookahead and not self.stop.is_set()
                ):
                    self.gate.wait(_POLL_S)
            if self.stop.is_set():
                return
            try:
                item = self.loader._sample(self.epoch, index, self.batches[index], worker)
            except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                self.sampled[worker].put(Failed("sample", index, e))
                return
            self.sampled[worker].put(item)

    def _sampled(self):
        """The sampled items in batch order, from the workers' queues."""
        step = self.loader.sampling_threads
        for index in range(len(self.batches)):
            yield self._get(self.sampled[index % step])

    def _gather_loop(self):
        lower_priority(self.loader.nice)
        try:
            for index, (item, window) in enumerate(self.loader._windowed(self._sampled())):
                if not isinstance(item, Failed):
                    try:
                        item = self.loader._gather(item, window)
                    except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer
                        item = Failed("gather", index, e)
                self.ready.put(item)
                if isinstance(item, Failed):
                    return
        except Stopped:
            return


def lower_priority(nice: int) -> None:
    """Raise the calling thread's OS niceness to `nice` where it is lower (on Linux,
    where niceness is per thread; elsewhere nothing changes)."""
    if sys.platform.startswith("linux"):
        tid = threading.get_native_id()
        if nice > os.getpriority(os.PRIO_PROCESS, tid):
            os.setpriority(os.PRIO_PROCESS, tid, nice)


def _reraise(failure: Failed):
    """Raise a stage's exception in the consumer, keeping its traceback."""
    error = failure.error
    if hasattr(error, "add_note"):
        error.add_note(f"(in MinibatchLoader's {failure.stage} stage, batch {failure.index})")
    raise error.with_traceback(error.__traceback__)
