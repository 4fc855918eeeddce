"""What a float option may be (a leaf: imports nothing from the project):
`number`, the argparse type of every float option of every command, takes
a finite number at most FLOAT_MAX in magnitude; each option's own range
(lr > 0, dropout in [0, 1), ...) is then its options' check."""

from __future__ import annotations

import argparse

FLOAT_MAX = 1e12  # the largest float option: GB options become byte counts, scales multiply node counts


def number(text: str) -> float:
    """argparse type of a float option: a finite number of magnitude at most FLOAT_MAX."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not abs(value) <= FLOAT_MAX:  # nan too
        raise argparse.ArgumentTypeError(f"must be a finite number at most {FLOAT_MAX:g} in magnitude, got {text!r}")
    return value


def gigabytes(text: str) -> float:
    """argparse type for a memory size in GB (10^9 bytes): a number > 0 and at most FLOAT_MAX."""
    return _gigabytes(text, zero=False)


def gigabytes_or_zero(text: str) -> float:
    """argparse type for a size in GB that may be 0 (none): a number >= 0 and at most FLOAT_MAX."""
    return _gigabytes(text, zero=True)


def _gigabytes(text: str, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 <= value if zero else 0 < value) or not value <= FLOAT_MAX:
        low = ">= 0" if zero else "> 0"
        raise argparse.ArgumentTypeError(f"must be a number of GB {low} and at most {FLOAT_MAX:g}, got {text!r}")
    return value
