"""The epoch loop every trainer shares, the record each epoch leaves, the
epoch table (`EpochTable`: each epoch's row on stdout as the epoch ends) and
the progress bars of training (`progress_bar`: live on a terminal, one
compact line per epoch in a log)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

import torch

from gnnsys.errors import GnnsysError
from gnnsys.progress import Bar

from .result import best_record

BREAKDOWN = ("sample_s", "gather_s", "transfer_s", "compute_s", "wait_s")


class NonFiniteLossError(GnnsysError):
    """The training loss became NaN or inf: names the epoch and, where the
    trainer knows it, the first batch whose loss was not finite."""

    def __init__(self, loss: float, epoch: int, batch: int | None = None, batches: int | None = None):
        self.loss, self.epoch, self.batch = loss, epoch, batch
        where = f"epoch {epoch + 1}" + (
            "" if batch is None else f", batch {batch + 1}" + (f" of {batches}" if batches else "")
        )
        super().__init__(
            f"{where}: the training loss is {loss}; training stopped (lower --lr, check the features with "
            "gnnsys info --verify, or pass --allow-nonfinite-loss to train on)"
        )


def first_nonfinite(losses: torch.Tensor) -> int | None:
    """The index of the first NaN or inf in `losses` (each batch's loss, on
    its device; read only when an epoch's loss is not finite), None if none."""
    bad = torch.nonzero(~torch.isfinite(losses))
    return int(bad[0, 0]) if bad.shape[0] else None


def epoch_record(epoch: int, loss: float, time_s: float, breakdown: dict | None = None, **extra) -> dict:
    """An epoch's record before evaluation: {epoch, loss, time_s, breakdown
    (every BREAKDOWN key, seconds; absent ones 0), **extra, train, valid, test
    (None until evaluated)}."""
    times = dict.fromkeys(BREAKDOWN, 0.0)
    times.update(breakdown or {})
    return {
        "epoch": epoch,
        "loss": loss,
        "time_s": time_s,
        "breakdown": times,
        **extra,
        "train": None,
        "valid": None,
        "test": None,
    }


def run_epochs(
    options,
    start: int,
    history: list,
    train_epoch: Callable[[int], dict],
    evaluate: Callable[[], dict],
    save: Callable[[int], None],
    on_epoch_end=None,
    bar: str | None = None,
    show_bar: bool | None = None,
    control=None,
    table: bool | None = None,
) -> list:
    """Epochs `start` .. options.epochs - 1: `train_epoch(epoch)` gives the
    epoch's record (its "lr" added: the rate it trained with), `evaluate()`
    adds the metrics every `eval_every` epochs and after the last, the
    record joins `history`, `control.after_epoch(history)` (an EpochControl:
    best weights, LR schedule, early stopping), `save(epochs_done)`
    checkpoints when options.checkpoint_dir is set, then
    `on_epoch_end(record)`. An epoch whose loss is not finite stops the
    run with NonFiniteLossError (naming the record's "nonfinite_batch",
    where the trainer set it) unless options.allow_nonfinite_loss. The epochs end early when the control stops
    them; then `control.finish()` loads the best epoch's weights. `bar` names
    a progress bar over the epochs (`progress_bar`, one line per epoch off a
    terminal; shown when `show_bar`, default options.progress). When `table`
    (default options.epoch_table), each epoch's row of the `EpochTable` is
    printed once its checkpoint is in place. Returns `history`."""
    shown = bar is not None and (options.progress if show_bar is None else show_bar)
    rows = EpochTable() if (options.epoch_table if table is None else table) else None
    with progress_bar(options.epochs, bar, "epoch", shown, line_per_step=True, done=start) as epochs_bar:
        for epoch in range(start, options.epochs):
            if control is not None and control.stopped:
                break
            lr = None if control is None else control.lr
            record = train_epoch(epoch)
            batch = record.pop("nonfinite_batch", None)
            if not math.isfinite(record["loss"]) and not options.allow_nonfinite_loss:
                raise NonFiniteLossError(record["loss"], epoch, batch, record.pop("batches", None))
            record.pop("batches", None)
            if lr is not None:
                record["lr"] = lr
            if (epoch + 1) % options.eval_every == 0 or epoch + 1 == options.epochs:
                record.update(evaluate())
            history.append(record)
            if control is not None:
                control.after_epoch(history)
            if options.checkpoint_dir is not None:
                save(epoch + 1)
            epochs_bar.set_postfix({k: f"{record[k]:.4f}" for k in ("loss", "valid") if record[k] is not None})
            epochs_bar.update()
            if rows is not None:
                rows.add(history)
            if on_epoch_end is not None:
                on_epoch_end(record)
    if control is not None:
        control.finish()
    return history


TABLE_HEADER = f"{'epoch':>6} {'loss':>8} {'train':>7} {'valid':>7} {'test':>7} {'time_s':>8}"


class EpochTable:
    """The epoch table of `gnnsys train`, written to stdout as training goes:
    the header before the first row, then one row per epoch (loss, train,
    valid and test metric, "-" where not evaluated, seconds) as the epoch
    ends, its epoch starred when its validation metric is the best so far
    (`best_record`); each line flushed, and written around live progress bars."""

    def __init__(self):
        self.started = False

    def add(self, history: list):
        """Print the row of the last record of `history` (the header first, once)."""
        record = history[-1]
        best = record["valid"] is not None and best_record(history)["epoch"] == record["epoch"]
        if not self.started:
            self._print(TABLE_HEADER)
            self.started = True
        self._print(table_row(record, best))

    @staticmethod
    def _print(line: str):
        Bar.write(line, file=sys.stdout)  # clears and redraws the live bars on the terminal
        sys.stdout.flush()


def table_row(record: dict, star: bool = False) -> str:
    """The epoch table's row of `record` (an epoch record), its epoch starred when `star`."""
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    return (
        f"{record['epoch'] + 1:>5}{'*' if star else ' '} {record['loss']:>8.4f} {fmt(record['train']):>7} "
        f"{fmt(record['valid']):>7} {fmt(record['test']):>7} {record['time_s']:>8.2f}"
    )


def progress_bar(total: int, desc: str, unit: str, enabled: bool, line_per_step: bool = False, done: int = 0):
    """A progress bar over `total` steps of `unit`, `done` of them already,
    with `update()`, `set_postfix(values)` and `close()` (also a context
    manager): a live Bar (tqdm's) on a terminal or in a notebook; otherwise (a
    log file, a pipe) a `LineProgress` writing one compact line to stderr when
    it closes, or after every step when `line_per_step` (a bar over epochs);
    silent unless `enabled`."""
    if enabled and _live():
        return Bar(total=total, initial=done, desc=desc, unit=unit, leave=False)
    return LineProgress(total, desc, unit, line_per_step, sys.stderr if enabled else None, done)


def _live() -> bool:
    """Whether a bar can redraw in place: stderr is a terminal, or tqdm.auto chose notebook widgets."""
    notebook = any(c.__module__ == "tqdm.notebook" for c in Bar.__mro__)
    return notebook or (sys.stderr is not None and sys.stderr.isatty())


class LineProgress:
    """A progress bar for a log: "desc: n/total unit, seconds, postfix" on
    one line to `file` when closed, or after every step when `per_step`;
    writes nothing when `file` is None. `done`: steps counted already. The
    methods progress_bar's callers use of tqdm's bar."""

    def __init__(self, total: int, desc: str, unit: str, per_step: bool, file, done: int = 0):
        self.total, self.desc, self.unit, self.per_step, self.file = total, desc, unit, per_step, file
        self.n, self.postfix, self.began, self.closed = done, {}, time.perf_counter(), False

    def update(self, n: int = 1):
        """Count `n` more steps (and write the line, per step)."""
        self.n += n
        if self.per_step:
            self._write()

    def set_postfix(self, values: dict | None = None, **more):
        """The values shown after the count (e.g. the running loss)."""
        self.postfix = {**(values or {}), **more}

    def close(self):
        """Write the line (unless written per step); idempotent."""
        if not self.closed and not self.per_step:
            self._write()
        self.closed = True

    def _write(self):
        if self.file is None:
            return
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        self.file.write(
            f"{self.desc}: {self.n}/{self.total} {self.unit}, {time.perf_counter() - self.began:.1f} s{extra}\n"
        )
        self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
