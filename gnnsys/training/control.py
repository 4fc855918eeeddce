"""`EpochControl`: what is decided between a run's epochs: which weights
were the best, the learning-rate schedule, and early stopping.

After every epoch (`after_epoch`): when the epoch's validation metric is
the run's best (`best_record`, the earliest of the highest), a copy of the
model's weights is kept; the schedule steps ("plateau" on the validation
metric, at evaluated epochs only); with `patience`, the run stops at an
evaluated epoch `patience` or more epochs after its best. At the end of the
run (`finish`) the model holds the best epoch's weights. Its `state_dict`
(tensors and plain values) travels in every checkpoint, so a resumed run
continues the schedule and the patience count where they were, and a run
that stopped early stays stopped.
"""

from __future__ import annotations

import logging

import torch

from gnnsys.training.result import best_record

log = logging.getLogger(__name__)


def make_scheduler(options, optimizer):
    """The torch.optim.lr_scheduler of options.lr_schedule over `optimizer`, None for "none"."""
    s = torch.optim.lr_scheduler
    kind = options.lr_schedule
    if kind == "none":
        return None
    if kind == "step":
        return s.StepLR(optimizer, step_size=options.lr_step_size, gamma=options.lr_gamma)
    if kind == "cosine":
        return s.CosineAnnealingLR(optimizer, T_max=options.epochs, eta_min=options.lr_min)
    if kind == "plateau":
        return s.ReduceLROnPlateau(optimizer, mode="max", factor=options.lr_gamma, patience=options.lr_patience)
    raise ValueError(f"unknown lr_schedule {kind!r}")  # TrainOptions refuses it first


class EpochControl:
    """Best-validation weights, LR schedule and early stopping of one run of
    `model` trained by `optimizer` under `options` (a TrainOptions)."""

    def __init__(self, options, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.options, self.model, self.optimizer = options, model, optimizer
        self.scheduler = make_scheduler(options, optimizer)
        self.best_epoch: int | None = None
        self.best_weights: dict | None = None  # the best epoch's state_dict, None until one is kept
        self.stopped = False

    @property
    def lr(self) -> float:
        """The learning rate the next epoch trains with."""
        return self.optimizer.param_groups[0]["lr"]

    def after_epoch(self, history: list):
        """Account for the last record of `history` (evaluated or not): keep
        the weights when it is the best so far, step the schedule, and stop
        when the validation metric has not improved for `patience` epochs."""
        record = history[-1]
        evaluated = record["valid"] is not None
        best = best_record(history)
        if evaluated and best is not None and best["epoch"] == record["epoch"]:
            self.best_epoch = record["epoch"]
            self.best_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            if evaluated:
                self.scheduler.step(record["valid"])
        elif self.scheduler is not None:
            self.scheduler.step()
        patience = self.options.patience
        since = -1 if self.best_epoch is None else self.best_epoch  # no best yet (NaN metrics): since the start
        if evaluated and patience is not None and record["epoch"] - since >= patience:
            self.stopped = True

    def finish(self):
        """Load the best epoch's weights into the model (a resumed checkpoint
        from before they were kept has none: the model keeps its last, and a
        warning says so)."""
        if self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
        elif self.best_epoch is not None:
            log.warning(
                "the checkpoint kept no weights of best epoch %d; the model holds the last", self.best_epoch + 1
            )

    def state_dict(self) -> dict:
        """What a checkpoint keeps: {"best_epoch", "best_weights" ({} for
        none), "stopped", "scheduler" ({} for none)}."""
        return {
            "best_epoch": self.best_epoch,
            "best_weights": self.best_weights or {},
            "stopped": self.stopped,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else {},
        }

    def load_state_dict(self, state: dict, history: list):
        """Restore a `state_dict` (empty for a checkpoint from before it was
        kept: the best epoch is then taken from `history`, its weights unknown)."""
        best = best_record(history)
        self.best_epoch = state.get("best_epoch", None if best is None else best["epoch"])
        self.best_weights = state.get("best_weights") or None
        self.stopped = bool(state.get("stopped", False))
        if self.scheduler is not None and state.get("scheduler"):
            self.scheduler.load_state_dict(state["scheduler"])
