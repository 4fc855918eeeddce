"""Pipelined layer-parallel full-graph training (GNNPipe).

The model's units (input projection, then the GNN layers) are split into S
contiguous stages, one per worker, balancing their cost with a small dynamic
program (`plan_stages`). The graph's nodes are renumbered so that C chunks are
contiguous id ranges with most of their in-neighbours inside
(`gnnsys.parallel.partition`). Every epoch the chunks flow through the stages like
microbatches, in an order reshuffled per epoch from a seed all stages share:
stage s computes chunk k while stage s+1 computes chunk k-1, activations going
forward and gradients going back with `isend`/`irecv`.

Historical embeddings. A unit that aggregates over neighbours needs its input
rows for the chunk's halo (out-of-chunk in-neighbours). Each stage keeps, per
aggregating unit, an N x d buffer of its input for all nodes: rows of chunks
already computed this epoch are fresh (and gradients flow into them), the rest
are the values of the last pass (historical; constants). The first stage
reads the input features, which are never stale. History holds training-mode
values (after dropout), like the neighbour rows single-process training
reads: the training forward stores each chunk's input, and the warm-up
(`exact_pass(refresh=True)`, layer-wise with the current weights, in training
mode) fills every buffer. Evaluation (`exact_pass()`, eval mode) leaves the
history alone, so how often one evaluates never changes training; each stage
draws its dropout masks from its own seed (`stage_seed`), not from the seed
that initialised the weights on every stage. `history_momentum` > 0
smooths the buffer (h <- m h + (1 - m) h_new), PipeGCN's staleness correction;
`fresh_grad_scale` multiplies the gradient sent into fresh out-of-chunk rows
(GNNPipe uses 2: an unbiased estimate under a random chunk order).
`refresh_every` N > 0 repeats the warm-up every N epochs: with N = 1 (the
default) every halo row a chunk reads was computed with the current weights
(only its dropout mask differs from its owner's), at the cost of one
layer-wise forward over all chunks per epoch that is not pipelined (stage
s+1 waits for stage s); N = 0 is GNNPipe as published (history only).

Staleness. Whatever the chunk order, a chunk reads the rows of the chunks
after it as history, so on an undirected graph half of the cut edges carry
values one epoch old (and send no gradient). Dense graphs with many cut
edges feel it most; refreshing the history every epoch (the default) or
fewer chunks close most of the gap, while stale gradients (PipeGCN's) and
history smoothing did not help. The measured convergence and epoch-time
figures are in benchmarks/README.md ("GNNPipe").

Schedule (GPipe): all C forwards, then all C backwards in reverse chunk order;
weight gradients accumulate over the chunks and each stage's optimiser steps
once per epoch, so weights are never stale, only embeddings. Bubble: (S-1) /
(C+S-1) of each phase. Memory per stage: the autograd state of every chunk
for its units (the same activations single-process full-graph training keeps
for those layers), plus one N x d history buffer per aggregating unit, plus
the received chunk inputs. Recomputing a chunk's forward during its backward
(GNNPipe's choice) would drop the first term to one chunk at a time; not done.

Each unit's input is made an autograd leaf per chunk, so one chunk's backward
never traverses another's graph: a chunk's gradient into fresh rows of an
earlier chunk lands in that chunk's leaf and is complete by the time the
reverse order reaches it.

Files, one job each: `stage_plan` (stage balancing), `chunks` (chunk plans
and the epoch's chunk order), `link` (send/receive), `stage` (one stage's
schedule and history), `run` (the shared setup and one stage's epochs on the
training core), `launch` (spawned workers, torchrun, or one process).
"""

from .chunks import ChunkPlan, build_chunk_plans, epoch_order
from .launch import pipeline_worker, train_pipeline
from .link import StageLink
from .run import PipeSetup, StageRunner, prepare_setup
from .stage import PipelineStage, stage_seed
from .stage_plan import estimate_unit_costs, measure_unit_costs, plan_stages

__all__ = [
    "ChunkPlan",
    "PipeSetup",
    "PipelineStage",
    "StageLink",
    "StageRunner",
    "build_chunk_plans",
    "epoch_order",
    "estimate_unit_costs",
    "measure_unit_costs",
    "pipeline_worker",
    "plan_stages",
    "prepare_setup",
    "stage_seed",
    "train_pipeline",
]
