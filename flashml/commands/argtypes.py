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


def hours_of_day(text: str) -> tuple[int, ...]:
    """A comma-separated list of distinct hours of the day 0..23, e.g. `14,15,16` ('' = none)."""
    if not text.strip():
        return ()
    hours = tuple(integer(part.strip()) for part in text.split(","))
    if any(not 0 <= h < 24 for h in hours) or len(set(hours)) != len(hours):
        raise argparse.ArgumentTypeError(f"expected distinct hours 0..23, got {text!r}")
    return tuple(sorted(hours))


def positive_int(text: str) -> int:
    v = integer(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v
