"""One stage's run: the setup every worker shares (`prepare_setup`) and the
epochs of one stage (`StageRunner`: warm-up, pipelined epochs, refreshes,
evaluation, checkpoints), on the shared training core."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnsys.errors import DatasetError
from gnnsys.models.units import units_for
from gnnsys.runtime.precision import input_dtype, make_precision
from gnnsys.samplers import Block
from gnnsys.training.checkpoints import (
    FILE,
    load_training_state,
    note_resume,
    restore_training_state,
    save_checkpoint,
    training_state,
)
from gnnsys.training.evaluation import eval_nodes, split_scores
from gnnsys.training.loop import epoch_record, run_epochs

from .chunks import build_chunk_plans, epoch_order
from .link import StageLink
from .stage import PipelineStage, stage_seed
from .stage_plan import estimate_unit_costs, measure_unit_costs, plan_stages


@dataclass
class PipeSetup:
    """Everything a worker needs, computed once: the relabelled graph (new ids
    = chunk order), features/labels/splits in new ids, chunk and stage
    boundaries, the permutation (new -> old) and its partition method."""

    indptr: torch.Tensor
    indices: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor
    splits: dict
    num_classes: int
    chunk_ptr: torch.Tensor
    stage_ptr: list
    perm: torch.Tensor
    method: str
    unit_costs: list

    def run_facts(self) -> dict:
        """What the run's result records about the pipeline it built."""
        return {
            "partition_used": self.method,
            "stage_ptr": self.stage_ptr,
            "chunk_sizes": self.chunk_ptr.diff().tolist(),
        }


def prepare_setup(dataset, options) -> PipeSetup:
    """Partition, relabel and balance for a FullGraphOptions; the features in
    the dtype its precision feeds them in (`gnnsys.runtime.precision.input_dtype`)."""
    from gnnsys.parallel.partition import chunk_graph, relabel_csc

    part = chunk_graph(dataset.indptr, dataset.indices, options.chunks, options.partition, options.seed)
    indptr, indices = relabel_csc(dataset.indptr, dataset.indices, part.perm)
    inv = part.inverse()
    features = dataset.features[part.perm]
    features = features.to(input_dtype(options.precision, features.dtype))
    units = units_for(options, dataset.num_features, dataset.num_classes)
    if options.balance == "measure":
        costs = measure_unit_costs(units, features.float(), Block.full_graph(indptr, indices))
    else:
        costs = estimate_unit_costs(units, dataset.num_nodes, dataset.num_edges)
    return PipeSetup(
        indptr,
        indices,
        features,
        dataset.labels.long()[part.perm],
        {s: inv[dataset.split(s)] for s in ("train", "valid", "test")},
        dataset.num_classes,
        part.chunk_ptr,
        plan_stages(costs, options.workers),
        part.perm,
        part.method,
        costs,
    )


