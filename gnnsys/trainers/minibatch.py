"""`train(dataset, ...) -> TrainResult`: seeded minibatch node classification.

One epoch: the MinibatchLoader samples and gathers batches of training seeds ahead of compute; each
batch runs forward/backward/step on the model. Every `eval_every` epochs the model is evaluated on
train/valid/test: exactly (streaming layer-wise full-neighbour inference, `gnnsys.inference.layerwise`), or
with options.eval "sampled" (the default with features "ssd" and "packed") on sampled minibatches
through the same loader and feature tiers. With a checkpoint directory, a checkpoint is written
atomically after every epoch, and `resume=True` continues from the last complete one: sampling is a
function of (seed, epoch, batch) and the RNG states are saved, so a resumed run ends with exactly
the result of an uninterrupted one.
"""

from __future__ import annotations

import functools
import math
import time

import torch

from gnnsys.datasets import as_dataset
from gnnsys.datasets.finite_rows import check_finite_features
from gnnsys.datasets.hetero_dataset import HeteroDataset
from gnnsys.errors import ConfigError
from gnnsys.loading.feature_store import open_feature_store
from gnnsys.loading.options import loader_nice
from gnnsys.parallel.data_parallel import (
    rank_options,
    rank_slice,
    resume_ranks,
    run_ranks,
    save_rank_checkpoint,
    seed_rank,
    split_inference,
    torchrun_options,
    under_torchrun,
    write_rank_result,
)
from gnnsys.runtime.allocator import retain_memory
from gnnsys.runtime.precision import make_precision
from gnnsys.storage.memory_plan import GB
from gnnsys.training.checkpoint_lock import run_lock
from gnnsys.training.checkpoints import resume_training, save_checkpoint, training_state
from gnnsys.training.control import EpochControl
from gnnsys.training.evaluation import EVAL_EPOCH, eval_nodes, sampled_logits, sampled_splits, split_scores
from gnnsys.training.loop import BREAKDOWN, epoch_record, first_nonfinite, progress_bar, run_epochs
from gnnsys.training.model import build_model
from gnnsys.training.optimizer import make_optimizer
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.result import TrainResult, make_result
from gnnsys.training.runs import train_runs
from gnnsys.training.tasks import task_loss
from gnnsys.training.user_model import check_user_model, needs_degree

POSTFIX_EVERY_S = 0.5  # how often the batch bar reads the running loss back from the device


def train(dataset, options: MinibatchOptions | None = None, *, on_epoch_end=None, **keywords) -> TrainResult | None:
    """Train a GNN ("sage", "gcn" or "gat") for node classification on sampled minibatches.

    dataset: a Dataset or the path of a prepared dataset (never modified).
    Options come as a MinibatchOptions or as its keywords (model, fanouts,
    batch_size, hidden, layers, epochs, lr, weight_decay, dropout,
    input_dropout, norm, residual, heads, device, seed, eval_every,
    eval_batch_size, metric, prefetch, features, sampler, checkpoint_dir,
    resume, progress, retain_memory, eval, scratch_dir, inference_dtype;
    see MinibatchOptions), not both.
    on_epoch_end(record) is called after each epoch's checkpoint (a test can
    raise from it to simulate a kill). Returns a TrainResult whose `model` is
    the trained module with the weights of its epoch of best validation.

    model may also be a torch.nn.Module of the blocks interface
    (gnnsys.models.gnn: forward(x, blocks) -> [blocks[-1].num_dst, num_classes]
    logits, optional needs_degree and GNNLayer `layers`), checked on one
    sampled batch before training (ConfigError naming what is missing);
    every run trains a copy re-initialised with the run's seed
    (gnnsys.training.user_model.fresh_copy), with the same tiers, data
    parallelism (the module must then pickle), precision, checkpoints and runs.
    A heterogeneous dataset is refused (ConfigError): `gnnsys.train` trains it
    with gnnsys.trainers.hetero.train_hetero.
    runs > 1 trains seeds seed, seed + 1, ... (gnnsys.training.runs): the
    result reports every run and their mean and standard deviation.

    Data-parallel (gnnsys.parallel.data_parallel) with workers > 1 (spawned
    processes, on_epoch_end then runs in every worker and must be picklable)
    or under torchrun (workers = torchrun's WORLD_SIZE): the result has the
    format of a single-process run; under torchrun only rank 0 returns it,
    the other ranks None.
    """
    module = keywords.pop("model") if isinstance(keywords.get("model"), torch.nn.Module) else None
    options = MinibatchOptions.build(options, keywords)
    dataset = as_dataset(dataset)
    if isinstance(dataset, HeteroDataset):
        raise ConfigError("dataset", f"{dataset.name} is heterogeneous: train it with gnnsys.train")
    if module is not None:
        options = check_user_model(module, dataset, options)
    options = options.for_dataset(dataset)
    if under_torchrun():
        options = torchrun_options(options)
    with run_lock(options):
        return train_runs(options, lambda run: _train_run(dataset, run, on_epoch_end, module))


