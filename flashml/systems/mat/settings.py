"""`flashml mat run`'s settings: MAT's policy knobs (`MatParams`, declared once in
settings.toml beside this file), the objectives and `MatSettings` with its option table
(`OPTIONS`; the command's options, with the knobs': `add_cli`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.errors import UserError
from flashml.settings import MAX_SEED, Number, Option, add_options, option_table, option_values

#: MAT's policy knobs as settings.toml declares them (defaults, bounds, ABI names).
KNOBS = knobs.load("mat")

#: The issue's budget: <= 2.5 predictions per eviction (LRB: 64); Optuna's trials above it
#: are infeasible, and without reused predictions it is the largest k tried.
K_MAX = 2.5

_D = KNOBS.defaults()


@dataclass(frozen=True)
class MatParams:
    """Algorithm 1's knobs (settings.toml has each one's meaning, unit and bounds): target
    candidates per eviction k, at most L candidates, threshold step delta, initial threshold
    T0 in logical requests (0: the number of cached objects at the first eviction), the
    threshold controller ("mean": T *= 1 + delta (k - p), p the candidates taken, which holds
    their mean per eviction at k; "sign": the paper's Algorithm 1, T *= 1 +- delta as the
    victim's try is below or above k, whose mean lies above k: 2.9-3.1 at k ~2.4 on
    CloudPhysics) and `reuse_predictions` (the paper's recorded predictions, §4.6: a
    candidate's predicted distance is kept until its next access, so a candidate seen at the
    tail again costs no prediction). The defaults are the declared ones, the simulator's and
    the C runtime's alike."""

    k: float = _D["k"]
    max_candidates: int = _D["max_candidates"]
    delta: float = _D["delta"]
    initial_threshold: float = _D["initial_threshold"]
    controller: str = _D["controller"]
    reuse_predictions: bool = _D["reuse_predictions"]

    def sim_kwargs(self) -> dict[str, Any]:
        return {"k": self.k, "max_candidates": self.max_candidates, "delta": self.delta,
                "initial_threshold": self.initial_threshold, "controller": self.controller,
                "reuse_predictions": self.reuse_predictions}


#: The knobs `flashml mat run` offers as options (memory_window has its own default there).
PARAM_KNOBS = ("k", "max_candidates", "delta", "initial_threshold", "controller",
               "reuse_predictions")

#: The largest k (candidates per eviction) Optuna tries with reused predictions: a candidate
#: seen at the tail again costs no prediction, so more candidates fit the same budget.
K_MAX_REUSED = 8.0

#: The shortest memory window the eviction contract takes, in logical requests (declared:
#: the simulator's and the runtime's checks say the same).
MIN_MEMORY_WINDOW = int(KNOBS["memory_window"].min or 0)

#: The most candidates per eviction (--max-candidates) and so the largest --k.
MAX_CANDIDATES = int(KNOBS["max_candidates"].max or 0)

#: --objective's choices: the miss ratio the job minimises, its summary key and the
#: size-aware label's default exponent for it (flashml/systems/mat/model.py `label_samples`): bytes
#: (the paper's metric, byte miss ratio) takes the paper's label, in which size plays no part
#: (a byte of a large object is worth a byte of a small one); requests (object miss ratio)
#: the size-aware label, which evicts large objects sooner at equal remaining time.
OBJECTIVES = {"bytes": ("byte_miss_ratio", 0.0), "requests": ("miss_ratio", 0.5)}

#: The in-house LRB's candidates sampled per eviction (LRB's 64; sim/src/mat/lrb.rs).
LRB_SAMPLE = 64


