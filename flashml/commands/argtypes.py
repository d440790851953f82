"""argparse value types shared by the commands: bad values are usage errors (exit 2) that
name the option and the value. The number types live with the settings table
(flashml/settings.py), which uses them too."""

from __future__ import annotations

import argparse

from flashml.settings import finite_float, integer, positive_ints

__all__ = ["finite_float", "hours_of_day", "integer", "positive_int", "positive_ints"]


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
