"""Several runs of one training (options.runs): the leaderboard protocol of
OGB, which reports the mean and standard deviation over runs of the test
metric at each run's epoch of best validation.

Run i (from 0) trains with seed options.seed + i. With a checkpoint
directory and more than one run, run i checkpoints in its own subdirectory
`run-NN` (NN = i + 1, two digits, as OGB's Logger numbers runs); a single
run checkpoints in the directory itself, as it always has. A directory
holding the other layout is refused in one line. With `resume`, every run
resumes from its subdirectory: a finished run (or one that early stopping
ended) is read back without training, the unfinished one continues, and
the runs not yet started train from scratch; `runs` may grow on resume.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gnnsys.errors import ConfigError
from gnnsys.training.checkpoints import FILE
from gnnsys.training.result import TrainResult, best_record, run_summary, summarize

RUN_DIR = "run-{:02d}"  # run i checkpoints in RUN_DIR.format(i + 1)


def run_directory(options, run: int) -> str | None:
    """Where run `run` of `options` checkpoints (None without a checkpoint directory)."""
    if options.checkpoint_dir is None:
        return None
    if options.runs == 1:
        return options.checkpoint_dir
    return str(Path(options.checkpoint_dir) / RUN_DIR.format(run + 1))


def check_layout(options):
    """ConfigError("runs") when options.checkpoint_dir holds checkpoints of the other layout:
    a single run's checkpoint.pt for several runs, or run subdirectories for one."""
    if options.checkpoint_dir is None:
        return
    path = Path(options.checkpoint_dir)
    if options.runs > 1 and (path / FILE).exists():
        raise ConfigError(
            "runs", f"{path} holds the checkpoint of a single run ({FILE}); use runs=1 or another checkpoint_dir"
        )
    if options.runs == 1 and (path / RUN_DIR.format(1)).is_dir():
        raise ConfigError(
            "runs",
            f"{path} holds the checkpoints of several runs ({RUN_DIR.format(1)}, ...); "
            "use runs > 1 or another checkpoint_dir",
        )


def train_runs(options, train_run: Callable) -> TrainResult | None:
    """options.runs calls of `train_run(run_options)` (a TrainResult, or
    None in a torchrun rank that does not report), run i with seed
    options.seed + i and its checkpoint directory (`run_directory`); the
    runs' TrainResult (`combine`), or None where the runs returned None.
    With options.epoch_table, "run NN of N, seed S" on stdout before each
    run's epoch table."""
    check_layout(options)
    if options.runs == 1:
        return train_run(options)
    results = []
    for i in range(options.runs):
        run_options = options.replace(seed=options.seed + i, checkpoint_dir=run_directory(options, i))
        if options.epoch_table:
            print(f"run {i + 1:02d} of {options.runs}, seed {run_options.seed}", flush=True)
        results.append(train_run(run_options))
    if any(r is None for r in results):
        return None
    return combine(options, results)


def combine(options, results: list) -> TrainResult:
    """One TrainResult of the runs `results` (one each, in seed order): each
    run's `run_summary` and their `summarize`; epochs, best_epoch, test and
    model are those of the run with the highest best validation metric (the
    earliest on a tie), `models` every run's."""
    runs = [run_summary(i, options.replace(seed=options.seed + i), r.epochs) for i, r in enumerate(results)]
    ranked = [{"epoch": i, "valid": run["highest_valid"]} for i, run in enumerate(runs)]
    best = best_record(ranked)
    chosen = 0 if best is None else best["epoch"]
    top = results[chosen]
    return TrainResult(
        config={**top.config, "seed": options.seed, "checkpoint_dir": options.checkpoint_dir},
        metric=top.metric,
        epochs=top.epochs,
        best_epoch=top.best_epoch,
        test=top.test,
        machine=top.machine,
        runs=runs,
        summary=summarize(runs),
        best_run=chosen,
        model=top.model,
        models=[r.model for r in results],
    )