@dataclass(frozen=True)
class MatSettings:
    """Everything `flashml mat run` needs."""

    trace: Path | None = None
    format: str | None = None
    preset: str = "cdn-like"
    seed: int = 0
    accesses: int | None = None
    #: Sizes (4MiB, 1000obj) or percentages of the working set (5%).
    capacities: tuple[str, ...] = ("1%", "5%", "10%")
    unit: str = "bytes"
    mat: MatParams = MatParams()
    #: The first fraction of the requests whose LRU replay gives the training samples.
    train_fraction: float = 0.3
    #: The next fraction: the validation window on which Optuna tunes T0 and k.
    val_fraction: float = 0.2
    #: Optuna trials over (T0, k, model size) per capacity and label horizon (0: the
    #: defaults).
    trials: int = 16
    #: LRB's memory window in logical requests; None: the training window's length (what a
    #: replay of it can observe; LRB's 2^26 suits 100 M-request traces, not short ones).
    memory_window: int | None = None
    #: The label horizons H the tuning chooses among, as fractions of the training window
    #: (systems/mat/model.py `label_samples`): back within H is labelled by its distance, else "not
    #: back"; the first is the default trial's. A horizon shorter than the ages of the tail
    #: candidates labels almost all of them "not back" (a large cache's tail is old), a long
    #: one keeps fewer rows (those whose whole horizon the replay saw); which is better
    #: depends on the cache size, so the validation window decides (`tune`).
    label_horizons: tuple[float, ...] = (0.25, 0.5)
    #: What the job minimises (OBJECTIVES): byte miss ratio (the paper's) or miss ratio;
    #: it chooses the default label and scores the tuning trials.
    objective: str = "bytes"
    #: The size-aware label's exponent (0: the paper's label, the distance alone); None:
    #: the objective's (OBJECTIVES).
    size_exponent: float | None = None
    #: Model sizes (trees, leaves) Optuna chooses among; the first is the default trial's.
    model_sizes: tuple[tuple[int, int], ...] = ((32, 32), (16, 16), (64, 32))
    #: Equal windows of the whole trace for the periodic-retraining emulation (0: skip it).
    windows: int = 4
    #: libCacheSim baselines to run beside ours (those its package provides).
    baselines: tuple[str, ...] = ("lru", "fifo", "lfu", "arc", "s3fifo", "sieve", "lhd",
                                  "lrb", "glcache", "belady")

    def replace(self, **kw: Any) -> MatSettings:
        return replace(self, **kw)

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> MatSettings:
        v = option_values(OPTIONS, args)
        caps = tuple(c.strip() for c in (v["capacity"] or OPTIONS["capacity"].default)
                     .split(",") if c.strip())
        if not caps:
            raise UserError("--capacity: give at least one size, e.g. 4MiB,16MiB or 1%,5%")
        for c in caps:
            _check_capacity(c)
        if not v["train_fraction"] + v["val_fraction"] < 1.0:
            raise UserError("--train-fraction and --val-fraction must be > 0 and >= 0 with a "
                            f"sum below 1, got {v['train_fraction']} and {v['val_fraction']}")
        # the mean controller multiplies T by 1 + delta (k - p), p up to L candidates, for
        # every k tuning tries (from 1): it must stay > 0 there too
        worst = args.max_candidates - min(args.k, 1.0)
        if args.controller == "mean" and args.delta * worst >= 1.0:
            raise UserError(f"--delta {args.delta:g} with --max-candidates "
                            f"{args.max_candidates} and --controller mean: delta x "
                            f"(max candidates - 1) must stay below 1 for the k tuning tries "
                            f"(here {args.delta * worst:g}); lower --delta or "
                            "--max-candidates")
        values = {name: getattr(args, name) for name in PARAM_KNOBS}
        KNOBS.check_rules("--k, --max-candidates, --delta and --controller", values)
        horizons = _label_horizons(v["label_horizon"])
        if v["windows"] == 1:
            raise UserError(f"--windows must be 0 (off) or 2..64, got {v['windows']}")
        sizes = _model_sizes(v["model_sizes"])
        return cls(trace=args.trace, format=args.format, preset=v["preset"], seed=v["seed"],
                   accesses=v["accesses"], capacities=caps, unit=v["unit"],
                   mat=MatParams(**values),
                   train_fraction=v["train_fraction"], val_fraction=v["val_fraction"],
                   trials=v["trials"], memory_window=args.memory_window,
                   label_horizons=horizons, size_exponent=v["size_exponent"],
                   objective=v["objective"],
                   model_sizes=sizes, windows=v["windows"],
                   baselines=_baselines(v["baselines"]))


def _baselines(text: str) -> tuple[str, ...]:
    """`lru,lrb` -> ("lru", "lrb"); empty or `none`: no libCacheSim baselines."""
    from flashml.systems.mat.object_baselines import POLICIES

    names = tuple(dict.fromkeys(b.strip().lower() for b in text.split(",") if b.strip()))
    if names in ((), ("none",)):
        return ()
    if unknown := [b for b in names if b not in POLICIES]:
        raise UserError(f"--baselines: unknown {', '.join(map(repr, unknown))}; known: "
                        f"{', '.join(POLICIES)} (or none)")
    return names


def _label_horizons(text: str) -> tuple[float, ...]:
    """`0.25,0.5` -> (0.25, 0.5): each in (0, 1], at least one."""
    out = []
    for part in (t.strip() for t in str(text).split(",")):
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise UserError(f"--label-horizon: expected fractions of the training window, "
                            f"e.g. 0.25,0.5; cannot read {part!r}") from None
        if not 0.0 < v <= 1.0:
            raise UserError(f"--label-horizon must be in (0, 1] (a fraction of the training "
                            f"window), got {part}")
        out.append(v)
    if not out:
        raise UserError("--label-horizon: give at least one fraction, e.g. 0.25")
    return tuple(dict.fromkeys(out))


def _model_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """`32x32,16x16` -> ((32, 32), (16, 16))."""
    out = []
    for part in (t.strip() for t in text.split(",")):
        if not part:
            continue
        try:
            trees, leaves = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise UserError(f"--model-sizes: expected TREESxLEAVES, got {part!r}") from None
        if not (1 <= trees <= 1024 and 2 <= leaves <= 1024):
            raise UserError(f"--model-sizes: {part!r}: trees in 1..1024, leaves in 2..1024")
        out.append((trees, leaves))
    if not out:
        raise UserError("--model-sizes: give at least one TREESxLEAVES, e.g. 32x32")
    return tuple(dict.fromkeys(out))


