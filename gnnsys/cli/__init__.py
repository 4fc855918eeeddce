"""The `gnnsys` command line: one module per subcommand, each with
`add_parser(subparsers)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
import threading
import warnings

from gnnsys.numbers import gigabytes, number  # noqa: F401 -- the float types of every command

SUBCOMMANDS = ("prepare", "info", "train", "predict")
INTERRUPTED = 128 + signal.SIGINT  # the exit statuses after an interrupt (130) and a SIGTERM (143)
TERMINATED = 128 + signal.SIGTERM


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered (a subcommand
    module's `interrupted(args, argv) -> str`, when it has one, adds to the
    line an interrupt or SIGTERM prints)."""
    from gnnsys.cli.parser import OneLineParser
    from gnnsys.datasets.writer import tool_version

    parser = OneLineParser(prog="gnnsys", description="Train GNNs on graphs too large for GPU memory.")
    parser.add_argument("--version", action="version", version=f"gnnsys {tool_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"gnnsys.cli.{name}")
        module.add_parser(sub).set_defaults(run=module.run, interrupted=getattr(module, "interrupted", None))
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers send), raised where SIGINT raises
    KeyboardInterrupt, so that every cleanup an interrupt runs runs for it too."""


def main(argv=None) -> int:
    """Entry point of the console script; returns the exit status. Output cut
    short by its reader (`gnnsys info --json | head`) ends quietly with status
    141, as for a process that SIGPIPE killed. SIGTERM is handled as SIGINT
    is (status 143 instead of 130); a closed stdout or stderr is /dev/null."""
    _open_closed_std_streams()
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141


def entry() -> None:
    """The `gnnsys` command (its console script and `python -m gnnsys`): `main`'s
    status as the process's exit status. After an interrupt or a SIGTERM, whose
    cleanup has run and whose line is printed, the process ends at once
    (os._exit): the interpreter's shutdown, with the libraries' threads (numba's
    and torch's OpenMP and thread pools) still alive, could otherwise abort it
    ("terminate called without an active exception", SIGABRT) instead of
    ending with 130 or 143."""
    status = main()
    if status in (INTERRUPTED, TERMINATED):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def _main(argv) -> int:
    from gnnsys.environment import check_environment
    from gnnsys.errors import GnnsysError

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:  # a command: first of all, before its arguments' checks read any path
        warnings.formatwarning = _one_line_warning(argv[0])
        try:
            check_environment()
        except GnnsysError as e:
            return error(argv[0], e)
    args = build_parser().parse_args(glue_negative_lists(argv))
    warnings.formatwarning = _one_line_warning(args.command)
    previous = _raise_on_sigterm()  # from here: before, nothing is written and the default action is right
    try:
        return args.run(args)
    except GnnsysError as e:
        return error(args.command, e)
    except (OSError, MemoryError) as e:  # BrokenPipeError ends quietly in main
        if isinstance(e, BrokenPipeError):
            raise
        return error(args.command, _describe(e))
    except KeyboardInterrupt as e:  # Terminated too
        said = "terminated" if isinstance(e, Terminated) else "interrupted"
        print(
            f"gnnsys {args.command}: {said}{args.interrupted(args, argv) if args.interrupted else ''}", file=sys.stderr
        )
        return TERMINATED if isinstance(e, Terminated) else INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _one_line_warning(command: str):
    """A warnings.formatwarning that prints "gnnsys COMMAND: warning: MESSAGE" on one line."""

    def format_warning(message, category, filename, lineno, line=None):
        return f"gnnsys {command}: warning: {message}\n"

    return format_warning


def error(command: str, message) -> int:
    """Print "gnnsys COMMAND: error: MESSAGE" (one line) to stderr; returns 2, the status of bad input."""
    print(f"gnnsys {command}: error: {message}", file=sys.stderr)
    return 2


def _describe(e: BaseException) -> str:
    """One line for an error no gnnsys check caught: an OSError names its
    file and reason; running out of memory says so."""
    from gnnsys.errors import PathError, os_reason

    if isinstance(e, MemoryError):
        return f"out of memory ({str(e) or 'MemoryError'}); ask for less (a smaller model, batch, cache, fewer workers)"
    return str(PathError(e.filename, e)) if e.filename is not None else os_reason(e)


def _raise_on_sigterm():
    """Make SIGTERM raise Terminated in the main thread; returns the handler
    it replaced (None when not on the main thread, where none can be set)."""

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: cleanup runs to its end
        raise Terminated()

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, terminate)


def _open_closed_std_streams():
    """Put /dev/null on a closed fd 0, 1 or 2 (`gnnsys train C >&-`), so that
    neither our prints nor a file opened later can land on it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free fd: this one, as the lower ones are open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, mode, closefd=False))


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
