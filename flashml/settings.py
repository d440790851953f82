"""Run settings: the one typed place for every knob of a job and its default.

The CLI (`flashml pipeline run`, `train`, `sweep`), the Airflow DAG and the benchmarks build
their settings here: `BaleenSettings.from_values` takes option values by name, and the
option table `OPTIONS` gives each its command-line flag, type, help and (through the
dataclass) its default, so a default is written once. Units and definitions (segment size,
disk model, the artifact's cache size and write-rate target) live in `flashml.config`.

Every system's job options are such a table of `Option` records, declared in the system's
settings.py beside its dataclass: `add_options` builds the command-line options from a table,
`option_values` reads them back checked, and `dag_params` gives a table's DAG params.

Only the standard library and `flashml.config`/`flashml.errors` are imported: the DAG file
imports this module when Airflow parses it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from flashml.config import BINARY_UNITS, DEFAULTS
from flashml.errors import UserError

#: Engines of Baleen's episode job (flashml/systems/baleen/episodes/): `auto` picks by the
#: table's size and the Spark master (episodes/core.py `choose_engine`).
EPISODE_ENGINES = ("auto", "spark", "polars", "rust")


@dataclass(frozen=True)
class GbmParams:
    """LightGBM settings. The defaults are the Baleen artifact's (baleen-artifact-notes.md,
    "Training facts"); the main job trains faster with `JOB_GBM`."""

    num_leaves: int = 63
    learning_rate: float = 0.005
    max_bin: int = 255
    feature_fraction: float = 0.9
    bagging_fraction: float = 0.9
    bagging_freq: int = 5
    min_data_in_leaf: int = 50
    min_sum_hessian_in_leaf: float = 5.0
    num_boost_round: int = 2000
    early_stopping_rounds: int = 25
    num_threads: int = 2
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def lgb_params(self, objective: str) -> dict[str, Any]:
        d = asdict(self)
        for k in ("num_boost_round", "early_stopping_rounds", "extra"):
            d.pop(k)
        return {"objective": objective, "verbosity": -1, "deterministic": True,
                "force_row_wise": True, **d, **self.extra}

    def with_overrides(self, **kw: Any) -> GbmParams:
        known = {k: v for k, v in kw.items() if k in self.__dataclass_fields__}
        extra = {k: v for k, v in kw.items() if k not in self.__dataclass_fields__}
        return replace(self, **known, extra={**self.extra, **extra})


#: The main job's LightGBM: a 10x higher learning rate than the artifact's, with at most 500
#: rounds (early stopping usually ends sooner), so the embedded default runs in about a
#: minute; `--learning-rate 0.005 --max-rounds 2000` gives the artifact's.
JOB_GBM = GbmParams(learning_rate=0.05, num_boost_round=500)


@dataclass(frozen=True)
class LoopSettings:
    """Baleen's convergence loop (flashml/systems/baleen/converge.py)."""

    start_eviction_age_s: float = 7200.0
    damping: float = 0.5
    min_move_s: float = 300.0
    min_move_rel: float = 0.05
    write_rate_tolerance: float = 0.05
    max_iter: int = 20
    train_seconds: float = DEFAULTS.warmup_s
    #: Engine of the loop's episode builds (`EPISODE_ENGINES`; auto: by the table's size).
    engine: str = "auto"
    accesses_per_episode: int = 6
    #: Several K (labelled GETs per episode) to choose from on the training window, by the
    #: admission-only mean DT there (ties: `accesses_per_episode`, the artifact's 6); one or
    #: none: always `accesses_per_episode`. Mean, not peak: one 10-minute window sets a day's
    #: peak; on 15 seven-day traces choosing by the training day's peak DT lost 2.0 points of
    #: evaluation-day peak-DT reduction on average (up to 13.6) against the best K, by its
    #: mean 0.3 (up to 2.7) (bench/bench_quality.py `k_choice`, docs/measurements.md).
    accesses_per_episode_tried: tuple[int, ...] = (6, 1, 2, 4, 12)
    #: ML-When thresholds tried on the training window (1.0: prefetch never pays off).
    when_candidates: tuple[float, ...] = (0.5, 0.7, 0.9, 1.0)
    #: At most this many admission training rows (a sample of the keys beyond it:
    #: systems/baleen/dataset.py training_data). A 1 M-access region1-like trace has ~120 k, under
    #: it; a 10 M one ~1.2 M, where each training would take 4x longer for little gain.
    max_training_rows: int | None = 300_000


