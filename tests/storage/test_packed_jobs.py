"""storage/packed_jobs.py: a window's plan runs on its own thread, so the
plan of the window after the next one is drawn while the next one is
scanned; a drop stops every job and removes what each one wrote; both threads run
below their caller's priority."""

import os
import sys
import threading

import pytest

from gnnsys.storage.packed_jobs import PACKING_NICE, WindowJobs, packing_executor
from gnnsys.storage.packer import Cancelled

TIMEOUT = 10


class FakePacker:
    """Records plans and removals; plan(first) sets `started[first]` when there
    is one and waits for `release[first]` when there is one (or a stop)."""

    def __init__(self):
        self.planned, self.removed, self.started, self.release = [], [], {}, {}
        self.restarts = 0

    def plan(self, first, count, stop):
        self.planned.append((first, count))
        if first in self.started:
            self.started[first].set()
        gate = self.release.get(first)
        while gate is not None and not gate.wait(0.01):
            if stop.is_set():
                raise Cancelled
        return f"plan {first}"

    def remove(self, first, count):
        self.removed.append(first)

    def restart(self):
        self.restarts += 1


@pytest.fixture
def jobs():
    from concurrent.futures import ThreadPoolExecutor

    packing = ThreadPoolExecutor(1)
    made = WindowJobs(FakePacker(), packing, count=lambda first: 3, planned=lambda first: first < 9)
    yield made
    made.drop()
    made.shutdown()
    packing.shutdown()


def test_the_next_plan_is_drawn_while_a_window_is_written(jobs):
    jobs.packer.started[3] = threading.Event()

    def pack(first, stop, plan):  # window 0's writing waits until window 3's plan has begun
        return plan.result(TIMEOUT), first != 0 or jobs.packer.started[3].wait(TIMEOUT)

    written = jobs.window(0, pack)
    jobs.plan(3)
    assert written.result(2 * TIMEOUT) == ("plan 0", True)
    assert jobs.window(3, pack).result(TIMEOUT) == ("plan 3", True)
    assert jobs.packer.planned == [(0, 3), (3, 3)]  # each window planned once


def test_nothing_past_the_runs_end_is_planned_or_packed(jobs):
    jobs.plan(9)
    assert jobs.window(9, lambda *a: None) is None
    assert jobs.packer.planned == []


def test_a_drop_stops_the_jobs_and_removes_every_window_but_the_one_kept(jobs):
    jobs.packer.release[6] = threading.Event()  # never set: its plan waits until stopped
    for first in (0, 3):
        jobs.window(first, lambda first, stop, plan: plan.result(TIMEOUT)).result(TIMEOUT)
    jobs.plan(6)
    stop = jobs.stop
    jobs.drop(keep=0)
    assert stop.is_set() and not jobs.stop.is_set()  # a fresh stop for the next jobs
    assert sorted(jobs.packer.removed) == [3, 6] and jobs.packer.restarts == 1  # the next plan writes its cache whole
    assert jobs.windows == {}


def priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads have priorities of their own on Linux")
def test_windows_are_drawn_and_packed_below_the_callers_priority():
    packing = packing_executor("test-pack")
    jobs = WindowJobs(FakePacker(), packing, count=lambda first: 3, planned=lambda first: first < 9)
    drawn = {}
    real_plan = jobs.packer.plan

    def plan(first, count, stop):
        drawn["priority"] = priority()
        return real_plan(first, count, stop)

    jobs.packer.plan = plan
    packed = jobs.window(0, lambda first, stop, plan: (plan.result(TIMEOUT), priority())).result(TIMEOUT)
    expected = min(19, priority() + PACKING_NICE)
    assert drawn["priority"] == expected and packed[1] == expected
    jobs.drop()
    jobs.shutdown()
    packing.shutdown()
