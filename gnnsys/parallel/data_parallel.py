"""Data-parallel training: W ranks, each on its own shard of every epoch's
seeds, with gradients averaged by DistributedDataParallel.

How a run starts (`run_ranks`): `options.workers` W > 1 spawns W processes
on this machine (`gnnsys.parallel.distributed.launch`); under `torchrun` (detected by
TORCHELASTIC_RUN_ID, as GNNPipe does) this process is one of the WORLD_SIZE
ranks torchrun started, on one machine or several (`run_from_env`), and
`options.workers` is WORLD_SIZE (`torchrun_options`). The trainer passes its
per-rank function; this module never imports a trainer.

What every rank shares, and what rank 0 alone does:
- the model starts from the same seed and DDP averages gradients after each
  backward, so every rank holds the same parameters after every step; then
  each rank draws its dropout masks from its own stream (`seed_rank`);
- an epoch's loss is the mean over all ranks' seeds (`gnnsys.parallel.ranks.Ranks.mean`);
- layer-wise evaluation (`split_inference`) gives every layer's nodes to the
  ranks in equal slices and all-gathers each layer's outputs (through
  scratch files): each rank computes 1/W of the streaming layer-wise
  inference and all get the same logits and scores; sampled evaluation
  (gnnsys.trainers.minibatch) all-gathers the logits of each rank's slice of the
  evaluated nodes;
- rank 0 writes the checkpoint (with every rank's RNG state) and the result;
  a checkpoint is complete on disk before any rank starts the next epoch.
A W-rank checkpoint resumes only with the same W (`workers` is part of the
resume key); rank 0 reads it and sends it to the others, so the ranks of a
multi-machine run need no shared file system for it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gnnsys.atomic import atomic_write_bytes
from gnnsys.datasets.file_identity import dataset_handle
from gnnsys.errors import ConfigError
from gnnsys.inference.layerwise import DEFAULT_BUDGET, check_streaming, stream_layer, streaming
from gnnsys.inference.rows_io import ArraySink, ScratchRows
from gnnsys.scratch import owned_temporary_directory
from gnnsys.training.checkpoints import (
    FILE,
    load_training_state,
    note_resume,
    restore_training_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
    training_state,
)


def under_torchrun() -> bool:
    """True when this process was started by torchrun."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def torchrun_options(options):
    """`options` with workers = torchrun's WORLD_SIZE (a `--workers` left at
    1 takes it) and the epoch table on rank 0 only; ConfigError when another
    worker count was asked for, or for torchrun variables that are missing
    or out of range (torchrun_env)."""
    from gnnsys.parallel.distributed import torchrun_env

    env = torchrun_env()
    if options.workers not in (1, env.world_size):
        raise ConfigError("workers", f"{options.workers} requested, but torchrun started {env.world_size} processes")
    return options.replace(workers=env.world_size, epoch_table=options.epoch_table and env.rank == 0)


def run_ranks(worker, dataset, options, on_epoch_end=None) -> dict | None:
    """Run `worker(ctx, dataset, options, result_path, threads, on_epoch_end)`
    on every rank: W spawned processes (each with 1/W of this process's torch
    threads), or this process as one rank under torchrun. Returns what rank 0
    left at result_path (`read_rank_result`); None in the other torchrun ranks.
    Spawned workers get the dataset's path and the identities of the files
    this process loaded, and refuse files that are not those (a Dataset
    without a path is pickled);
    under torchrun every rank opens the dataset itself."""
    from gnnsys.parallel.distributed import launch, run_from_env

    device = options.device  # rank r's own device: gnnsys.parallel.ranks.rank_device
    with owned_temporary_directory("gnnsys-dp-") as tmp:
        out = tmp / "result.pt"
        if under_torchrun():
            run_from_env(worker, dataset, options, str(out), torch.get_num_threads(), on_epoch_end, device=device)
        else:
            threads = max(1, torch.get_num_threads() // options.workers)
            data = dataset_handle(dataset)  # a worker opens the files this process loaded, or stops
            launch(worker, options.workers, (data, options, str(out), threads, on_epoch_end), device=device)
        return read_rank_result(out) if out.exists() else None


def rank_options(options, device: torch.device, rank: int):
    """The options rank `rank` trains with: its own device (cuda:LOCAL_RANK),
    progress bars and the epoch table on rank 0 only."""
    return options.replace(
        device=str(device),
        progress=options.progress and rank == 0,
        epoch_table=options.epoch_table and rank == 0,
    )


def seed_rank(seed: int, rank: int):
    """Seed torch's generator with a stream of its own for rank `rank` (after
    the model's shared initialisation): the ranks' dropout masks are then
    independent. (A CPU dropout draws one seed per call, so ranks seeded alike
    would draw the same masks.)"""
    torch.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0]))


