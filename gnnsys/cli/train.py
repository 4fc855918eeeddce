"""`gnnsys train DIR [options]`: train a GNN on a prepared dataset.

Each group of options is one `add_*_arguments(parser)` function listed in
ARGUMENT_GROUPS; every option's `dest` is the name of a field of the
trainer's options (gnnsys.training.options), so a new option is one flag
here plus that field, and nothing else changes. Flags left out are left out
of the options too, so the dataclasses' defaults are the only ones; a flag
that the chosen `--mode` has no field for is refused with one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex

from gnnsys.cli import error
from gnnsys.datasets.input_paths import input_path
from gnnsys.errors import ConfigError, PathError
from gnnsys.numbers import number
from gnnsys.storage.cache import RUN_POLICIES
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.hetero_options import HeteroOptions
from gnnsys.training.options import (
    DEEP_FROM,
    EVAL_MODES,
    FEATURES,
    LR_SCHEDULES,
    MAX_RUNS,
    OUTPUT_DTYPES,
    PRECISIONS,
    SAMPLINGS,
    MinibatchOptions,
)
from gnnsys.training.outputs import check_output_file

MODES = {"minibatch": MinibatchOptions, "fullgraph": FullGraphOptions}
HETERO_ONLY = {f.name for f in dataclasses.fields(HeteroOptions)} - {
    f.name for f in dataclasses.fields(MinibatchOptions)
}
NOT_OPTIONS = ("path", "mode", "json_out", "run", "interrupted", "command")  # parsed flags that are not trainer options
# each mode's defaults (a heterogeneous dataset trains in minibatch mode, with HeteroOptions)
MODE_DEFAULTS = {
    mode: {f.name: f.default for f in dataclasses.fields(cls)}
    for mode, cls in (("minibatch", HeteroOptions), ("fullgraph", FullGraphOptions))
}
DESCRIBED = {  # what `train --help` says of a default that is not a value
    ("layers", None): "one per fanout",
    ("norm", None): "none",
    ("norm", "auto"): f"layer from {DEEP_FROM} layers, else none",
    ("residual", None): f"on from {DEEP_FROM} layers",
    ("embedding_dim", None): "--hidden",
    ("victim_rows", None): "a quarter of the cache",
    ("patience", None): "never",
    ("scratch_dir", None): "a temporary directory",
}


def default_text(name: str, value) -> str | None:
    """How `train --help` names option `name`'s default `value`: the value
    (a list comma-joined; a flag's off or on), or its DESCRIBED meaning;
    None for None without a description (nothing to show)."""
    if (name, value) in DESCRIBED:
        return DESCRIBED[name, value]
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return None
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def mode_defaults(name: str, flag: bool = False) -> str | None:
    """The "(default: ...)" of option `name` in `train --help`: the minibatch
    (and heterogeneous) default, and --mode fullgraph's where it differs;
    None where neither mode has one to show, and for a `flag` (an option
    without a value) whose default is the same in both modes."""
    shown = {mode: default_text(name, d[name]) for mode, d in MODE_DEFAULTS.items() if name in d}
    mini, full = shown.get("minibatch"), shown.get("fullgraph")
    if full is not None and "minibatch" in shown and full != mini:
        return f"(default: {mini or 'none'}; --mode fullgraph: {full})"
    return None if flag or (mini or full) is None else f"(default: {mini or full})"


def fanout_list(text: str) -> list[int]:
    """argparse type for "15,10,5" (-1 = every neighbour)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 15,10,5, got {text!r}") from None
    if any(v < -1 or v == 0 for v in values):
        raise argparse.ArgumentTypeError(f"fanouts must be positive or -1 (all), got {text!r}")
    return values


def relation_fanout(text: str) -> tuple[str, list[int]]:
    """argparse type for "src__rel__dst=4,3": a relation's own fanouts, one per layer (0: none, -1: all)."""
    name, sep, counts = text.partition("=")
    try:
        values = [int(v) for v in counts.split(",")]
    except ValueError:
        values = []
    if not sep or not name or not values or any(v < -1 for v in values):
        raise argparse.ArgumentTypeError(f"expected RELATION=N,N,... like paper__cites__paper=5,5, got {text!r}")
    return name, values


def add_model_arguments(p):
    g = p.add_argument_group("model")
    g.add_argument("--model", choices=["sage", "gcn", "gat"], help="conv layer")
    g.add_argument("--hidden", type=int, help="hidden size")
    g.add_argument("--layers", type=int, help="number of layers")
    g.add_argument("--dropout", type=number, help="dropout after hidden layers")
    g.add_argument("--input-dropout", type=number, help="dropout on input features")
    g.add_argument("--norm", choices=["batch", "layer"], help="normalisation after hidden layers")
    g.add_argument("--residual", action="store_true", help="residual connections in hidden layers")
    g.add_argument("--heads", type=int, help="GAT attention heads")
    g.add_argument(
        "--embedding-dim",
        type=int,
        help="heterogeneous dataset: width of the learnable embeddings of node types without features",
    )
    g.add_argument(
        "--sparse-embeddings",
        action="store_true",
        help="heterogeneous dataset: those embeddings take sparse gradients and train with SparseAdam, "
        "which updates only the rows a batch read (needs --weight-decay 0)",
    )


def add_sampling_arguments(p):
    g = p.add_argument_group("sampling")
    g.add_argument(
        "--fanouts",
        type=fanout_list,
        metavar="N,N,...",
        help="neighbours per layer, output layer first; -1 takes every neighbour (e.g. --fanouts=-1,-1)",
    )
    g.add_argument(
        "--relation-fanouts",
        type=relation_fanout,
        action="append",
        metavar="REL=N,N,...",
        help="heterogeneous dataset: a relation (src__rel__dst) that draws its own fanouts, one per layer "
        "(repeat for several); the others draw --fanouts",
    )
    g.add_argument("--batch-size", type=int, help="seeds per minibatch")
    g.add_argument("--prefetch", type=int, help="minibatches prepared ahead")
    g.add_argument(
        "--sampler",
        choices=["cpu", "gpu", "gpu-pinned"],
        help="neighbour sampler: CPU (numba) or GPU (Triton, CSC in GPU or pinned memory)",
    )
    g.add_argument(
        "--sampling",
        choices=list(SAMPLINGS),
        help="uniform: each node draws min(fanout, degree) neighbours; labor: LABOR-0 layer-neighbour "
        "sampling, each edge kept as often but draws shared across a layer (fewer input rows)",
    )
    g.add_argument(
        "--features",
        choices=list(FEATURES),
        help="where feature rows live: GPU memory, pinned host memory read zero-copy, gathered by "
        "the CPU from memory or a memory map, or read from the SSD with O_DIRECT (ssd)",
    )


def add_tier_arguments(p):
    g = p.add_argument_group("feature tiers (--mode minibatch)")
    g.add_argument("--cache-rows", type=int, help="software cache of this many hot feature rows (0: none)")
    g.add_argument("--cache-gb", type=number, help="software cache of this many GB of feature rows")
    g.add_argument(
        "--cache-policy",
        choices=list(RUN_POLICIES),
        help="what the cache keeps: static (out-degree), presample (hotness of sampled epochs), "
        "lru, sieve, s3fifo, or hybrid (score, reuse and the lookahead window)",
    )
    g.add_argument(
        "--lookahead",
        type=int,
        help="batches sampled ahead whose ids the cache sees (hybrid eviction, victim buffer, lookahead fill)",
    )
    g.add_argument(
        "--victim-rows",
        type=int,
        help="victim buffer rows for evicted rows needed again within the lookahead window",
    )
    g.add_argument(
        "--host-mem-budget",
        type=number,
        metavar="GB",
        help="host memory the SSD tier's cache, victim buffer and staging may use",
    )
    g.add_argument(
        "--replicate-frac",
        type=number,
        help="with --workers: the hottest fraction of the shared cache held by every worker",
    )


def add_fullgraph_arguments(p):
    g = p.add_argument_group("full-graph (--mode fullgraph)")
    g.add_argument(
        "--mode",
        choices=list(MODES),
        default="minibatch",
        help="minibatch sampling, or whole-graph training (GNNPipe when --workers/--chunks > 1) (default: %(default)s)",
    )
    g.add_argument(
        "--workers", type=int, help="processes: data-parallel workers (minibatch), pipeline stages (fullgraph)"
    )
    g.add_argument("--chunks", type=int, help="node chunks streamed through the pipeline")
    g.add_argument(
        "--partition",
        choices=["auto", "metis", "rcm", "range"],
        help="how nodes are cut into chunks (auto: METIS when installed)",
    )
    g.add_argument(
        "--refresh-every",
        type=int,
        help="recompute the pipeline's historical embeddings exactly every N epochs (0: never)",
    )


def add_optimizer_arguments(p):
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, help="epochs")
    g.add_argument("--lr", type=number, help="Adam learning rate")
    g.add_argument("--weight-decay", type=number, help="Adam weight decay")
    g.add_argument("--seed", type=int, help="random seed (run i of --runs: seed + i)")
    g.add_argument(
        "--runs",
        type=int,
        help=f"train N runs (seeds seed, seed+1, ...; at most {MAX_RUNS}) and report each run's and the mean "
        "and std of the metrics at the epoch of best validation, as OGB's leaderboard does",
    )
    g.add_argument(
        "--patience",
        type=int,
        metavar="N",
        help="stop a run when its validation metric has not improved for N epochs",
    )
    g.add_argument(
        "--lr-schedule",
        choices=list(LR_SCHEDULES),
        help="step: lr times --lr-gamma every --lr-step-size epochs; cosine: down to --lr-min over --epochs; "
        "plateau: lr times --lr-gamma when validation has not improved for --lr-patience evaluations",
    )
    g.add_argument("--lr-step-size", type=int, metavar="N", help="epochs between the decays of --lr-schedule step")
    g.add_argument("--lr-gamma", type=number, help="the factor of each decay (--lr-schedule step or plateau)")
    g.add_argument("--lr-min", type=number, help="the last learning rate of --lr-schedule cosine")
    g.add_argument(
        "--lr-patience",
        type=int,
        metavar="N",
        help="evaluations without improvement before --lr-schedule plateau decays",
    )
    g.add_argument(
        "--allow-nonfinite-loss",
        action="store_true",
        help="train on when an epoch's loss is NaN or inf (without it the run stops, naming the epoch and batch)",
    )


