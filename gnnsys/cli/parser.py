"""`OneLineParser`: the argument parser of every command, which reports bad
input in one line ("gnnsys COMMAND: error: MESSAGE", exit status 2)
instead of a usage block above it, and answers a mistyped choice with the
nearest valid one."""

from __future__ import annotations

import argparse
import sys

from gnnsys.errors import did_you_mean


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (see the module docstring); `--help` shows the usage."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            allowed = ", ".join(map(str, action.choices))
            hint = did_you_mean(value, action.choices)
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {allowed}){hint}")
