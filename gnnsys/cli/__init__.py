"""The `gnnsys` command line: one module per subcommand, each with
`add_parser(subparsers)` and `run(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

SUBCOMMANDS = ("prepare", "info", "train", "predict")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    from gnnsys.datasets.writer import tool_version

    parser = argparse.ArgumentParser(prog="gnnsys", description="Train GNNs on graphs too large for GPU memory.")
    parser.add_argument("--version", action="version", version=f"gnnsys {tool_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"gnnsys.cli.{name}")
        module.add_parser(sub).set_defaults(run=module.run)
    return parser


def main(argv=None) -> int:
    """Entry point of the console script; returns the exit status. Output cut
    short by its reader (`gnnsys info --json | head`) ends quietly with status
    141, as for a process that SIGPIPE killed."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141


def _main(argv) -> int:
    from gnnsys.errors import GnnsysError

    args = build_parser().parse_args(glue_negative_lists(sys.argv[1:] if argv is None else list(argv)))
    try:
        return args.run(args)
    except GnnsysError as e:
        print(f"gnnsys {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gnnsys {args.command}: interrupted", file=sys.stderr)
        return 130


_NEGATIVE_LIST = re.compile(r"-\d+(,-?\d+)+")


def glue_negative_lists(argv: list) -> list:
    """`--fanouts -1,-1` -> `--fanouts=-1,-1`: argparse would take a value
    that starts with '-' and is not a plain number for an option."""
    out = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE_LIST.fullmatch(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
