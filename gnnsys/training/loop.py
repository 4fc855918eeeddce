"""The epoch loop every trainer shares, and the record each epoch leaves."""
from __future__ import annotations

from typing import Callable

from tqdm.auto import tqdm

BREAKDOWN = ("sample_s", "gather_s", "transfer_s", "compute_s", "wait_s")


def epoch_record(epoch: int, loss: float, time_s: float, breakdown: dict | None = None, **extra) -> dict:
    """An epoch's record before evaluation: {epoch, loss, time_s, breakdown
    (every BREAKDOWN key, seconds; absent ones 0), **extra, train, valid, test
    (None until evaluated)}."""
    times = dict.fromkeys(BREAKDOWN, 0.0)
    times.update(breakdown or {})
    return {"epoch": epoch, "loss": loss, "time_s": time_s, "breakdown": times, **extra,
            "train": None, "valid": None, "test": None}


def run_epochs(options, start: int, history: list, train_epoch: Callable[[int], dict],
               evaluate: Callable[[], dict], save: Callable[[int], None], on_epoch_end=None,
               bar: str | None = None, show_bar: bool | None = None) -> list:
    """Epochs `start` .. options.epochs - 1: `train_epoch(epoch)` gives the
    epoch's record, `evaluate()` adds the metrics every `eval_every` epochs and
    after the last, the record joins `history`, `save(epochs_done)`
    checkpoints when options.checkpoint_dir is set, then `on_epoch_end(record)`.
    `bar` names a progress bar over the epochs (shown when `show_bar`,
    default options.progress). Returns `history`."""
    epochs = range(start, options.epochs)
    if bar is not None:
        epochs = tqdm(epochs, desc=bar, leave=False,
                      disable=not (options.progress if show_bar is None else show_bar))
    for epoch in epochs:
        record = train_epoch(epoch)
        if (epoch + 1) % options.eval_every == 0 or epoch + 1 == options.epochs:
            record.update(evaluate())
        history.append(record)
        if options.checkpoint_dir is not None:
            save(epoch + 1)
        if on_epoch_end is not None:
            on_epoch_end(record)
    return history