def add_run_arguments(p):
    g = p.add_argument_group("run")
    g.add_argument("--device", help="cpu, cuda or cuda:N")
    g.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        help="auto: bf16-mixed where bf16 matmuls are native (CPU with AVX512-BF16 or AMX, "
        "GPU with bf16), else 32; 32-bit; bf16 autocast with fp32 weights (CPU, CUDA; fp32 matmuls "
        "on a CPU without native bf16); or fp16 autocast (CUDA)",
    )
    g.add_argument("--eval-every", type=int, help="evaluate every N epochs")
    g.add_argument("--eval-batch-size", type=int, help="nodes per inference batch")
    g.add_argument(
        "--eval",
        choices=list(EVAL_MODES),
        help="evaluation: exact streaming layer-wise inference over all neighbours, or the training "
        "fanouts through the training loader (sampled); auto: sampled with --features ssd",
    )
    g.add_argument(
        "--scratch-dir",
        help="where layer-wise evaluation keeps hidden layers' outputs",
    )
    g.add_argument(
        "--inference-dtype",
        choices=list(OUTPUT_DTYPES),
        help="dtype of hidden layers' outputs kept by layer-wise evaluation",
    )
    g.add_argument(
        "--metric",
        choices=["auto", "acc", "auc", "rocauc"],
        help="auto: rocauc (OGB's ROC-AUC averaged over tasks) for a multilabel dataset, "
        "ROC AUC for 2 classes, else accuracy",
    )
    g.add_argument("--checkpoint-dir", help="write a checkpoint here after every epoch")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint-dir")
    g.add_argument("--json", dest="json_out", metavar="OUT", help="write the TrainResult JSON here")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    g.add_argument(
        "--verify",
        action="store_true",
        help="re-check the dataset's checksums and invariants before training (reads every file once)",
    )


