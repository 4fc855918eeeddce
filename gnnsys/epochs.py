"""The epoch loop every trainer shares (minibatch, full-graph, pipeline stage)."""
from __future__ import annotations

from typing import Callable, Iterable


def run_epochs(config: dict, start: int, history: list, train_epoch: Callable[[int], dict],
               evaluate: Callable[[], dict], save: Callable[[int], None], on_epoch_end=None,
               progress: Callable[[Iterable], Iterable] = iter) -> list:
    """Epochs `start` .. config["epochs"] - 1: `train_epoch(epoch)` gives the
    epoch's record, `evaluate()` adds the metrics every `eval_every` epochs and
    after the last, the record joins `history`, `save(epochs_done)`
    checkpoints when config["checkpoint_dir"] is set, then
    `on_epoch_end(record)`. `progress`
    wraps the epoch range (e.g. a tqdm bar). Returns `history`."""
    for epoch in progress(range(start, config["epochs"])):
        record = train_epoch(epoch)
        if (epoch + 1) % config["eval_every"] == 0 or epoch + 1 == config["epochs"]:
            record.update(evaluate())
        history.append(record)
        if config["checkpoint_dir"] is not None:
            save(epoch + 1)
        if on_epoch_end is not None:
            on_epoch_end(record)
    return history