@dataclass(frozen=True)
class PeakSettings:
    """The learned policies' peak schedule (flashml/systems/baleen/peak.py)."""

    #: Busy hours of the day given the bonus (0: a flat threshold).
    hours: int = 9
    #: How much lower the admission threshold is in those hours (0.2 moved nearly every
    #: write into the busy hours and let the hours beside them set the peak; 0.1 beat it
    #: and the flat threshold on the evaluation days of region1-like 3- and 7-day traces).
    #: Whether the schedule is used is chosen on held-out data (systems/baleen/validation.py).
    bonus: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.hours <= 24:
            raise ValueError(f"peak hours must be in 0..24, got {self.hours}")
        if not 0.0 <= self.bonus <= 1.0:
            raise ValueError(f"peak bonus must be in [0, 1], got {self.bonus}")


@dataclass(frozen=True)
class BaleenSettings:
    """Everything `flashml pipeline run` (and its stages: `train`, `sweep`, the DAG) needs."""

    #: Raw trace or canonical .parquet; None: generate `preset` (the embedded default).
    trace: Path | None = None
    format: str | None = None
    #: Percent of the full node the trace samples; None: from the trace (canonical.py).
    sample_ratio: float | None = None
    preset: str = "region1-like"
    seed: int = 0
    accesses: int | None = None
    days: float | None = None
    cache_gb: float = DEFAULTS.cache_gb
    target_write_rate_mbps: float = DEFAULTS.target_write_rate_mbps
    #: Engine of the recorded episodes: auto (by size:
    #: flashml.systems.baleen.episodes.core.choose_engine).
    engine: str = "auto"
    master: str | None = None
    gbm: GbmParams = JOB_GBM
    loop: LoopSettings = field(default_factory=LoopSettings)
    peak: PeakSettings = field(default_factory=PeakSettings)
    #: Train ML-Range and ML-When too (False: admission only).
    with_prefetch: bool = True
    sweep_trials: int = 6
    sweep_storage: str | None = None
    sweep_study: str | None = None
    #: Write rates the sweep tries, as multiples of the target.
    sweep_rate_range: tuple[float, float] = (0.25, 4.0)
    #: Sweep trials run the convergence loop from scratch (and sweep its starting eviction
    #: age) instead of starting from the main loop's converged state.
    sweep_cold: bool = False
    #: Processes running the sweep's trials in parallel (1: the job's own process only).
    sweep_workers: int = 1
    #: A warm sweep runs the convergence loop only at the points whose screened TCO (the main
    #: loop's model tuned to the point) is within this fraction of the best screened one; the
    #: others are pruned (flashml/systems/baleen/sweep.py).
    sweep_screen_margin: float = 0.15
    #: The memory the job may use, GiB (0: the memory available when it starts): its
    #: preflight refuses a trace whose estimate exceeds it, and a trace whose learned
    #: policies' scores would not fit keeps each finished loop's on disk, mapped, and runs
    #: the sweep's loops one at a time (flashml/systems/baleen/memory.py).
    memory_gib: float = 0.0
    register: bool = True
    compile: bool = True
    #: Ingest leaves out the raw trace's bad lines (counted, the first logged) instead of
    #: stopping at the first (`flashml trace ingest --skip-bad-lines`).
    skip_bad_lines: bool = False
    #: Evaluate (and maybe promote) this model bundle instead of training one.
    candidate_bundle: Path | None = None
    #: Where `promote` exports a promoted bundle (None: no export).
    export_dir: Path | None = None

    @property
    def train_seconds(self) -> float:
        return self.loop.train_seconds

    def resolved_master(self) -> str | None:
        """The Spark master: `master`, else $FLASHML_SPARK_MASTER, else None (local[*])."""
        from flashml.config import spark_master

        return self.master or spark_master()

    def replace(self, **changes: Any) -> BaleenSettings:
        return replace(self, **changes)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> BaleenSettings:
        """Settings from option values by name (`OPTIONS`); a missing or None value keeps
        the default. UserError naming the option on a bad value."""
        v = {k: x for k, x in values.items() if k in OPTIONS and x is not None}
        for name, x in v.items():
            OPTIONS[name].check(x)
        d = cls()
        lo = v.get("min_factor", d.sweep_rate_range[0])
        hi = v.get("max_factor", d.sweep_rate_range[1])
        if not lo < hi:
            raise UserError(f"--min-factor ({lo:g}) must be below --max-factor ({hi:g})")
        ks = v.get("accesses_per_episode")
        loop = replace(
            d.loop, max_iter=int(v.get("max_iterations", d.loop.max_iter)),
            train_seconds=float(v.get("train_hours", d.loop.train_seconds / 3600.0)) * 3600.0,
            start_eviction_age_s=float(v.get("eviction_age", d.loop.start_eviction_age_s)),
            max_training_rows=(int(v["max_training_rows"]) or None)
            if "max_training_rows" in v else d.loop.max_training_rows)
        if ks:
            ks = tuple(int(k) for k in ks)
            loop = replace(loop, accesses_per_episode=ks[0], accesses_per_episode_tried=ks)
        try:
            peak = PeakSettings(hours=int(v.get("peak_hours", d.peak.hours)),
                                bonus=float(v.get("peak_bonus", d.peak.bonus)))
        except ValueError as e:
            raise UserError(f"--peak-hours/--peak-bonus: {e}") from None
        gbm = d.gbm.with_overrides(
            learning_rate=float(v.get("learning_rate", d.gbm.learning_rate)),
            num_boost_round=int(v.get("max_rounds", d.gbm.num_boost_round)))
        path = (lambda k: Path(v[k]) if v.get(k) else None)  # noqa: E731
        return cls(
            trace=path("trace"), format=v.get("format") or None,
            sample_ratio=v.get("sample_ratio"), preset=v.get("preset", d.preset),
            seed=int(v.get("seed", d.seed)), accesses=v.get("accesses") or None,
            days=v.get("days"), cache_gb=float(v.get("cache_gb", d.cache_gb)),
            target_write_rate_mbps=float(v.get("target_write_rate_mbps",
                                               d.target_write_rate_mbps)),
            engine=v.get("engine", d.engine), master=v.get("master") or None, gbm=gbm,
            loop=loop, peak=peak, with_prefetch=not v.get("admission_only", False),
            sweep_trials=int(v.get("sweep_trials", d.sweep_trials)),
            sweep_storage=v.get("storage") or None, sweep_study=v.get("study") or None,
            sweep_rate_range=(float(v.get("min_factor", d.sweep_rate_range[0])),
                              float(v.get("max_factor", d.sweep_rate_range[1]))),
            sweep_cold=bool(v.get("sweep_cold", d.sweep_cold)),
            sweep_workers=int(v.get("sweep_workers", d.sweep_workers)),
            sweep_screen_margin=float(v.get("sweep_screen_margin", d.sweep_screen_margin)),
            memory_gib=float(v.get("memory_gib", d.memory_gib)),
            register=not v.get("no_register", False), compile=not v.get("no_compile", False),
            skip_bad_lines=bool(v.get("skip_bad_lines", d.skip_bad_lines)),
            candidate_bundle=path("candidate_bundle"), export_dir=path("export_dir"))

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> BaleenSettings:
        return cls.from_values(vars(args))

    @classmethod
    def from_dag_params(cls, params: Mapping[str, Any]) -> BaleenSettings:
        """From the DAG's params (`dag_params()`): empty strings and 0 accesses mean unset."""
        return cls.from_values({k: (None if v == "" or (k == "accesses" and v == 0) else v)
                                for k, v in params.items()})

    def mlflow_params(self) -> dict[str, Any]:
        """What a run's MLflow parent run records about its settings."""
        return {"trace": str(self.trace) if self.trace else
                f"generated:{self.preset}:{self.seed}", "cache_gb": self.cache_gb,
                "target_write_rate_mbps": self.target_write_rate_mbps, "engine": self.engine,
                "learning_rate": self.gbm.learning_rate, "num_leaves": self.gbm.num_leaves,
                "max_rounds": self.gbm.num_boost_round, "train_hours": self.train_seconds / 3600,
                "sweep_trials": self.sweep_trials,
                "sweep_screen_margin": self.sweep_screen_margin, "peak_hours": self.peak.hours,
                "peak_bonus": self.peak.bonus, "skip_bad_lines": self.skip_bad_lines}


