"""`train(dataset, ...) -> TrainResult`: seeded minibatch node classification.

One epoch: the MinibatchLoader samples and gathers batches of training seeds
ahead of compute; each batch runs forward/backward/step on the model. Every
`eval_every` epochs the model is evaluated exactly (layer-wise full-neighbour
inference, `gnnsys.training.inference`) on train/valid/test. With a
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
from gnnsys.training.checkpoints import resume_training, save_checkpoint, training_state
from gnnsys.training.evaluation import eval_nodes, split_scores
from gnnsys.training.loop import BREAKDOWN, epoch_record, progress_bar, run_epochs
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.result import TrainResult, make_result


def train(dataset, options: MinibatchOptions | None = None, *, on_epoch_end=None, **keywords) -> TrainResult:
    """Train a GNN ("sage", "gcn" or "gat") for node classification on sampled minibatches.

    dataset: a Dataset or the path of a prepared dataset (never modified).
    Options come as a MinibatchOptions or as its keywords (model, fanouts,
    batch_size, hidden, layers, epochs, lr, weight_decay, dropout,
    input_dropout, norm, residual, heads, device, seed, eval_every,
    eval_batch_size, metric, prefetch, features, sampler, checkpoint_dir,
    resume, progress, retain_memory; see MinibatchOptions), not both.
    on_epoch_end(record) is called after each epoch's checkpoint (a test can
    raise from it to simulate a kill). Returns a TrainResult whose `model` is
    the trained module.
    """
    options = MinibatchOptions.build(options, keywords)
    dataset = as_dataset(dataset)
    options = options.for_dataset(dataset)
    if options.retain_memory:
        from gnnsys.allocator import retain_freed_memory

        retain_freed_memory()
    return MinibatchTrainer(dataset, options, on_epoch_end).run()


class MinibatchTrainer:
    """One minibatch training run: placed features, model, optimizer, loader, history."""

    def __init__(self, dataset, options: MinibatchOptions, on_epoch_end=None):
        from gnnsys.models import GNN
        from gnnsys.samplers.block import gcn_degree
        from gnnsys.storage.placement import place_features

        self.dataset, self.options, self.on_epoch_end = dataset, options, on_epoch_end
        o = options
        self.device = torch.device(o.device)
        self.features = place_features(dataset, o.features, self.device, progress=o.progress).source
        torch.manual_seed(o.seed)
        self.model = GNN(o.model, dataset.num_features, o.hidden, dataset.num_classes, o.layers,
                         dropout=o.dropout, norm=o.norm, residual=o.residual, heads=o.heads,
                         input_dropout=o.input_dropout).to(self.device)
        self.degree = gcn_degree(dataset.indptr, dataset.indices).to(self.device) if self.model.needs_degree else None
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay)
        self.history = []
        self.splits = {s: dataset.split(s) for s in ("train", "valid", "test")}

    def run(self) -> TrainResult:
        o = self.options
        start = 0
        if o.resume:
            start, self.history = resume_training(o, self.model, self.optimizer)
        loader = self._loader() if start < o.epochs else None
        run_epochs(o, start, self.history, lambda epoch: self._epoch(loader, epoch), self._evaluate, self._save,
                   self.on_epoch_end)
        return make_result(o, self.history, self.model)

    def _loader(self):
        from gnnsys.loader import MinibatchLoader

        o = self.options
        return MinibatchLoader(self.dataset, "train", list(o.fanouts), batch_size=o.batch_size, shuffle=True,
                               seed=o.seed, prefetch=o.prefetch, device=self.device, sampler=o.sampler,
                               features=self.features)

    def _epoch(self, loader, epoch: int) -> dict:
        """One pass over the training seeds; the epoch's record without metrics."""
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
                bar.set_postfix(loss=f"{total_loss / seen:.4f}",
                                seeds_s=f"{seen / (time.perf_counter() - began):,.0f}")
        return epoch_record(epoch, total_loss / max(seen, 1), time.perf_counter() - began, times)

    def _step(self, mb) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        if self.degree is not None:
            mb.attach_degree(self.degree)
        logits = self.model(mb.x.float(), mb.blocks)
        loss = F.cross_entropy(logits, mb.y.long(), ignore_index=-1)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _evaluate(self) -> dict:
        """The metric on train/valid/test from exact layer-wise inference."""
        from gnnsys.training.inference import layerwise_inference

        logits = layerwise_inference(self.model, self.dataset, eval_nodes(self.splits),
                                     self.options.eval_batch_size, self.device, features=self.features)
        return split_scores(self.options.metric, logits, self.dataset.labels, self.splits)

    def _save(self, epochs_done: int):
        save_checkpoint(self.options.checkpoint_dir,
                        training_state(self.options, epochs_done, self.history, self.model, self.optimizer))
