"""argparse value types shared by the commands: bad values are usage errors (exit 2) that
name the option and the value."""

from __future__ import annotations

import argparse
import math


def finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 1, e.g. `1,6,12`."""
    return tuple(positive_int(part.strip()) for part in text.split(","))


def positive_int(text: str) -> int:
    v = integer(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v