def _train_run(dataset, options: MinibatchOptions, on_epoch_end, module) -> TrainResult | None:
    """One run of `train` (of the user's `module`, None for options.model)."""
    if options.workers > 1:
        return _train_data_parallel(dataset, options, on_epoch_end, module)
    retain_memory(options)
    return MinibatchTrainer(dataset, options, on_epoch_end, module=module).run()


def _train_data_parallel(dataset, options: MinibatchOptions, on_epoch_end=None, module=None) -> TrainResult | None:
    """options.workers ranks of `data_parallel_worker` (training the user's
    `module` when given); rank 0's TrainResult with its trained model, None
    on the other ranks under torchrun."""
    out = run_ranks(functools.partial(data_parallel_worker, module=module), dataset, options, on_epoch_end)
    if out is None:
        return None
    model = build_model(dataset, options, module)
    model.load_state_dict(out["model"])
    return make_result(options, out["history"], model.to(options.device))


def data_parallel_worker(
    ctx, dataset, options: MinibatchOptions, result_path, threads: int, on_epoch_end=None, module=None
):
    """One rank of a data-parallel run (for data_parallel.run_ranks): trains
    on its share of every epoch's seeds with `threads` torch threads; rank 0
    writes the epoch records and the final (best epoch's) weights to
    result_path. dataset: a Dataset or a prepared directory; module: the
    user's model, None for options.model."""
    torch.set_num_threads(threads)
    retain_memory(options)
    trainer = MinibatchTrainer(
        as_dataset(dataset),
        rank_options(options, ctx.device, ctx.rank),
        on_epoch_end,
        ranks=ctx.ranks,
        module=module,
    )
    seed_rank(options.seed, ctx.rank)
    result = trainer.run()
    if result is not None:
        write_rank_result(result_path, result.epochs, trainer.model)


