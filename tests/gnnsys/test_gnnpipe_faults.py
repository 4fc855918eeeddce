"""A worker that raises or dies stops every worker within seconds with an
error naming it (one line through the CLI); a pipelined run killed mid-way
resumes from per-worker checkpoints to the uninterrupted result."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gnnsys.parallel.distributed import WorkerError, launch

sys.path.insert(0, str(Path(__file__).parent))  # spawned workers import this module by name
import test_gnnpipe_faults as me  # noqa: E402
from test_gnnpipe import FAST, tiny_dataset, trajectory  # noqa: E402

BOUND_S = 40  # process start-up (importing torch) dominates on a loaded 2-core machine


def misbehave(ctx, how):
    """Rank 1 fails while rank 0 waits for its message."""
    if ctx.rank == 0:
        buf = torch.empty(3)
        dist.recv(buf, src=1)
    elif how == "raise":
        raise ValueError("boom in stage 1")
    elif how == "exit":
        os._exit(3)
    elif how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def crash_after_second_epoch(record):
    if record["epoch"] == 1 and record["rank"] == 1:
        raise RuntimeError("injected crash")


@pytest.mark.parametrize(
    "how, cause",
    [("raise", "ValueError: boom in stage 1"), ("exit", "exited with status 3"), ("kill", "killed by signal SIGKILL")],
)
def test_failing_worker_stops_everyone_with_a_named_error(how, cause):
    t = time.monotonic()
    with pytest.raises(WorkerError, match=f"^worker 1 failed: {cause}") as info:
        launch(me.misbehave, 2, (how,), timeout_s=30)
    assert info.value.rank == 1
    assert time.monotonic() - t < BOUND_S


def test_pipeline_resumes_from_worker_checkpoints(tmp_path):
    from gnnsys.trainers.fullgraph import train_fullgraph

    ds = tiny_dataset()
    full = train_fullgraph(ds, workers=1, chunks=2, **dict(FAST, epochs=3))
    with pytest.raises(WorkerError, match="worker 1 failed: RuntimeError: injected crash"):
        train_fullgraph(
            ds,
            workers=2,
            chunks=2,
            checkpoint_dir=tmp_path,
            on_epoch_end=me.crash_after_second_epoch,
            **dict(FAST, epochs=3),
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker0", "worker1"]
    resumed = train_fullgraph(ds, workers=2, chunks=2, checkpoint_dir=tmp_path, resume=True, **dict(FAST, epochs=3))
    for a, b in zip(trajectory(full), trajectory(resumed)):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


def sigkill_rank_1(record):
    if record["rank"] == 1:
        os.kill(os.getpid(), signal.SIGKILL)


KILL_A_WORKER = """
import sys
sys.path.insert(0, sys.argv[1])  # the spawned workers import the hook's module too
import gnnsys.trainers.fullgraph
import test_gnnpipe_faults as me
from gnnsys.cli import main

real = gnnsys.trainers.fullgraph.train_fullgraph
gnnsys.trainers.fullgraph.train_fullgraph = lambda path, options: real(path, options, on_epoch_end=me.sigkill_rank_1)
sys.exit(main(sys.argv[2:]))
"""


def test_killed_worker_is_one_line_through_the_cli(make_dataset):
    """No gloo traceback from the surviving worker, no leaked-semaphore warning."""
    ds, _ = make_dataset()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            KILL_A_WORKER,
            str(Path(__file__).parent),
            "train",
            str(ds.path),
            "--mode",
            "fullgraph",
            "--workers",
            "2",
            "--layers",
            "2",
            "--hidden",
            "8",
            "--epochs",
            "3",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=3 * BOUND_S,
    )
    assert (run.returncode, run.stderr) == (2, "gnnsys train: error: worker 1 failed: killed by signal SIGKILL\n")
