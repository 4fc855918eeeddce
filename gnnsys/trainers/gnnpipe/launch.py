"""Starting a pipelined run: W spawned gloo/NCCL workers (gnnsys.parallel.distributed.launch),
the workers torchrun started, or one process when W = 1."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from gnnsys.atomic import atomic_write_bytes
from gnnsys.datasets import as_dataset
from gnnsys.errors import ConfigError
from gnnsys.training.result import make_result

from .run import PipeSetup, StageRunner, prepare_setup


def pipeline_worker(ctx, setup, options, result_path, threads: int, on_epoch_end=None):
    """One worker of a pipelined run (for gnnsys.parallel.distributed.launch /
    run_from_env). setup: a PipeSetup, or under torchrun the dataset path
    (rank 0 prepares the setup and broadcasts it); threads: torch threads of
    this worker. The last stage writes the epoch records (JSON) to result_path."""
    if not isinstance(setup, PipeSetup):  # torchrun: a dataset path; rank 0 prepares, all share
        setup = ctx.ranks.broadcast_object(prepare_setup(as_dataset(setup), options) if ctx.rank == 0 else None)
    torch.set_num_threads(max(1, threads))
    history = StageRunner(setup, options, ctx.ranks, on_epoch_end).run()
    if ctx.rank == ctx.world_size - 1 and result_path is not None:
        atomic_write_bytes(result_path, json.dumps(history).encode())


def train_pipeline(dataset, options, on_epoch_end=None):
    """GNNPipe training for train_fullgraph (options already completed for the dataset).
    ConfigError for 16-mixed with several workers: each stage would have its
    own gradient scaler, and they must agree on every overflow."""
    from gnnsys.parallel.distributed import launch
    from gnnsys.parallel.ranks import Ranks

    if options.precision == "16-mixed" and options.workers > 1:
        raise ConfigError(
            "precision",
            "16-mixed runs GNNPipe with workers=1 only (the stages' gradient scalers "
            "would need a shared overflow check); use bf16-mixed",
        )

    if "TORCHELASTIC_RUN_ID" in os.environ:
        return _train_under_torchrun(dataset, options, on_epoch_end)
    setup = prepare_setup(dataset, options)
    if options.workers == 1:
        history = StageRunner(setup, options, Ranks.single(options.device), on_epoch_end).run()
        return make_result(options, history, **setup.run_facts())
    with tempfile.TemporaryDirectory(prefix="gnnpipe-") as tmp:
        out = Path(tmp) / "history.json"
        threads = max(1, torch.get_num_threads() // options.workers)
        launch(
            pipeline_worker,
            options.workers,
            (setup, options, str(out), threads, on_epoch_end),
            device=options.device,
            timeout_s=options.timeout_s,
        )
        history = json.loads(out.read_text())
    return make_result(options, history, **setup.run_facts())


def _train_under_torchrun(dataset, options, on_epoch_end=None):
    """This process is one of the W workers torchrun started (env://
    rendezvous, possibly across machines): rank 0 prepares the setup and
    broadcasts it. Returns the TrainResult on the last stage, None elsewhere."""
    from gnnsys.parallel.distributed import run_from_env, torchrun_env

    world = torchrun_env().world_size
    if world != options.workers:
        raise ConfigError("workers", f"{options.workers} requested, but torchrun started {world} processes")
    if dataset.path is None:
        raise ConfigError("dataset", "under torchrun every worker opens the dataset: pass a prepared directory")
    with tempfile.TemporaryDirectory(prefix="gnnpipe-") as tmp:
        out = Path(tmp) / "history.json"
        run_from_env(
            pipeline_worker,
            str(dataset.path),
            options,
            str(out),
            torch.get_num_threads(),
            on_epoch_end,
            device=options.device,
            timeout_s=options.timeout_s,
        )
        return make_result(options, json.loads(out.read_text())) if out.exists() else None