class StageRunner:
    """The epochs of one stage of a pipelined run: rank `ranks.rank` of
    `ranks` (a gnnsys.parallel.ranks.Ranks, which also gives the device); one rank runs
    the whole model in this process without communication."""

    def __init__(self, setup: PipeSetup, options, ranks, on_epoch_end=None):
        self.setup, self.options, self.ranks = setup, options, ranks
        self.rank, self.world = rank, world = ranks.rank, ranks.world_size
        self.on_epoch_end = on_epoch_end
        self.device = ranks.device
        self.precision = make_precision(options.precision, self.device)
        units = units_for(options, setup.features.shape[1], setup.num_classes)
        torch.manual_seed(stage_seed(options.seed, rank))
        lo, hi = setup.stage_ptr[rank], setup.stage_ptr[rank + 1]
        mine = [u.to(self.device) for u in units[lo:hi]]
        plans = build_chunk_plans(setup.indptr, setup.indices, setup.chunk_ptr, gcn=options.model == "gcn")
        for p in plans:
            p.block = p.block.to(self.device)
        link = None
        if world > 1:
            link = StageLink(
                ranks,
                rank - 1 if rank > 0 else None,
                rank + 1 if rank < world - 1 else None,
                self.precision.activation_dtype,
            )
        self.stage = PipelineStage(
            mine,
            plans,
            [u.in_dim for u in mine],
            num_nodes=setup.features.shape[0],
            features=setup.features if rank == 0 else None,
            labels=setup.labels if rank == world - 1 else None,
            train_ids=setup.splits["train"],
            link=link,
            history_momentum=options.history_momentum,
            fresh_grad_scale=options.fresh_grad_scale,
            device=self.device,
            precision=self.precision,
        )
        self.opt = torch.optim.Adam(self.stage.units.parameters(), lr=options.lr, weight_decay=options.weight_decay)
        self.history = []

    @property
    def last(self) -> bool:
        return self.rank == self.world - 1

    def run(self) -> list:
        """Train; returns the epoch records (complete on the last stage)."""
        o = self.options
        start = self._restore() if o.resume else 0
        if start == 0 and o.warmup:
            self.stage.exact_pass(refresh=True)
        return run_epochs(
            o,
            start,
            self.history,
            self.train_epoch,
            self.evaluate,
            self.save_checkpoint,
            self.on_epoch_end,
            bar=f"gnnpipe stage {self.rank}",
            show_bar=o.progress and self.last,
            table=o.epoch_table and self.last,
        )

    def train_epoch(self, epoch: int) -> dict:
        """Train epoch `epoch` (0-based); its record (loss, time and what the trainer measures)."""
        link = self.stage.link
        sent0, wait0 = (link.bytes_sent, link.wait_s) if link else (0, 0.0)
        order = epoch_order(len(self.stage.plans), self.options.seed, epoch)
        t = time.perf_counter()
        every = self.options.refresh_every
        if every and epoch > 0 and epoch % every == 0:
            self.stage.exact_pass(refresh=True)
        self.opt.zero_grad(set_to_none=True)
        state = self.stage.forward_pass(order)
        loss = self.stage.backward_pass(order, state)
        del state
        self.precision.step(self.opt)
        took = time.perf_counter() - t
        sent, wait = (link.bytes_sent - sent0, link.wait_s - wait0) if link else (0, 0.0)
        totals = self.ranks.all_reduce([loss, float(sent)], "sum")
        slowest = self.ranks.all_reduce([took, wait], "max")
        return epoch_record(
            epoch,
            totals[0],
            slowest[0],
            {"compute_s": took - wait, "wait_s": wait},
            rank=self.rank,
            bytes_sent=int(totals[1]),
        )

    @torch.no_grad()
    def evaluate(self) -> dict:
        """The metric on each split with the current weights."""
        logits = self.stage.exact_pass()
        if not self.last:
            return {}
        splits = self.setup.splits
        logits = logits.float().cpu()
        return split_scores(self.options.metric, logits[eval_nodes(splits)], self.setup.labels, splits)

    # -- checkpoints: worker R keeps the last two epochs in slot0/slot1 --------------
    def _slot(self, epoch: int) -> Path:
        return Path(self.options.checkpoint_dir) / f"worker{self.rank}" / f"slot{epoch % 2}"

    def save_checkpoint(self, epochs_done: int):
        """Write the checkpoint of the run after `epochs_done` epochs (atomically)."""
        hist = [h if j > 0 or self.rank > 0 else None for j, h in enumerate(self.stage.hist)]
        save_checkpoint(
            self._slot(epochs_done),
            training_state(
                self.options,
                epochs_done,
                self.history,
                self.stage.units,
                self.opt,
                self.precision,
                stage_ptr=self.setup.stage_ptr,
                hist=hist,
            ),
        )

    def _restore(self) -> int:
        """Load the newest epoch that every worker has saved; 0 if none (said
        once, by rank 0)."""
        states = [s for s in (load_training_state(self._slot(e)) for e in (0, 1)) if s is not None]
        mine = max((s["epoch"] for s in states), default=0)
        common = int(self.ranks.all_reduce([float(mine)], "min")[0])
        if common == 0:
            if self.rank == 0:
                note_resume(self.options.checkpoint_dir, 0, self.options.epochs)
            return 0
        file = self._slot(common) / FILE
        state = next((s for s in states if s["epoch"] == common), None)
        if state is None:
            raise DatasetError(file, f"worker {self.rank} has no checkpoint of epoch {common}")
        if state["extra"]["stage_ptr"] != self.setup.stage_ptr:
            raise DatasetError(file, "was written with different stage boundaries; cannot resume")
        epoch, self.history = restore_training_state(
            state, file, self.options, self.stage.units, self.opt, self.precision
        )
        for j, h in enumerate(state["extra"]["hist"]):
            if h is not None:
                self.stage.hist[j].copy_(h)
        if self.rank == 0:
            note_resume(self.options.checkpoint_dir, epoch, self.options.epochs)
        return epoch
