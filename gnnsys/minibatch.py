"""`train(dataset, ...) -> TrainResult`: seeded minibatch node classification.

One epoch: the MinibatchLoader samples and gathers batches of training seeds
ahead of compute; each batch runs forward/backward/step on the model. Every
`eval_every` epochs the model is evaluated on train/valid/test: exactly
(streaming layer-wise full-neighbour inference, `gnnsys.training.inference`),
or with options.eval "sampled" (the default with features="ssd") on sampled
minibatches through the same loader and feature tiers. With a
checkpoint directory, a checkpoint is written atomically after every epoch,
and `resume=True` continues from the last complete one: sampling is a
function of (seed, epoch, batch) and the RNG states are saved, so a resumed
run ends with exactly the result of an uninterrupted one.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from gnnsys.datasets import as_dataset
from gnnsys.datasets.invariants import check_finite_rows
from gnnsys.feature_stack import GB
from gnnsys.precision import make_precision
from gnnsys.training.checkpoints import resume_training, run_lock, save_checkpoint, training_state
from gnnsys.training.data_parallel import (
    mean_across_ranks,
    rank_options,
    rank_slice,
    resume_ranks,
    run_ranks,
    save_rank_checkpoint,
    seed_rank,
    split_inference,
    torchrun_options,
    under_torchrun,
    wrap_model,
    write_rank_result,
)
from gnnsys.training.evaluation import EVAL_EPOCH, eval_nodes, sampled_logits, sampled_splits, split_scores
from gnnsys.training.loop import BREAKDOWN, epoch_record, progress_bar, run_epochs
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.result import TrainResult, make_result


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
    the trained module.

    Data-parallel (gnnsys.training.data_parallel) with workers > 1 (spawned
    processes, on_epoch_end then runs in every worker and must be picklable)
    or under torchrun (workers = torchrun's WORLD_SIZE): the result has the
    format of a single-process run; under torchrun only rank 0 returns it,
    the other ranks None.
    """
    options = MinibatchOptions.build(options, keywords)
    dataset = as_dataset(dataset)
    options = options.for_dataset(dataset)
    if under_torchrun():
        options = torchrun_options(options)
    with run_lock(options):
        if options.workers > 1:
            return _train_data_parallel(dataset, options, on_epoch_end)
        _retain_memory(options)
        return MinibatchTrainer(dataset, options, on_epoch_end).run()


def build_model(dataset, options: MinibatchOptions) -> torch.nn.Module:
    """The GNN `options` describe for `dataset`, initialised from options.seed, on the CPU."""
    from gnnsys.models import GNN

    o = options
    torch.manual_seed(o.seed)
    return GNN(
        o.model,
        dataset.num_features,
        o.hidden,
        dataset.num_classes,
        o.layers,
        dropout=o.dropout,
        norm=o.norm,
        residual=o.residual,
        heads=o.heads,
        input_dropout=o.input_dropout,
    )


def _retain_memory(options: MinibatchOptions):
    """Keep freed memory for reuse in this process when options.retain_memory (gnnsys.allocator)."""
    if options.retain_memory:
        from gnnsys.allocator import retain_freed_memory

        retain_freed_memory()


def _train_data_parallel(dataset, options: MinibatchOptions, on_epoch_end=None) -> TrainResult | None:
    """options.workers ranks of `data_parallel_worker`; rank 0's TrainResult
    with its trained model, None on the other ranks under torchrun."""
    out = run_ranks(data_parallel_worker, dataset, options, on_epoch_end)
    if out is None:
        return None
    model = build_model(dataset, options)
    model.load_state_dict(out["model"])
    return make_result(options, out["history"], model.to(options.device))


def data_parallel_worker(ctx, dataset, options: MinibatchOptions, result_path, threads: int, on_epoch_end=None):
    """One rank of a data-parallel run (for data_parallel.run_ranks): trains
    on its share of every epoch's seeds with `threads` torch threads; rank 0
    writes the epoch records and the final weights to result_path. dataset:
    a Dataset or a prepared directory."""
    torch.set_num_threads(threads)
    _retain_memory(options)
    trainer = MinibatchTrainer(
        as_dataset(dataset),
        rank_options(options, ctx.device, ctx.rank),
        on_epoch_end,
        rank=ctx.rank,
        world_size=ctx.world_size,
    )
    seed_rank(options.seed, ctx.rank)
    result = trainer.run()
    if result is not None:
        write_rank_result(result_path, result.epochs, trainer.model)


