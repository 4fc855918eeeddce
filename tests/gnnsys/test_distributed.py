"""What a user sees when a worker started by `launch` fails: one WorkerError
line, plus the traceback of an unexpected error in the worker that failed
first; never the survivors' communication errors or a leaked-semaphore warning."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from tqdm import tqdm

from gnnsys.errors import ConfigError

LAUNCH = """
import sys
sys.path.insert(0, sys.argv[1])  # the spawned workers import this test module
import test_distributed as me
from gnnsys.parallel.distributed import WorkerError, launch

try:
    launch(me.fail, 2, (sys.argv[2],), timeout_s=30)
except WorkerError as e:
    sys.exit(print(e, file=sys.stderr) or 2)
"""


def fail(ctx, how):
    """Both ranks hold a progress bar (tqdm's lock); rank 1 fails `how` while rank 0 waits for it."""
    with tqdm(total=1, disable=True):
        if ctx.rank == 0:
            dist.recv(torch.empty(1), src=1)
        elif how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "config":
            raise ConfigError("lr", "must be > 0")
        else:
            raise ValueError("a bug")


@pytest.mark.parametrize(
    "how, traceback, line",
    [
        ("kill", None, "worker 1 failed: killed by signal SIGKILL"),
        ("config", None, "worker 1 failed: ConfigError: lr: must be > 0"),
        ("bug", "ValueError: a bug", "worker 1 failed: ValueError: a bug"),
    ],
)
def test_a_failed_worker_is_one_line_and_a_bug_its_traceback(how, traceback, line):
    run = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(Path(__file__).parent), how], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2
    *before, last = run.stderr.splitlines()
    assert last == line
    if traceback is None:
        assert before == []
    else:  # rank 1's traceback alone: rank 0's lost connection stays quiet
        assert before[0] == "Traceback (most recent call last):" and before[-1] == traceback
        assert run.stderr.count("Traceback") == 1


@pytest.mark.parametrize("signame, status, said", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_signal_to_the_launcher_stops_every_rank_with_one_line_each(tmp_path, signame, status, said):
    """`gnnsys train --workers 2` stopped once training started (rank 0 has
    printed the row of epoch 1): every rank says so in one line, the launcher
    in one more (and where the checkpoint is, and the command that resumes),
    within seconds, and no Python or c10d C++ trace appears."""
    import time

    from gnnsys.datasets import PrepareOptions, write_dataset
    from tests.conftest import random_source

    source, _ = random_source(num_nodes=200, num_edges=2000, dim=7, seed=0)
    data = write_dataset(source, tmp_path / "ds", PrepareOptions(progress=False))
    args = ["train", str(data), "--workers", "2", "--epochs", "1000", "--batch-size", "4", "--fanouts", "3,2"]
    args += ["--hidden", "8", "--no-progress", "--checkpoint-dir", str(tmp_path / "ck")]
    # a shell starts background jobs with SIGINT ignored, which Python then keeps: give the launcher the default
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    run = subprocess.Popen(
        [sys.executable, "-m", "gnnsys", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    assert run.stdout.readline().split() == ["epoch", "loss", "train", "valid", "test", "time_s"]
    assert run.stdout.readline().split()[0] in ("1", "1*")  # rank 0's row of epoch 1: training runs
    run.send_signal(getattr(signal, signame))
    sent = time.monotonic()
    _, err = run.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert run.returncode == status
    lines = err.strip().splitlines()
    workers = [f"gnnsys worker {r}: stopped by SIGTERM" for r in (0, 1)]  # the launcher's, as it stops them
    launcher = [
        f"gnnsys train: {said}; the last checkpoint is {tmp_path / 'ck' / 'checkpoint.pt'}; to resume:",
        f"  gnnsys {' '.join(args)} --resume",
    ]
    assert sorted(lines) == sorted([*workers, *launcher]), err
