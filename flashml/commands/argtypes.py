"""argparse value types shared by the commands: bad values are usage errors (exit 2) that
name the option and the value. The number types live with the settings table
(flashml/settings.py), which uses them too: a numeric option's type is a `Number` (an
integer or a finite float, its bounds and its unit), so every numeric value is validated
where the option is declared."""

from __future__ import annotations

import argparse

from flashml.settings import (
    MAX_INTEGER,
    MAX_SEED,
    Number,
    finite_float,
    integer,
    is_numeric_type,
    positive_ints,
)

__all__ = ["MAX_INTEGER", "MAX_SEED", "SEED", "Number", "finite_float", "hours_of_day",
           "integer", "is_numeric_type", "positive_int", "positive_ints", "unit_fraction"]

#: A seed of a generator or a hash: NumPy and the generators take 32 bits.
SEED = Number(int, 0, MAX_SEED)
#: A probability, a threshold or a bonus in [0, 1].
unit_fraction = Number(float, 0.0, 1.0)


def hours_of_day(text: str) -> tuple[int, ...]:
    """A comma-separated list of distinct hours of the day 0..23, e.g. `14,15,16` ('' = none)."""
    if not text.strip():
        return ()
    hours = tuple(integer(part.strip()) for part in text.split(","))
    if any(not 0 <= h < 24 for h in hours) or len(set(hours)) != len(hours):
        raise argparse.ArgumentTypeError(f"expected distinct hours 0..23, got {text!r:.80}")
    return tuple(sorted(hours))


def positive_int(text: str) -> int:
    """An integer in 1..MAX_INTEGER."""
    v = integer(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    if v > MAX_INTEGER:
        raise argparse.ArgumentTypeError(f"expected an integer of at most {MAX_INTEGER}, got "
                                         f"{text:.80}")
    return v