# --- the option table ------------------------------------------------------------------------


def finite_float(text: str) -> float:
    """argparse type: a finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def integer(text: str) -> int:
    """argparse type: an integer."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_ints(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated integers in 1..MAX_INTEGER, e.g. `1,6,12`."""
    out = tuple(integer(part.strip()) for part in text.split(","))
    if any(k < 1 for k in out):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    if any(k > MAX_INTEGER for k in out):
        raise argparse.ArgumentTypeError(f"expected integers of at most {MAX_INTEGER}, got "
                                         f"{text:.80}")
    return out


#: The largest integer setting (a count: LightGBM's rounds and Optuna's trials are C ints).
MAX_INTEGER = 2**31 - 1
#: The largest seed (NumPy's and the generators' seeds are 32-bit).
MAX_SEED = 2**32 - 1


def _num(x: float) -> str:
    """A bound for a message: 2147483647, 0.5, 1e-06."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


@dataclass(frozen=True)
class Number:
    """The one declaration of a numeric option's values: an integer (`kind` int) or a
    finite float within [low, high] (`low_open`/`high_open`: that bound itself excluded), in
    `unit`; an integer may also have to be a `multiple` of a step (a block of whole segments).
    Used as
    the argparse type (a bad value is a usage error naming the option, its bound and unit)
    and by `check` for values from elsewhere (DAG params, settings by name). An integer
    option without `high` is bounded by MAX_INTEGER."""

    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    unit: str = ""
    high_open: bool = False
    multiple: int | None = None

    def __post_init__(self) -> None:
        if self.multiple is not None and (self.kind is not int or self.multiple < 1):
            raise ValueError(f"a multiple applies to integers, >= 1: {self.multiple!r}")
        if self.kind is int and self.high is None:
            object.__setattr__(self, "high", MAX_INTEGER)
        if self.kind is int and self.low is None:
            object.__setattr__(self, "low", -MAX_INTEGER)

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return "integer" if self.kind is int else "number"

    def _u(self) -> str:
        return f" {self.unit}" if self.unit else ""

    def expected(self, noun: str = "a finite number") -> str:
        """What the option takes, e.g. `a finite number > 0 and at most 1000000000 GB`
        (`noun`: what a float is called)."""
        noun = "an integer" if self.kind is int else noun
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"below {_num(self.high)}" if self.high_open
                         else f"at most {_num(self.high)}")
        if self.multiple is not None:
            parts.append(f"a multiple of {self.multiple}")
        return f"{noun}{' ' + ' and '.join(parts) if parts else ''}{self._u()}"

    def problem(self, v: float) -> str | None:
        """None if `v` is in range, else what it must be (`>= 1 pages`, `at most 1024`)."""
        if isinstance(v, float) and not math.isfinite(v):
            return "a finite number"
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return self.low_text()
        if self.high is not None and (v >= self.high if self.high_open else v > self.high):
            return self.high_text()
        if self.multiple is not None and v % self.multiple:
            return f"a multiple of {self.multiple}{self._u()}"
        return None

    def low_text(self) -> str:
        """What a value below the range must be: `>= 1 candidates` (the generated Rust and C
        checks say the same)."""
        return f"{'>' if self.low_open else '>='} {_num(self.low or 0)}{self._u()}"

    def high_text(self) -> str:
        """What a value above the range must be: `at most 1024 candidates`, `< 1`."""
        return f"{'< ' if self.high_open else 'at most '}{_num(self.high or 0)}{self._u()}"

    def __call__(self, text: str) -> int | float:
        """argparse type: the value of `text`, or ArgumentTypeError saying what is expected."""
        t = text.strip()
        try:
            v: int | float = int(t) if self.kind is int else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.expected('a number')}, got "
                                             f"{text[:80]!r}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"expected {self.expected()}, got {text[:80]}")
        if (why := self.problem(v)) is not None:
            raise argparse.ArgumentTypeError(f"must be {why}, got {text[:80]}")
        return v

    def check(self, flag: str, value: Any) -> None:
        """UserError naming `flag` unless `value` (a Python number) is in range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{flag}: expected {self.expected()}, got {value!r:.80}")
        if self.kind is int and not isinstance(value, int):
            if not (math.isfinite(value) and float(value).is_integer()):
                raise UserError(f"{flag}: expected {self.expected()}, got {value!r}")
        try:
            v = float(value)
        except OverflowError:  # an integer past 1e308
            v = math.inf if value > 0 else -math.inf
            if self.kind is not int:
                raise UserError(f"{flag} must be a finite number, got {_short(value)}"
                                ) from None
        if (why := self.problem(value if self.kind is int else v)) is not None:
            raise UserError(f"{flag} must be {why}, got {_short(value)}")