ARGUMENT_GROUPS = (
    add_model_arguments,
    add_sampling_arguments,
    add_tier_arguments,
    add_fullgraph_arguments,
    add_optimizer_arguments,
    add_run_arguments,
)


def add_parser(sub):
    p = sub.add_parser("train", help="train a GNN on a prepared dataset", argument_default=argparse.SUPPRESS)
    p.add_argument("path", type=input_path, help="prepared dataset directory")
    for add in ARGUMENT_GROUPS:
        add(p)
    for action in p._actions:  # show the trainers' defaults, the only ones
        shown = mode_defaults(action.dest, flag=action.nargs == 0) if action.help else None
        if shown:
            action.help += f" {shown}"
    return p


def options_from_args(args, hetero: bool = False):
    """The options of the chosen `--mode` built from the flags given
    (HeteroOptions for a heterogeneous dataset, `hetero`, which trains in
    minibatch mode); ConfigError for a flag that mode has no option for."""
    mode = getattr(args, "mode", "minibatch")
    cls = MODES[mode]
    if hetero and mode != "minibatch":
        raise ConfigError("--mode", f"{mode}: a heterogeneous dataset trains in minibatch mode")
    cls = HeteroOptions if hetero else cls
    names = {f.name for f in dataclasses.fields(cls) if f.name != "_given"}
    given = {k: v for k, v in vars(args).items() if k not in NOT_OPTIONS}
    for name in given:
        if name not in names:
            where = "a homogeneous dataset" if name in HETERO_ONLY else f"--mode {mode}"
            raise ConfigError(f"--{name.replace('_', '-')}", f"does not apply to {where}")
    if "relation_fanouts" in given:
        given["relation_fanouts"] = dict(given["relation_fanouts"])
    return cls(**given)