def _check_capacity(text: str) -> None:
    if text.endswith("%"):
        try:
            v = float(text[:-1])
        except ValueError:
            raise UserError(f"--capacity: cannot read {text!r}") from None
        if not 0.0 < v <= 100.0:
            raise UserError(f"--capacity: a percentage must be in (0, 100], got {text!r}")
        return
    from flashml.simulation import parse_capacity

    try:
        parse_capacity(text)
    except ValueError as e:
        raise UserError(f"--capacity: {e}") from None


_D = MatSettings()

#: `flashml mat run`'s options (besides --trace, --format and --out; MAT's policy knobs are
#: settings.toml's, `KNOBS`), each default the dataclass's.
OPTIONS = option_table(
    Option("preset", "--preset", str, _D.preset, "object preset for the default trace"),
    Option("seed", "--seed", Number(int, 0, MAX_SEED), _D.seed, "seed of the generated trace"),
    Option("accesses", "--accesses", Number(int, 1, 10**9, unit="requests"), _D.accesses,
           "size of the generated trace"),
    Option("capacity", "--capacity", str, ",".join(_D.capacities), "cache sizes: bytes "
           "(4MiB), objects (1000obj) or percent of the working set (5%%)",
           metavar="SIZE[,SIZE...]"),
    Option("unit", "--unit", str, _D.unit,
           "what a percentage capacity counts (objects: sizes ignored)",
           choices=("bytes", "objects")),
    Option("train_fraction", "--train-fraction", Number(float, 0.0, 1.0, low_open=True),
           _D.train_fraction,
           "first fraction of the trace whose LRU replay gives training samples"),
    Option("val_fraction", "--val-fraction", Number(float, 0.0, 1.0), _D.val_fraction,
           "the next fraction, on which Optuna tunes T0 and k"),
    Option("trials", "--trials", Number(int, 0, 10_000, unit="trials"), _D.trials,
           "Optuna trials over (T0, k, model size) per capacity and label horizon (0: "
           "defaults)"),
    Option("label_horizon", "--label-horizon", str,
           ",".join(f"{h:g}" for h in _D.label_horizons), "label horizons, fractions of the "
           "training window (in (0, 1]), the tuning chooses among on the validation window",
           metavar="H[,H...]"),
    Option("objective", "--objective", str, _D.objective, "the miss ratio to minimise: bytes "
           "(byte miss ratio, the paper's metric) or requests (object miss ratio); it picks "
           "the default label (--size-exponent 0 for bytes, 0.5 for requests) and scores the "
           "tuning trials", choices=tuple(OBJECTIVES)),
    Option("size_exponent", "--size-exponent", Number(float, 0.0, 4.0), _D.size_exponent,
           "size-aware label exponent (0: the paper's label); default: the objective's (0 for "
           "bytes, 0.5 for requests)"),
    Option("model_sizes", "--model-sizes", str,
           ",".join(f"{t}x{lv}" for t, lv in _D.model_sizes),
           "TREESxLEAVES model sizes Optuna chooses among"),
    Option("windows", "--windows", Number(int, 0, 64, unit="windows"), _D.windows,
           "equal windows for the periodic-retraining emulation (0: off)"),
    Option("baselines", "--baselines", str, ",".join(_D.baselines),
           "libCacheSim baselines beside ours, comma-separated (none or empty: none)"),
)


def add_cli(p: argparse.ArgumentParser) -> None:
    add_options(p, "preset", "seed", "accesses", "capacity", "unit", options=OPTIONS)
    knobs.add_options(p, KNOBS, PARAM_KNOBS)
    add_options(p, "train_fraction", "val_fraction", "trials", options=OPTIONS)
    knobs.add_options(p, KNOBS, ("memory_window",), defaults={"memory_window": None},
                      shown={"memory_window": "the training window's length"})
    add_options(p, "label_horizon", "objective", "size_exponent", "model_sizes", "windows",
                "baselines", options=OPTIONS)


def size_exponent(s: MatSettings, cap: dict[str, Any]) -> float:
    """The size-aware label's exponent at a capacity: 0 for a cache counting objects (its
    sizes cost nothing), for one counting bytes `s.size_exponent`, else the objective's
    (OBJECTIVES: 0 for bytes, 0.5 for requests)."""
    if cap["unit"] != "bytes":
        return 0.0
    return s.size_exponent if s.size_exponent is not None else OBJECTIVES[s.objective][1]


def objective_key(s: MatSettings) -> str:
    """The summary key of the miss ratio the job minimises: byte_miss_ratio or miss_ratio."""
    return OBJECTIVES[s.objective][0]