class MinibatchTrainer:
    """One minibatch training run: placed features, model, optimizer, loader,
    history. `run()` trains; its steps `train_loader()`, `train_epoch()`,
    `evaluate()` and `save_checkpoint()` also drive epochs by hand.
    `loader_nice`: the niceness its loaders' threads take (`loader_nice` of its device)."""

    def __init__(self, dataset, options: MinibatchOptions, on_epoch_end=None, ranks=None, module=None):
        from gnnsys.parallel.ranks import Ranks
        from gnnsys.samplers.block import gcn_degree

        self.dataset, self.options, self.on_epoch_end = dataset, options, on_epoch_end
        check_finite_features(dataset)  # once per dataset: a NaN row would make every loss after it NaN
        o = options
        self.device = torch.device(o.device)
        self.loader_nice = loader_nice(self.device)
        self.ranks = Ranks.single(self.device) if ranks is None else ranks  # data-parallel: one per rank
        self.rank, self.world_size = self.ranks.rank, self.ranks.world_size
        self.splits = {s: dataset.split(s) for s in ("train", "valid", "test")}
        fixed = (self._sampled_nodes()[2], EVAL_EPOCH) if o.eval_mode == "sampled" else None  # packed once
        self.store = open_feature_store(dataset, o, self.device, self.ranks, fixed)  # the tiers the loaders read
        if o.features == "ssd" and self.rank == 0:  # which SSD tier reads the rows, and why
            print(*(f"features ssd: {note}" for note in self.store.notes.values()), sep="\n", flush=True)
        # what inference scans: the stacks' bottoms (a scan of every node would only flush a cache)
        self.rows = self.store.bottom() if self.store.homogeneous else {t: self.store.bottom(t) for t in self.store}
        self.precision = make_precision(o.precision, self.device)
        self.model = self._build_model(module).to(self.device)
        self.net = self.ranks.wrap(self.model)  # what a step calls: DDP over the ranks
        self.degree = gcn_degree(dataset.indptr, dataset.indices).to(self.device) if needs_degree(self.model) else None
        self.optimizer = make_optimizer(self.model, o.lr, o.weight_decay)
        self.control = EpochControl(o, self.model, self.optimizer)
        self.history: list[dict] = []

    # What the heterogeneous trainer (gnnsys.trainers.hetero) redefines besides its loader
    # (_open_loader) and exact evaluation (_layerwise_logits): its model and what a step feeds it.

    def _build_model(self, module):
        """The model of options.model, or a fresh copy of the user's `module` (build_model)."""
        return build_model(self.dataset, self.options, module)

    def _inputs(self, mb) -> tuple:
        """The model's arguments for `mb`: (features, blocks), the blocks given the
        whole graph's degrees for a GCN."""
        if self.degree is not None:
            mb.attach_degree(self.degree)
        return mb.x, mb.blocks

    def run(self) -> TrainResult | None:
        """Train (from the checkpoint with options.resume); the TrainResult,
        or None on a data-parallel rank other than 0. The feature tiers are
        closed at the end (threads stopped, files closed); after a failure
        too, except on data-parallel ranks, whose shared cache closes
        collectively and would wait for ranks that are gone."""
        o = self.options
        start = 0
        try:
            if o.resume and self.ranks.multi:
                start, self.history = resume_ranks(
                    o, self.model, self.optimizer, self.ranks, self.precision, self.control
                )
            elif o.resume:
                start, self.history = resume_training(o, self.model, self.optimizer, self.precision, self.control)
            loader = self.train_loader() if start < o.epochs else None
            run_epochs(
                o,
                start,
                self.history,
                lambda epoch: self.train_epoch(loader, epoch),
                self.evaluate,
                self.save_checkpoint,
                self.on_epoch_end,
                control=self.control,
            )
        except BaseException:
            if not self.ranks.multi:
                self.store.close()
            raise
        self.store.close()
        return make_result(o, self.history, self.model) if self.rank == 0 else None

    def train_loader(self):
        """The loader of this rank's share of the training seeds, shuffled, with
        the run's sampling, batch size, seed and pipeline options (what `run` trains on)."""
        return self._loader()

    def _loader(self, split="train", shuffle: bool = True, rank: int | None = None, world_size: int | None = None):
        """A loader of `split` with the run's sampling, batch size, seed and
        pipeline options; by default this rank's share of the training seeds."""
        from gnnsys.loading.options import BatchOptions, PipelineOptions

        o = self.options
        batches = BatchOptions(
            batch_size=o.batch_size,
            shuffle=shuffle,
            seed=o.seed,
            rank=self.rank if rank is None else rank,
            world_size=self.world_size if world_size is None else world_size,
        )
        pipeline = PipelineOptions(prefetch=o.prefetch, lookahead=o.lookahead, nice=self.loader_nice)
        return self._open_loader(split, batches, pipeline)

    def _open_loader(self, split, batches, pipeline):
        """The MinibatchLoader of `split` with the run's sampling over its feature tiers."""
        from gnnsys.loading.loader import MinibatchLoader
        from gnnsys.loading.options import SamplingOptions

        o = self.options
        return MinibatchLoader(
            self.dataset,
            split,
            SamplingOptions(fanouts=self._fanouts(), sampler=o.sampler, method=o.sampling),
            batches,
            pipeline,
            device=self.device,
            features=self.store,
            x_dtype={k: self.precision.input_dtype(stack.dtype) for k, stack in self.store.items()},
        )

    def _fanouts(self) -> list:
        """The fanouts the loader's sampler takes, output layer first."""
        return list(self.options.fanouts)

    def train_epoch(self, loader, epoch: int) -> dict:
        """One pass of `loader` (a MinibatchLoader over this trainer's feature tiers, such as
        `train_loader()`), set to `epoch` (sampling is a function of the seed, epoch and batch), one
        optimizer step per batch. Returns the epoch's record without metrics (gnnsys.training.loop.epoch_record:
        "loss", the mean over every rank's seeds, "time_s", the time breakdown, each feature tier's counters
        of the epoch under "tiers")."""
        self.store.reset_stats()
        self.store.start_epoch(epoch)  # a packed tier packs from this epoch
        self.model.train()
        loader.set_epoch(epoch)
        times = dict.fromkeys(BREAKDOWN, 0.0)
        # summed on the device in float64 (what a host float sum gives): read at bar refreshes, not every step
        total_loss, seen = torch.zeros((), dtype=torch.float64, device=self.device), 0
        losses = torch.zeros(len(loader), dtype=torch.float32, device=self.device)  # to name a non-finite one
        began = shown = time.perf_counter()
        bar = progress_bar(len(loader), f"epoch {epoch + 1}/{self.options.epochs}", "batch", self.options.progress)

        def show_postfix():
            elapsed = time.perf_counter() - began
            bar.set_postfix(
                loss=f"{total_loss.item() / max(seen, 1):.4f}",
                seeds_s=f"{seen / elapsed:,.0f}",
                **self.store.postfix(elapsed),
            )

        with bar:
            for i, mb in enumerate(loader):
                for k in BREAKDOWN:
                    times[k] += mb.timings.get(k, 0.0)
                t = time.perf_counter()  # the loader hands batches out on self.device
                loss = self._step(mb)
                times["compute_s"] += time.perf_counter() - t  # on a GPU: the time to queue the step
                n = mb.seeds.shape[0]
                total_loss += loss.detach().double() * n
                losses[i] = loss.detach()
                seen += n
                bar.update()
                if self.options.progress and time.perf_counter() - shown >= POSTFIX_EVERY_S:
                    shown = time.perf_counter()
                    show_postfix()
            if self.options.progress:
                show_postfix()  # the epoch's final figures on its line
        elapsed = time.perf_counter() - began
        mean_loss = total_loss.item() / max(seen, 1)
        record = epoch_record(epoch, mean_loss, elapsed, times, **self.store.record())
        if not math.isfinite(mean_loss):  # read back only then: no per-batch sync
            record.update(nonfinite_batch=first_nonfinite(losses), batches=len(loader))
        record["loss"] = self.ranks.mean(record["loss"])  # the ranks' shares are equal
        if self.ranks.multi and not math.isfinite(record["loss"]):  # every rank is here: the first bad batch of any
            mine = record.get("nonfinite_batch")
            first = self.ranks.all_reduce([math.inf if mine is None else mine], "min")[0]
            record["nonfinite_batch"] = None if math.isinf(first) else int(first)
        return record

    def _step(self, mb) -> torch.Tensor:
        """One optimizer step on `mb`; its mean loss, left on the device."""
        inputs = self._inputs(mb)
        self.optimizer.zero_grad(set_to_none=True)
        with self.precision.autocast():
            logits = self.net(*inputs)
        loss = task_loss(logits, mb.y)
        self.precision.backward_step(loss, self.optimizer)
        return loss

    def evaluate(self) -> dict:
        """{"train", "valid", "test": the options' metric} of the model as it is (the
        same on every rank): from exact streaming layer-wise inference, or, with
        options.eval_mode "sampled", from the training fanouts through the
        training loader and feature tiers (gnnsys.training.evaluation); a
        data-parallel run splits the nodes across the ranks and all-gathers
        the logits."""
        o = self.options
        if o.eval_mode == "sampled":
            splits, nodes, mine = self._sampled_nodes()
            logits = self._sampled_logits(nodes, mine)
        else:
            splits = self.splits
            logits = self._layerwise_logits(eval_nodes(splits))
        return split_scores(o.metric, logits, self.dataset.labels, splits)

    def _layerwise_logits(self, nodes):
        from gnnsys.inference.layerwise import layerwise_inference

        o = self.options
        streaming = dict(
            host_mem_budget=None if o.host_mem_budget is None else int(o.host_mem_budget * GB),
            scratch_dir=o.scratch_dir,
            dtype=o.inference_dtype,
        )
        if self.ranks.multi:
            return split_inference(
                self.model,
                self.dataset,
                nodes,
                o.eval_batch_size,
                self.device,
                self.rows,
                self.ranks,
                **streaming,
            )
        return layerwise_inference(
            self.model, self.dataset, nodes, o.eval_batch_size, self.device, features=self.rows, **streaming
        )

    def _sampled_nodes(self) -> tuple:
        """(the splits sampled evaluation scores, their nodes in order, this rank's `rank_slice` of them)."""
        splits = sampled_splits(self.splits, self.options.seed)
        nodes = eval_nodes(splits)
        return splits, nodes, rank_slice(nodes, self.rank, self.world_size)

    def _sampled_logits(self, nodes, mine):
        """Logits of `nodes` on minibatches of batch_size seeds (the working set
        of a training batch, within the budget training fits) sampled with
        the training fanouts in the sampling stream of EVAL_EPOCH; this rank
        takes `mine`, its `rank_slice` (equal lengths), and the logits are all-gathered."""
        loader = self._loader(mine, shuffle=False, rank=0, world_size=1)
        loader.set_epoch(EVAL_EPOCH)
        logits = sampled_logits(self.model, loader, self._inputs, self.precision.autocast)
        return self.ranks.all_gather_rows(logits)[: nodes.shape[0]]  # host rows: over the host group

    def save_checkpoint(self, epochs_done: int):
        """Write the checkpoint in options.checkpoint_dir atomically: the state after
        `epochs_done` epochs with `history` (this trainer's epoch records),
        model, optimizer, precision, epoch control and RNG states, from which
        `resume=True` continues (data-parallel: rank 0 writes, with every rank's RNG state)."""
        run = (self.history, self.model, self.optimizer)
        if self.ranks.multi:
            save_rank_checkpoint(self.options, epochs_done, *run, self.ranks, self.precision, self.control)
            return
        state = training_state(self.options, epochs_done, *run, self.precision, self.control)
        save_checkpoint(self.options.checkpoint_dir, state)
