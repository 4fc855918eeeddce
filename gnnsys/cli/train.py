"""`gnnsys train DIR [options]`: train a GNN on a prepared dataset.

The flags are generated from the trainers' options (gnnsys.cli.schema_flags
over gnnsys.training.components): a new option is one field of a
component, and nothing here changes. A flag that the chosen `--mode` (or a
heterogeneous dataset) has no option for is refused with one line, as is a
`--config` key; `--print-config` writes the options a run would use as the
YAML `--config` reads.
"""

from __future__ import annotations

import shlex
import sys

from gnnsys.cli import error
from gnnsys.cli.schema_flags import (
    add_schema_arguments,
    as_flag_error,
    build_options,
    check_config_keys,
    given_options,
    read_config,
    schema_fields,
    yaml_config,
)
from gnnsys.datasets.input_paths import input_path
from gnnsys.errors import ConfigError, PathError
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.hetero_options import HeteroOptions
from gnnsys.training.options import MinibatchOptions
from gnnsys.training.outputs import check_output_file
from gnnsys.training.schema import cli_info

MODES = {"minibatch": MinibatchOptions, "fullgraph": FullGraphOptions}
LABELS = {"minibatch": MinibatchOptions, "heterogeneous dataset": HeteroOptions, "--mode fullgraph": FullGraphOptions}
TITLES = {
    "feature tiers": "feature tiers (minibatch)",
    "full-graph": "full-graph (--mode fullgraph)",
    "heterogeneous": "heterogeneous dataset",
}
NOT_OPTIONS = ("path", "mode", "json_out", "config", "print_config", "run", "interrupted", "command")


def add_parser(sub):
    import argparse

    p = sub.add_parser("train", help="train a GNN on a prepared dataset", argument_default=argparse.SUPPRESS)
    p.add_argument("path", type=input_path, help="prepared dataset directory")
    groups = add_schema_arguments(p, LABELS, TITLES)
    run = groups["run"]
    run.add_argument(
        "--mode",
        choices=list(MODES),
        help="minibatch sampling, or whole-graph training (GNNPipe when --workers/--chunks > 1) (default: minibatch)",
    )
    run.add_argument("--json", dest="json_out", metavar="OUT", help="write the TrainResult JSON here")
    run.add_argument(
        "--config",
        type=input_path,
        metavar="FILE",
        help="read options from this YAML file (option names as keys, as --print-config writes them); "
        "flags given here win",
    )
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the options this run would use as YAML (what --config reads) and exit",
    )
    return p


def options_from_args(args, hetero: bool = False):
    """The options of the chosen mode (`--mode`, else the config file's `mode`, else minibatch) built from
    the config file's values and the flags given (the flags win); HeteroOptions for a heterogeneous dataset,
    `hetero`, which trains in minibatch mode. ConfigError naming the flag (or the file's key) of an option
    that mode has not, or whose value is refused."""
    path = getattr(args, "config", None)
    config = read_config(path) if path is not None else {}
    every = {name for cls in LABELS.values() for name, info in cls.model_fields.items() if cli_info(info)["cli"]}
    if path is not None:
        check_config_keys(path, config, every | {"mode"})
    mode = getattr(args, "mode", config.pop("mode", "minibatch"))
    if mode not in MODES:
        raise ConfigError(f"{path}: mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    if hetero and mode != "minibatch":
        raise ConfigError("--mode", f"{mode}: a heterogeneous dataset trains in minibatch mode")
    cls = HeteroOptions if hetero else MODES[mode]
    homogeneous = {name for c in MODES.values() for name in c.model_fields}
    given = given_options(args, NOT_OPTIONS)
    unknown = [name for name in [*given, *config] if name not in cls.model_fields]
    kind = "a heterogeneous dataset" if hetero else f"--mode {mode}"
    if not hetero and unknown and unknown[0] not in homogeneous:
        kind = "a homogeneous dataset"
    return build_options(cls, given, kind, config, path)


def print_config(options, mode: str) -> int:
    """Write `options` as the YAML --config reads: the mode and every command-line option, as given or its
    default (so that a value this machine resolves, such as precision "auto", stays to be resolved where the
    file is used); None where it does not apply."""
    fields = type(options).model_fields  # values the run resolves (precision "auto", layers) as their defaults
    values = {k: v if options.given(k) or v is None else fields[k].default for k, v in options.to_dict().items()}
    ordered = [name for fields in schema_fields(LABELS).values() for name in fields if name in values]
    sys.stdout.write(yaml_config({"mode": mode, **{name: values[name] for name in ordered}}))
    return 0


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
    if getattr(args, "print_config", False):
        return print_config(options, "fullgraph" if isinstance(options, FullGraphOptions) else "minibatch")
    if isinstance(options, FullGraphOptions):
        from gnnsys.trainers.fullgraph import train_fullgraph as trainer
    elif isinstance(options, HeteroOptions):
        from gnnsys.trainers.hetero import train_hetero as trainer
    else:
        from gnnsys.trainers.minibatch import train as trainer
    json_out = getattr(args, "json_out", None)
    if json_out:
        check_output_file(json_out, "--json")
    try:
        result = trainer(dataset, options.replace(epoch_table=True))
    except ConfigError as e:  # a check that needed the data or the machine: named as the user wrote it
        raise as_flag_error(e, type(options).model_fields, {}) from None
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
