"""The same pipeline code runs under torchrun (env:// rendezvous): the CLI
started by torchrun reports, on its last stage, the result of a run launched
by gnnsys itself."""

import json
import os
import subprocess
import sys

from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.trainers.fullgraph import train_fullgraph
from tests.conftest import random_source


def test_torchrun_equals_spawned_workers(tmp_path):
    source, _ = random_source(num_nodes=80, num_edges=400, dim=5, seed=3)
    data = write_dataset(source, tmp_path / "ds", PrepareOptions(to_undirected=True, progress=False))
    options = dict(model="sage", layers=3, hidden=8, workers=2, chunks=3, epochs=2, seed=5)
    spawned = train_fullgraph(data, progress=False, **options)
    out = tmp_path / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "-m",
        "gnnsys",
        "train",
        str(data),
        "--mode",
        "fullgraph",
        "--no-progress",
        "--json",
        str(out),
    ]
    for k, v in options.items():
        cmd += [f"--{k}", str(v)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = json.loads(out.read_text())
    assert [e["loss"] for e in ran["epochs"]] == [e["loss"] for e in spawned.epochs]
    assert ran["test"] == spawned.test