def format_summary(result) -> str:
    """The line that ends the epoch table (printed as training went, by
    gnnsys.training.loop.EpochTable): the test metric at the best validation
    epoch, and its run when there were several."""
    if result.best_epoch is None:
        return ""
    line = f"test {result.metric} {result.test:.4f} at best validation epoch {result.best_epoch + 1}"
    if len(result.runs) > 1:
        line += f" of run {result.best_run + 1:02d}, the run of best validation"
    return line


LOGGER_LINES = (  # OGB Logger.print_statistics's labels of result.runs' and result.summary's metrics
    ("Highest Train", "highest_train"),
    ("Highest Valid", "highest_valid"),
    ("  Final Train", "final_train"),
    ("   Final Test", "final_test"),
)


def format_runs(result) -> str:
    """Every run and all runs in the form of OGB's Logger.print_statistics
    (metrics in percent): "Run NN:" and its four metrics, then "All runs:"
    with each metric's mean ± std over the runs."""
    pct = lambda v: "nan" if v is None else f"{100 * v:.2f}"  # noqa: E731
    lines = []
    for run in result.runs:
        lines.append(f"Run {run['run'] + 1:02d}:")
        lines += [f"{label}: {pct(run[key])}" for label, key in LOGGER_LINES]
    lines.append("All runs:")
    for label, key in LOGGER_LINES:
        stat = result.summary.get(key)
        mean, std = (None, None) if stat is None else (stat["mean"], stat["std"])
        lines.append(f"{label}: {pct(mean)} ± {pct(std)}")
    return "\n".join(lines)


def run(args) -> int:
    from gnnsys.datasets import HeteroDataset, as_dataset

    dataset = as_dataset(args.path)  # opened once: its kind decides the options and the trainer
    options = options_from_args(args, isinstance(dataset, HeteroDataset))
    if isinstance(options, FullGraphOptions):
        from gnnsys.trainers.fullgraph import train_fullgraph as trainer
    elif isinstance(options, HeteroOptions):
        from gnnsys.trainers.hetero import train_hetero as trainer
    else:
        from gnnsys.trainers.minibatch import train as trainer
    json_out = getattr(args, "json_out", None)
    if json_out:
        check_output_file(json_out, "--json")
    result = trainer(dataset, dataclasses.replace(options, epoch_table=True))
    if result is None:  # a torchrun worker that does not report (data-parallel rank 0 or the last stage does)
        return 0
    summary = format_summary(result)
    if summary:
        print(summary)
    if len(result.runs) > 1:
        print(format_runs(result))
    if json_out:
        return save_json(result, json_out)
    return 0


def interrupted(args, argv: list) -> str:
    """What follows "gnnsys train: interrupted" (or "terminated"): where the
    last checkpoint is and the command that resumes from it, or that no
    checkpoint was written and how to have one."""
    from pathlib import Path

    from gnnsys.training.checkpoints import FILE

    directory = getattr(args, "checkpoint_dir", None)
    if directory is None:
        return "; no checkpoint was written (--checkpoint-dir DIR writes one after every epoch, --resume continues)"
    written = [p for p in Path(directory).rglob(FILE) if p.is_file()] if Path(directory).is_dir() else []
    if not written:
        return f"; no checkpoint was written in {directory} yet (one is written after every epoch)"
    last = max(written, key=lambda p: p.stat().st_mtime)
    command = ["gnnsys", *argv] + ([] if getattr(args, "resume", False) else ["--resume"])
    return f"; the last checkpoint is {last}; to resume:\n  {shlex.join(command)}"


def save_json(result, path) -> int:
    """Write the result's JSON to `path`; when that fails (the disk filled
    during training), print the JSON to stdout, so the result is kept, and
    the error line; returns the exit status."""
    try:
        print(f"written to {result.save(path)}")
        return 0
    except PathError as e:
        print(result.to_json())
        return error("train", f"{e} (the result JSON is printed on stdout instead)")
