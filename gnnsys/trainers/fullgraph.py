"""Full-graph node classification: one process (the reference) or pipelined.

`train_fullgraph(dataset, ...)` trains on the whole graph every epoch (no
sampling): one forward over all nodes, the loss on the training nodes, one
optimiser step. With `workers > 1` (or `chunks > 1`) it runs GNNPipe
(`gnnsys.trainers.gnnpipe`): the units (`gnnsys.models.units`) are split into one stage per
worker and the graph into chunks. Both return a TrainResult.
"""

from __future__ import annotations

import time

import torch

from gnnsys.datasets import as_dataset
from gnnsys.datasets.finite_rows import check_finite_features
from gnnsys.models.units import full_forward, units_for
from gnnsys.runtime.precision import make_precision
from gnnsys.samplers import Block
from gnnsys.training.checkpoint_lock import run_lock
from gnnsys.training.checkpoints import resume_training, save_checkpoint, training_state
from gnnsys.training.control import EpochControl
from gnnsys.training.evaluation import eval_nodes, split_scores
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.loop import epoch_record, run_epochs
from gnnsys.training.result import TrainResult, make_result
from gnnsys.training.runs import train_runs
from gnnsys.training.tasks import task_loss


def train_fullgraph(
    dataset, options: FullGraphOptions | None = None, *, on_epoch_end=None, **keywords
) -> TrainResult | None:
    """Train a GNN ("gcn", "sage" or "gat") on the whole graph.

    With workers = chunks = 1 it is single-process full-graph training (the
    reference); otherwise GNNPipe with `workers` pipelined stages and
    `chunks` chunks of the graph (gnnsys.trainers.gnnpipe).

    Args:
        dataset: a Dataset or the path of a prepared dataset (never modified).
        options: a FullGraphOptions, or None to build one from `keywords`; not both.
        on_epoch_end: called with each epoch's record (in every worker, with
            the record's "rank").
        **keywords: FullGraphOptions' fields (model, layers, hidden, workers,
            chunks, epochs, lr, partition, refresh_every, ...). The reference
            path also takes runs, patience and lr_schedule
            (gnnsys.training.runs, gnnsys.training.control); GNNPipe refuses them.

    Returns:
        A TrainResult: its `model` holds the trained units with the best
        epoch's weights on the reference path, None for the pipeline; the
        result itself is None on a torchrun worker that is not the last stage.
    """
    options = FullGraphOptions.build(options, keywords)
    dataset = as_dataset(dataset)
    options = options.for_dataset(dataset)
    check_finite_features(dataset)
    with run_lock(options):
        if not options.pipelined:
            return train_runs(options, lambda run: ReferenceTrainer(dataset, run, on_epoch_end).run())
        from gnnsys.trainers.gnnpipe import train_pipeline

        return train_pipeline(dataset, options, on_epoch_end)


class ReferenceTrainer:
    """Single-process full-graph training; forward (and evaluation) under the
    options' precision (`gnnsys.runtime.precision`), features fed in its input dtype."""

    def __init__(self, dataset, options: FullGraphOptions, on_epoch_end=None):
        self.options, self.on_epoch_end = options, on_epoch_end
        self.device = torch.device(options.device)
        self.precision = make_precision(options.precision, self.device)
        check_finite_features(dataset)
        x = dataset.features[torch.arange(dataset.num_nodes)]
        self.x = x.to(self.device, self.precision.input_dtype(x.dtype))
        self.labels = dataset.labels.long()
        self.splits = {s: dataset.split(s) for s in ("train", "valid", "test")}
        self.train_ids = self.splits["train"].to(self.device)
        self.train_labels = self.labels[self.splits["train"]].to(self.device)
        self.block = Block.full_graph(dataset.indptr, dataset.indices).to(self.device)
        self.units = units_for(options, dataset.num_features, dataset.num_classes).to(self.device)
        self.opt = torch.optim.Adam(self.units.parameters(), lr=options.lr, weight_decay=options.weight_decay)
        self.control = EpochControl(options, self.units, self.opt)
        self.history = []

    def run(self) -> TrainResult:
        o = self.options
        start = 0
        if o.resume:
            start, self.history = resume_training(o, self.units, self.opt, self.precision, self.control)
        run_epochs(
            o,
            start,
            self.history,
            self.train_epoch,
            self.evaluate,
            self.save_checkpoint,
            self.on_epoch_end,
            bar="full-graph",
            control=self.control,
        )
        return make_result(o, self.history, self.units)

    def save_checkpoint(self, epochs_done: int):
        """Write the checkpoint of the run after `epochs_done` epochs (atomically)."""
        save_checkpoint(
            self.options.checkpoint_dir,
            training_state(self.options, epochs_done, self.history, self.units, self.opt, self.precision, self.control),
        )

    def train_epoch(self, epoch: int) -> dict:
        """Train epoch `epoch` (0-based); its record (loss, time and what the trainer measures)."""
        t = time.perf_counter()
        self.units.train()
        self.opt.zero_grad(set_to_none=True)
        with self.precision.autocast():
            out = full_forward(self.units, self.x, self.block)
        loss = task_loss(out[self.train_ids], self.train_labels)
        self.precision.backward_step(loss, self.opt)
        took = time.perf_counter() - t
        return epoch_record(epoch, loss.item(), took, {"compute_s": took}, rank=0, bytes_sent=0)

    @torch.no_grad()
    def evaluate(self) -> dict:
        """The metric on each split with the current weights."""
        self.units.eval()
        with self.precision.autocast():
            logits = full_forward(self.units, self.x, self.block).float().cpu()
        return split_scores(self.options.metric, logits[eval_nodes(self.splits)], self.labels, self.splits)
