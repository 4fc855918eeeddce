"""`gnnsys info DIR [--verify] [--json] [--probe-io]`."""

from __future__ import annotations

import json
import os
import sys

from gnnsys.cli import gigabytes
from gnnsys.datasets.input_paths import input_path


def dataset_path(text: str) -> str:
    """input_path, once a dataset an interrupted `prepare --overwrite` left aside is put back (restore_replaced)."""
    from gnnsys.atomic import restore_replaced

    restore_replaced(text)
    return input_path(text)


def add_parser(sub):
    p = sub.add_parser("info", help="print the summary of a prepared dataset")
    p.add_argument("path", type=dataset_path, help="prepared dataset directory")
    p.add_argument("--verify", action="store_true", help="re-check every checksum and invariant; exit 1 on failure")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--device", default="cpu", help="the training device placement 'auto' is chosen for (default: %(default)s)"
    )
    p.add_argument(
        "--host-mem-budget",
        type=gigabytes,
        metavar="GB",
        help="say whether the features fit this much host memory, and the cache an SSD stack can keep",
    )
    p.add_argument(
        "--probe-io",
        action="store_true",
        help="measure the random and sequential O_DIRECT reads of the device holding features.bin "
        "(a few seconds), print them and refresh the cache the SSD tier plans its reads with",
    )
    return p


def probe_io(file: str, row_bytes: int, stride: int) -> tuple[list[str], dict | None]:
    """(lines to print, the model as JSON or None) of a fresh I/O probe of `file` (a features.bin)."""
    from gnnsys.errors import ConfigError
    from gnnsys.storage.direct_io import open_rows_file, row_blocks
    from gnnsys.storage.io_probe import MIN_PROBE_BYTES, cache_path, cached_model, format_model, io_model

    try:
        rows = open_rows_file(file, True)
    except ConfigError:
        return [f"I/O probe: not run, the file system of {file} does not honour O_DIRECT"], None
    os.close(rows.fd)
    if rows.size < MIN_PROBE_BYTES:
        return [
            f"I/O probe: not run, {file} is under {MIN_PROBE_BYTES >> 20} MiB (random reads over it would "
            f"measure the device's cache)"
        ], None
    read_size = row_blocks(row_bytes, stride, rows.block) * rows.block
    model = io_model(file, read_size, refresh=True)
    cached = cached_model(file, read_size) == model  # not where the cache cannot be written (a warning said so)
    where = f"cached in {cache_path(file, read_size)}" if cached else "not cached"
    return [*format_model(model), f"  {where}"], model.to_json()


def ssd_note(path: str, host_mem_budget: float | None) -> str:
    """What `train --features ssd` with the default sampling (and `host_mem_budget`) reads the rows with, and why."""
    from gnnsys.datasets import load_dataset
    from gnnsys.loading.feature_store import ssd_choice
    from gnnsys.training.options import MinibatchOptions

    budget = {} if host_mem_budget is None else {"host_mem_budget": host_mem_budget}
    return ssd_choice(load_dataset(path), MinibatchOptions(features="ssd", **budget))


def run(args) -> int:
    from gnnsys.datasets.features_file import DTYPES
    from gnnsys.datasets.inspect import format_summary, placement_table, summarize, verify
    from gnnsys.errors import ConfigError
    from gnnsys.storage.advice import format_advice, placement_advice

    problems = verify(args.path) if args.verify else []
    if problems:  # the summary would stop at the first of them
        for p in problems:
            print(f"FAIL {p}", file=sys.stderr)
        print(f"verify: {len(problems)} problem(s)")
        return 1
    summary = summarize(args.path)
    f, rows = placement_table(summary)  # a heterogeneous dataset's: its target type's features
    if f is None:
        for given, option in ((args.probe_io, "--probe-io"), (args.host_mem_budget is not None, "--host-mem-budget")):
            if given:
                raise ConfigError(option, f"the target node type {summary['target']!r} has no feature table")
    advice, probe_lines = [], []
    if f is not None:
        row_bytes = f["dim"] * DTYPES[f["dtype"]].itemsize
        summary["placement"] = placement_advice(rows, f["row_stride"], row_bytes, args.device, args.host_mem_budget)
        advice = format_advice(summary["placement"])
    if args.probe_io:
        file = os.path.join(args.path, f["file"])
        probe_lines, summary["io_probe"] = probe_io(file, row_bytes, f["row_stride"])
    if f is not None and summary["kind"] == "homogeneous":  # after a probe, whose rates it weighs
        summary["ssd"] = ssd_note(args.path, args.host_mem_budget)
        advice.append(f"ssd          --features ssd (default sampling): {summary['ssd']}")
    text = "\n".join([format_summary(summary), *advice, *probe_lines])
    print(json.dumps(summary, indent=2) if args.json else text)
    if args.verify:
        print("verify: ok")
    return 0
