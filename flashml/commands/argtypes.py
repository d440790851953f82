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


def add_peak_options(p: argparse.ArgumentParser) -> None:
    """--peak-hours / --peak-bonus of the commands that train (models/peak.py)."""
    from flashml.models.peak import PeakSettings

    d = PeakSettings()
    p.add_argument("--peak-hours", type=integer, default=d.hours,
                   help="peak-aware admission: how many of the busiest hours of the day (no-cache "
                   "disk-head time of the training window) get a lower threshold (0: a flat "
                   f"threshold; default {d.hours})")
    p.add_argument("--peak-bonus", type=finite_float, default=d.bonus,
                   help=f"how much lower the threshold is in those hours (default {d.bonus})")


def add_train_hours_option(p: argparse.ArgumentParser) -> None:
    """--train-hours of the commands that train: the training window, after which every
    policy is judged (the simulator's warm-up)."""
    from flashml.config import DEFAULTS

    p.add_argument("--train-hours", type=finite_float, default=DEFAULTS.warmup_s / 3600.0,
                   metavar="H", help="train on the trace's first H hours and judge every "
                   "policy on the rest (default %(default)g: the first day, as Baleen)")


def train_seconds(args: argparse.Namespace) -> float:
    """--train-hours in seconds (a UserError unless > 0)."""
    from flashml.errors import UserError

    if not args.train_hours > 0:
        raise UserError(f"--train-hours must be > 0, got {args.train_hours}")
    return float(args.train_hours) * 3600.0


def peak_settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """PeakSettings from --peak-hours / --peak-bonus (a UserError when out of range)."""
    from flashml.errors import UserError
    from flashml.models.peak import PeakSettings

    try:
        return PeakSettings(hours=args.peak_hours, bonus=args.peak_bonus)
    except ValueError as e:
        raise UserError(f"--peak-hours/--peak-bonus: {e}") from None


def positive_int(text: str) -> int:
    v = integer(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v