def is_numeric_type(t: Any) -> bool:
    """An argparse type that reads numbers (the option is bounded and has a unit when it is a
    Number)."""
    return isinstance(t, Number) or t in (int, float, finite_float, integer, positive_ints)


@dataclass(frozen=True)
class Option:
    """One user-facing setting: its name (argparse dest and DAG param), flag, type, default
    and help. A numeric setting's type is a `Number` (its bounds and unit, checked on the
    command line and in `check` alike); `bool` makes a switch (off unless given, or with
    `negatable` on/off as `--flag`/`--no-flag`); `positive_ints` a comma-separated list; any
    other callable (`str`, `Path`) reads the text as it is. Options naming the same
    `exclusive` group exclude each other on the command line (one of them must be given
    when one is `required`)."""

    name: str
    flag: str
    type: Callable[[str], Any]
    default: Any
    #: An argparse help text (a literal % written %%); --help adds the default to it.
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    #: Offered as a DAG param (JSON type), None: command line only.
    dag_type: str | None = None
    #: A switch given as --flag or --no-flag (argparse.BooleanOptionalAction).
    negatable: bool = False
    #: The name of a group of options of which at most one may be given.
    exclusive: str | None = None
    #: The option must be given (its default is None).
    required: bool = False
    #: The option's other spellings: `-o` before the flag, `--output` after it.
    aliases: tuple[str, ...] = ()

    @property
    def option_strings(self) -> tuple[str, ...]:
        """Every spelling, as argparse lists them: short aliases, the flag, long aliases."""
        short = tuple(a for a in self.aliases if not a.startswith("--"))
        return (*short, self.flag, *(a for a in self.aliases if a.startswith("--")))

    def check(self, value: Any) -> None:
        """UserError naming the flag when `value` is out of its Number's range, not a choice,
        not a switch's true/false, or not integers in 1..MAX_INTEGER (positive_ints)."""
        if self.choices is not None and value not in self.choices:
            raise UserError(f"{self.flag} must be one of {', '.join(self.choices)}, got "
                            f"{value!r}")
        if self.type is bool:
            if not isinstance(value, bool):
                raise UserError(f"{self.flag} must be true or false, got {value!r:.80}")
            return
        if isinstance(value, (str, Path)):
            return
        if isinstance(self.type, Number):
            self.type.check(self.flag, value)
            return
        if self.type is positive_ints:
            for x in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(x, bool) or not isinstance(x, int):
                    raise UserError(f"{self.flag}: expected integers >= 1, got {value!r:.80}")
                if x > MAX_INTEGER:
                    raise UserError(f"{self.flag} must be at most {MAX_INTEGER}, got "
                                    f"{_short(x)}")
                if x < 1:
                    raise UserError(f"{self.flag} must be >= 1, got {_short(x)}")

    def default_text(self) -> str:
        """What --help says of the default: ` (default 6)`, ` (default on)` for a negatable
        switch; nothing for a plain switch (off unless given) or without a default."""
        shown = self._default_shown()
        return f" (default {shown})" if shown else ""

    def _default_shown(self) -> str:
        d = self.default
        if self.type is bool:
            return ("on" if d else "off") if self.negatable else ""
        if d is None or d == "":
            return ""
        if isinstance(d, (tuple, list)):  # a list option's (positive_ints): 1,6,12
            shown = ",".join(map(str, d)) or "none"
        elif isinstance(d, str) and not any(c.isalnum() for c in d):
            shown = repr(d)  # a separator: ','
        else:
            shown = f"{d:g}" if isinstance(d, float) else str(d)
        return shown.replace("%", "%%")

    def help_text(self) -> str:
        """The --help text: `help`, then a number's values and unit and the default, e.g.
        `input chunk size (an integer >= 1 and at most 1024 MiB; default 16)`."""
        if not isinstance(self.type, Number):
            return self.help + self.default_text()
        shown = self._default_shown()
        values = self.type.expected().replace("%", "%%")
        return f"{self.help} ({values}{'; default ' + shown if shown else ''})"