class MinibatchTrainer:
    """One minibatch training run: placed features, model, optimizer, loader, history."""

    def __init__(self, dataset, options: MinibatchOptions, on_epoch_end=None, rank: int = 0, world_size: int = 1):
        from gnnsys.samplers.block import gcn_degree

        self.dataset, self.options, self.on_epoch_end = dataset, options, on_epoch_end
        self.rank, self.world_size = rank, world_size  # data-parallel (gnnsys.training.data_parallel)
        o = options
        self.device = torch.device(o.device)
        self.features, self.rows = self._feature_tiers()
        self.precision = make_precision(o.precision, self.device)
        self.model = build_model(dataset, o).to(self.device)
        self.net = wrap_model(self.model, self.device, world_size)  # what a step calls: DDP over the ranks
        self.degree = gcn_degree(dataset.indptr, dataset.indices).to(self.device) if self.model.needs_degree else None
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay)
        self.history = []
        self.splits = {s: dataset.split(s) for s in ("train", "valid", "test")}
        self.checked_finite = False

    def _feature_tiers(self):
        """(the stack of feature tiers training gathers through, its bottom:
        the rows that inference scans, which would only flush a cache)."""
        from gnnsys.feature_stack import build_feature_stack, estimate_batch_rows, presample_score, tiers_of

        o = self.options
        batch_rows = (
            estimate_batch_rows(self.dataset, o.fanouts, o.batch_size, o.seed, sampling=o.sampling)
            if o.lookahead
            else 0
        )
        stack, _ = build_feature_stack(
            self.dataset,
            features=o.features,
            device=self.device,
            cache_rows=o.cache_rows,
            cache_gb=o.cache_gb,
            cache_policy=o.cache_policy,
            lookahead=o.lookahead,
            victim_rows=o.victim_rows,
            host_mem_budget=o.host_mem_budget,
            progress=o.progress,
            world_size=self.world_size,
            replicate_frac=o.replicate_frac,
            batch_rows=batch_rows,
            presample=lambda: presample_score(self.dataset, o.fanouts, o.batch_size, o.seed, sampling=o.sampling),
        )
        return stack, tiers_of(stack)[-1]

    def run(self) -> TrainResult | None:
        """Train (from the checkpoint with options.resume); the TrainResult,
        or None on a data-parallel rank other than 0. The feature tiers are
        closed at the end (threads stopped, files closed); after a failure
        too, except on data-parallel ranks, whose shared cache closes
        collectively and would wait for ranks that are gone."""
        o = self.options
        start = 0
        try:
            if o.resume and self.world_size > 1:
                start, self.history = resume_ranks(o, self.model, self.optimizer, self.rank, self.precision)
            elif o.resume:
                start, self.history = resume_training(o, self.model, self.optimizer, self.precision)
            loader = self._loader() if start < o.epochs else None
            run_epochs(
                o,
                start,
                self.history,
                lambda epoch: self._train_epoch(loader, epoch),
                self._evaluate,
                self._save,
                self.on_epoch_end,
            )
        except BaseException:
            if self.world_size == 1:
                self.features.close()
            raise
        self.features.close()
        return make_result(o, self.history, self.model) if self.rank == 0 else None

    def _train_epoch(self, loader, epoch: int) -> dict:
        """`_epoch`'s record; its loss is the mean over every rank's seeds
        (the ranks' shares are equal)."""
        record = self._epoch(loader, epoch)
        if self.world_size > 1:
            record["loss"] = mean_across_ranks(record["loss"], self.device)
        return record

    def _loader(self):
        from gnnsys.loader import MinibatchLoader

        o = self.options
        return MinibatchLoader(
            self.dataset,
            "train",
            list(o.fanouts),
            batch_size=o.batch_size,
            shuffle=True,
            seed=o.seed,
            prefetch=o.prefetch,
            device=self.device,
            sampler=o.sampler,
            sampling=o.sampling,
            features=self.features,
            lookahead=o.lookahead,
            rank=self.rank,
            world_size=self.world_size,
            x_dtype=self.precision.input_dtype(self.features.dtype),
        )

    def _epoch(self, loader, epoch: int) -> dict:
        """One pass over the training seeds; the epoch's record without metrics
        (with each feature tier's counters of the epoch under "tiers")."""
        from gnnsys.feature_stack import reset_tier_stats, tier_postfix, tier_record

        reset_tier_stats(self.features)
        self.model.train()
        loader.set_epoch(epoch)
        times = dict.fromkeys(BREAKDOWN, 0.0)
        total_loss, seen = 0.0, 0
        began = time.perf_counter()
        bar = progress_bar(len(loader), f"epoch {epoch + 1}/{self.options.epochs}", "batch", self.options.progress)
        with bar:
            for mb in loader:
                for k in BREAKDOWN:
                    times[k] += mb.timings.get(k, 0.0)
                t = time.perf_counter()  # the loader hands batches out on self.device
                loss = self._step(mb)
                times["compute_s"] += time.perf_counter() - t  # _step's loss.item() waited for this stream only
                n = mb.seeds.shape[0]
                total_loss += loss * n
                seen += n
                bar.update()
                elapsed = time.perf_counter() - began
                bar.set_postfix(
                    loss=f"{total_loss / seen:.4f}",
                    seeds_s=f"{seen / elapsed:,.0f}",
                    **tier_postfix(self.features, elapsed),
                )
        elapsed = time.perf_counter() - began
        return epoch_record(epoch, total_loss / max(seen, 1), elapsed, times, **tier_record(self.features))

    def _step(self, mb) -> float:
        if not self.checked_finite:  # the first batch only: a NaN feature would make every loss NaN
            check_finite_rows(mb.x, self.dataset)
            self.checked_finite = True
        self.optimizer.zero_grad(set_to_none=True)
        if self.degree is not None:
            mb.attach_degree(self.degree)
        with self.precision.autocast():
            logits = self.net(mb.x, mb.blocks)
        loss = F.cross_entropy(logits.float(), mb.y.long(), ignore_index=-1)
        self.precision.backward_step(loss, self.optimizer)
        return loss.item()

    def _evaluate(self) -> dict:
        """The metric on train/valid/test (the same on every rank): from
        exact streaming layer-wise inference, or, with options.eval_mode
        "sampled", from the training fanouts through the training loader and
        feature tiers (gnnsys.training.evaluation); a data-parallel run splits
        the nodes across the ranks and all-gathers the logits."""
        o = self.options
        if o.eval_mode == "sampled":
            splits = sampled_splits(self.splits, o.seed)
            logits = self._sampled_logits(eval_nodes(splits))
        else:
            splits = self.splits
            logits = self._layerwise_logits(eval_nodes(splits))
        return split_scores(o.metric, logits, self.dataset.labels, splits)

    def _layerwise_logits(self, nodes):
        from gnnsys.training.inference import layerwise_inference

        o = self.options
        streaming = dict(
            host_mem_budget=None if o.host_mem_budget is None else int(o.host_mem_budget * GB),
            scratch_dir=o.scratch_dir,
            dtype=o.inference_dtype,
        )
        if self.world_size > 1:
            return split_inference(
                self.model,
                self.dataset,
                nodes,
                o.eval_batch_size,
                self.device,
                self.rows,
                self.rank,
                self.world_size,
                **streaming,
            )
        return layerwise_inference(
            self.model, self.dataset, nodes, o.eval_batch_size, self.device, features=self.rows, **streaming
        )

    def _sampled_logits(self, nodes):
        """Logits of `nodes` on minibatches of batch_size seeds (the working set
        of a training batch, within the budget training fits) sampled with
        the training fanouts in the sampling stream of EVAL_EPOCH; each rank
        takes its `rank_slice` (equal lengths) and the logits are all-gathered."""
        from gnnsys.loader import MinibatchLoader

        o = self.options
        mine = rank_slice(nodes, self.rank, self.world_size)
        loader = MinibatchLoader(
            self.dataset,
            mine,
            list(o.fanouts),
            batch_size=o.batch_size,
            shuffle=False,
            seed=o.seed,
            prefetch=o.prefetch,
            device=self.device,
            sampler=o.sampler,
            sampling=o.sampling,
            features=self.features,
            lookahead=o.lookahead,
            epoch=EVAL_EPOCH,
            x_dtype=self.precision.input_dtype(self.features.dtype),
        )
        logits = sampled_logits(self.model, loader, self.degree, self.precision.autocast)
        if self.world_size == 1:
            return logits
        rows = logits.to(self.device)
        out = torch.empty(rows.shape[0] * self.world_size, rows.shape[1], device=self.device)
        torch.distributed.all_gather_into_tensor(out, rows)
        return out[: nodes.shape[0]].cpu()

    def _save(self, epochs_done: int):
        """Checkpoint after `epochs_done` epochs (data-parallel: rank 0 writes, with every rank's RNG state)."""
        if self.world_size > 1:
            save_rank_checkpoint(
                self.options, epochs_done, self.history, self.model, self.optimizer, self.rank, self.precision
            )
            return
        save_checkpoint(
            self.options.checkpoint_dir,
            training_state(self.options, epochs_done, self.history, self.model, self.optimizer, self.precision),
        )