def rank_slice(ids: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s contiguous slice of `ids` (distinct ids), every slice of
    length ceil(len / world_size): the slices, concatenated, are `ids`
    repeated cyclically, so they start with `ids` and no slice holds an id
    twice (a sampler refuses repeated seeds)."""
    share = -(-ids.shape[0] // world_size)
    positions = torch.arange(rank * share, (rank + 1) * share)
    return ids[positions % max(ids.shape[0], 1)]


@torch.no_grad()
def split_inference(
    model,
    dataset,
    nodes: torch.Tensor,
    batch_size: int,
    device: torch.device,
    features,
    ranks,
    *,
    host_mem_budget=None,
    scratch_dir=None,
    dtype: str = "float32",
) -> torch.Tensor:
    """Streaming `layerwise_inference` of `model` for `nodes`, each layer's
    targets (every node, `nodes` for the last layer) cut into one equal
    contiguous slice per rank of `ranks` (`rank_slice`), each computing its own
    into a scratch file; the slices are all-gathered after each hidden layer,
    a bounded number of rows at a time, into every rank's own scratch file
    (ranks need no shared file system), and after the last layer into the
    [len(nodes), out_dim] CPU tensor every rank returns. `features` is read
    by one rank at a time (the bottom tier: a table or the SSD tier, not a
    collective cache); host_mem_budget, scratch_dir, dtype: as in
    `layerwise_inference`."""
    check_streaming(batch_size, host_mem_budget, dtype)
    rank, world_size = ranks.rank, ranks.world_size
    layers = list(model.layers)
    everyone = torch.arange(dataset.num_nodes)
    budget = DEFAULT_BUDGET if host_mem_budget is None else int(host_mem_budget)
    with streaming(model, dataset, layers, features, scratch_dir) as run:
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            targets = nodes if last else everyone
            mine = rank_slice(targets, rank, world_size)
            local = (
                ArraySink(np.empty((mine.shape[0], layer.out_dim), np.float32))
                if last
                else ScratchRows(run.tmp, f"layer{i + 1}-rank{rank}.bin", mine.shape[0], layer.out_dim, dtype)
            )
            stream_layer(
                layer,
                dataset,
                run.source,
                mine,
                local,
                degree=run.degree,
                batch_size=batch_size,
                device=device,
                host_mem_budget=budget,
                desc=f"inference layer {i + 1}/{len(layers)}",
                index=i + 1,
            )
            run.drop_input()
            if last:
                return ranks.all_gather_rows(torch.from_numpy(local.array))[: targets.shape[0]]
            run.source = _gather_rows(
                local,
                ScratchRows(run.tmp, f"layer{i + 1}.bin", targets.shape[0], layer.out_dim, dtype),
                ranks,
                budget,
            )


def _gather_rows(local, full, ranks, budget: int):
    """All-gather every rank's `local` ScratchRows (its `rank_slice`, equal
    lengths) into `full` (the first full.num_rows rows of the slices in rank
    order), about budget / 4 bytes at a time; returns full's FileRows. A
    collective: every rank calls it."""
    world_size = ranks.world_size
    mine = local.rows()
    try:
        share = mine.num_rows
        step = max(1, min(share, budget // 4 // max(world_size * 4 * full.dim, 1)))
        mine.reserve(step)
        for lo in range(0, share, step):
            hi = min(lo + step, share)
            out = ranks.all_gather_rows(mine.read(lo, hi)).view(world_size, hi - lo, full.dim)
            for q in range(world_size):
                start = q * share + lo  # where rank q's rows lo:hi sit in the concatenated slices
                keep = max(0, min(hi - lo, full.num_rows - start))
                if keep:
                    full.write(start, out[q, :keep])
    finally:
        mine.close()
        local.remove()
    return full.rows()


def save_rank_checkpoint(
    options, epochs_done: int, history: list, model, optimizer, ranks, precision=None, control=None
):
    """Every rank's RNG state to rank 0, which writes the checkpoint (a
    collective: every rank of `ranks` calls it; `precision`, `control`: see
    `training_state`); returns once the file is in place."""
    states = ranks.all_gather_object(rng_state())
    if ranks.rank == 0:
        save_checkpoint(
            options.checkpoint_dir,
            training_state(
                options, epochs_done, history, model, optimizer, precision=precision, control=control, rng_ranks=states
            ),
        )
    ranks.barrier()


def resume_ranks(options, model, optimizer, ranks, precision=None, control=None) -> tuple[int, list]:
    """For `options.resume` on every rank: rank 0 reads the checkpoint and
    sends it to all; each restores model, optimizer, `precision`'s gradient
    scaler, `control` (an EpochControl) and its own RNG state.
    Returns (epochs done, history); (0, []) when there is no checkpoint."""
    rank = ranks.rank
    state = ranks.broadcast_object(load_training_state(options.checkpoint_dir) if rank == 0 else None)
    if state is None:
        if rank == 0:
            note_resume(options.checkpoint_dir, 0, options.epochs)
        return 0, []
    if rank > 0:  # rank 0 checked the device; the others train on their own
        options = options.replace(device=state["options"]["device"])
    done, history = restore_training_state(
        state, Path(options.checkpoint_dir) / FILE, options, model, optimizer, precision, control
    )
    set_rng_state(state["extra"]["rng_ranks"][rank])
    if rank == 0:
        note_resume(options.checkpoint_dir, done, options.epochs, control is not None and control.stopped)
    return done, history


def write_rank_result(path, history: list, model: nn.Module):
    """Rank 0's epoch records and final weights, written atomically to `path`."""
    buf = io.BytesIO()
    torch.save({"history": history, "model": model.state_dict()}, buf)
    atomic_write_bytes(path, buf.getvalue())


def read_rank_result(path) -> dict:
    """{"history", "model" (a state dict)} written by `write_rank_result`."""
    return torch.load(path, map_location="cpu", weights_only=True)