def option_table(*options: Option) -> dict[str, Option]:
    """An option table: each option by its name (ValueError on a name or a spelling given
    twice)."""
    out: dict[str, Option] = {}
    flags: set[str] = set()
    for o in options:
        if o.name in out or flags & set(o.option_strings):
            raise ValueError(f"option {o.name} ({o.flag}) is declared twice")
        out[o.name] = o
        flags.update(o.option_strings)
    return out


def size_text(n: int) -> str:
    """A byte count as a size option reads it: 4294967296 -> `4GiB`, 2097152 -> `2MiB` (the
    largest binary unit dividing it), else the count itself."""
    for unit, scale in BINARY_UNITS:
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _short(value: Any) -> str:
    """`value` for a message: a huge integer by its size (str() of one past 4300 digits is
    itself an error)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        digits = int(value.bit_length() * math.log10(2)) + 1  # or one more than it has
        digits -= 10 ** (digits - 1) > abs(value)
        return f"{'a negative' if value < 0 else 'an'} integer of {digits} digits"
    return repr(value)


_D = BaleenSettings()
_OPTIONS = (
    Option("cache_gb", "--cache-gb", Number(float, 1e-6, 1e9, unit="GB"), _D.cache_gb,
           "flash cache size, GB (2^30 bytes) at full-node scale", dag_type="number",
           metavar="GB"),
    Option("target_write_rate_mbps", "--target-write-rate", Number(float, 1e-6, 1e6,
                                                                   unit="MB/s"),
           _D.target_write_rate_mbps, "flash write-rate target, MB/s (10^6 B/s) at full-node "
           "scale (default: the artifact's 35.599 MiB/s, 7.5 DWPD)", dag_type="number",
           metavar="MBPS"),
    Option("train_hours", "--train-hours", Number(float, 1e-3, 1e5, unit="hours"),
           _D.loop.train_seconds / 3600.0,
           "train on the trace's first H hours and judge every policy on the rest (the "
           "first day, as Baleen)", dag_type="number", metavar="H"),
    Option("engine", "--engine", str, _D.engine, "episodes engine (the recorded episodes' "
           "and the convergence loop's): auto (Spark with --master; else rust, in key "
           "buckets, while 0.6 GB + accesses x 50 B fit in half the available memory, "
           "polars, chunked by key, while accesses x 500 B do, else spark), or one of them",
           choices=EPISODE_ENGINES,
           dag_type="string"),
    Option("master", "--master", str, None, "Spark master URL (default $FLASHML_SPARK_MASTER, "
           "else local[*])"),
    Option("learning_rate", "--learning-rate", Number(float, 1e-6, 1.0), _D.gbm.learning_rate,
           "LightGBM learning rate (the artifact's: 0.005 with up to 2000 rounds)",
           dag_type="number"),
    Option("max_rounds", "--max-rounds", Number(int, 1, unit="rounds"), _D.gbm.num_boost_round,
           "LightGBM boosting rounds (at most; early stopping may end sooner)",
           dag_type="integer"),
    Option("max_training_rows", "--max-training-rows", Number(int, 0, unit="rows"),
           _D.loop.max_training_rows,
           "at most this many admission training rows: beyond it, the rows of a sample of the "
           "blocks (0: every row)", dag_type="integer", metavar="N"),
    Option("max_iterations", "--max-iterations", Number(int, 1, 1000, unit="iterations"),
           _D.loop.max_iter, "convergence loop iteration cap", dag_type="integer"),
    Option("eviction_age", "--eviction-age", Number(float, 1e-3, 1e9, unit="s"),
           _D.loop.start_eviction_age_s,
           "starting assumed eviction age of the convergence loop, seconds", metavar="S"),
    Option("accesses_per_episode", "--accesses-per-episode", positive_ints, None,
           "OPT-labelled GETs per episode in the admission training rows (the paper's K); "
           "several: the value whose admission-only model has the lowest mean DT on the "
           "training day (ties: the first); one value fixes it (default: "
           "LoopSettings.accesses_per_episode_tried, the artifact's 6 wins ties)",
           metavar="N[,N...]"),
    Option("peak_hours", "--peak-hours", Number(int, 0, 24, unit="hours"), _D.peak.hours,
           "peak-aware admission: how many consecutive hours, the busiest block of the day "
           "(no-cache disk-head time of the training window), get a lower threshold (0: "
           "flat); the job ships the schedule only when it beats the flat threshold on "
           "held-out data of the training window",
           dag_type="integer"),
    Option("peak_bonus", "--peak-bonus", Number(float, 0.0, 1.0), _D.peak.bonus,
           "how much lower the threshold is in those hours", dag_type="number"),
    Option("sweep_trials", "--sweep-trials", Number(int, 0, 10_000, unit="trials"),
           _D.sweep_trials, "Optuna trials of the write-rate sweep (0: no sweep)",
           dag_type="integer"),
    Option("sweep_workers", "--sweep-workers", Number(int, 1, 256, unit="processes"),
           _D.sweep_workers,
           "processes running the sweep's trials in parallel on its Optuna storage (sqlite "
           "on one machine; an RDB URL such as Postgres lets workers elsewhere join)",
           dag_type="integer"),
    Option("memory_gib", "--memory", Number(float, 0.0, 1e6, unit="GiB"), _D.memory_gib,
           "the memory the job may use, GiB (0: what is available when it starts): a trace "
           "whose estimated peak exceeds it is refused before training; one whose learned "
           "scores would not fit keeps finished loops' scores on disk, mapped, and runs the "
           "sweep's loops one at a time", dag_type="number", metavar="GIB"),
    Option("sweep_screen_margin", "--sweep-screen-margin",
           Number(float, 0.0, 1e6, unit="(a fraction)"), _D.sweep_screen_margin,
           "a warm sweep screens every point with the main loop's model (its threshold tuned "
           "to the point, nothing trained) and runs the convergence loop only where the "
           "screened TCO is within this fraction above the best screened one; the others "
           "are pruned trials (a large value runs every point's loop)", dag_type="number",
           metavar="FRACTION"),
    Option("sweep_cold", "--sweep-cold", bool, _D.sweep_cold,
           "sweep trials run the convergence loop from scratch, sweeping its starting "
           "eviction age too (default: each starts from the main loop's converged eviction "
           "age, K and model, and retrains only when that model misses the trial's target)",
           dag_type="boolean"),
    Option("skip_bad_lines", "--skip-bad-lines", bool, _D.skip_bad_lines,
           "ingest: leave out the raw trace's lines that do not parse or fail a check "
           "(counted in the log and the summary) instead of stopping at the first with an "
           "error", dag_type="boolean"),
    # the generated default trace (pipeline run) and the sweep's range (sweep)
    Option("preset", "--preset", str, _D.preset, "synthetic preset of the generated default "
           "trace"),
    Option("seed", "--seed", Number(int, 0, MAX_SEED), _D.seed,
           "seed of the generated default trace"),
    Option("accesses", "--accesses", Number(int, 1, 10**9, unit="accesses"), None,
           "size of the generated default trace (default: the preset's)"),
    Option("days", "--days", Number(float, 1e-3, 3650.0, unit="days"), None,
           "days the generated default trace spans (default: the preset's)"),
    Option("min_factor", "--min-factor", Number(float, 1e-3, 1e3, unit="x the target"),
           _D.sweep_rate_range[0], "lowest write rate as a multiple of the target"),
    Option("max_factor", "--max-factor", Number(float, 1e-3, 1e3, unit="x the target"),
           _D.sweep_rate_range[1], "highest write rate as a multiple of the target (widened "
           "while the best point sits at the top)"),
    Option("no_register", "--no-register", bool, not _D.register, "skip the model registry"),
    Option("no_compile", "--no-compile", bool, not _D.compile, "skip compiling the policy .so"),
)
OPTIONS: dict[str, Option] = option_table(*_OPTIONS)
# Names `from_values` also reads, set by commands' own flags (no table entry needed there).
for _name in ("trace", "format", "sample_ratio", "admission_only", "storage", "study",
              "candidate_bundle", "export_dir"):
    OPTIONS.setdefault(_name, Option(_name, f"--{_name.replace('_', '-')}", str, None, ""))


def add_options(parser: Any, *names: str, options: Mapping[str, Option] | None = None
                ) -> None:
    """Add the options `names` of a table (`options`, default the run settings' `OPTIONS`;
    no names: every option of the table, in its order) to an argparse parser (or argument
    group), dest = the option's name, its default shown in the help. The options of one
    `exclusive` group become one mutually exclusive group (required when one of them is):
    add them in the same call."""
    chosen = OPTIONS if options is None else options
    picked = [chosen[name] for name in names or tuple(chosen)]
    groups: dict[str, Any] = {}
    for o in picked:
        target = parser
        required = o.required
        if o.exclusive is not None:
            if o.exclusive not in groups:
                groups[o.exclusive] = parser.add_mutually_exclusive_group(
                    required=any(x.required for x in picked if x.exclusive == o.exclusive))
            target, required = groups[o.exclusive], False
        if o.type is bool:  # a switch: off unless given (or --flag/--no-flag)
            action = argparse.BooleanOptionalAction if o.negatable else "store_true"
            target.add_argument(*o.option_strings, dest=o.name, action=action,
                                default=o.default, help=o.help_text())
            continue
        target.add_argument(*o.option_strings, dest=o.name, type=o.type, default=o.default,
                            choices=o.choices, metavar=o.metavar, required=required,
                            help=o.help_text())


def option_values(options: Mapping[str, Option], args: argparse.Namespace | Mapping[str, Any]
                  ) -> dict[str, Any]:
    """Each option of a table by name: its value in `args` (parsed arguments or values by
    name; a missing one takes the table's default), checked (`Option.check`: a UserError
    naming the flag); None stays None (not given)."""
    given = args if isinstance(args, Mapping) else vars(args)
    out: dict[str, Any] = {}
    for name, o in options.items():
        value = given.get(name, o.default)
        if value is not None:
            o.check(value)
        out[name] = value
    return out


def dag_params(options: Mapping[str, Option] | None = None) -> dict[str, dict[str, Any]]:
    """The options of a table (default the run settings' `OPTIONS`) offered as Airflow
    params: name -> {default, type, description, bound}."""
    out: dict[str, dict[str, Any]] = {}
    for o in (OPTIONS if options is None else options).values():
        if o.dag_type is None:
            continue
        spec: dict[str, Any] = {"default": o.default, "type": o.dag_type,
                                "description": o.help.replace("%%", "%")}
        if o.choices:
            spec["enum"] = list(o.choices)
        if isinstance(o.type, Number):
            if o.type.low is not None:
                spec["exclusiveMinimum" if o.type.low_open else "minimum"] = o.type.low
            if o.type.high is not None:
                spec["exclusiveMaximum" if o.type.high_open else "maximum"] = o.type.high
            if o.type.multiple is not None:
                spec["multipleOf"] = o.type.multiple
        out[o.name] = spec
    return out


def settings_fields() -> list[str]:
    return [f.name for f in fields(BaleenSettings)]
