"""`flashml pannier run`'s settings: the paper's sizes, the policies judged and tuned, and
`PannierSettings` with its option table (`OPTIONS`; the command's options, with the knobs':
`add_cli`). Pannier's knobs (TIRE, S2LRU*, the sampler,
the RAM cache in front) are declared once in settings.toml beside this file (`KNOBS`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.errors import UserError
from flashml.settings import (
    MAX_SEED,
    Number,
    Option,
    add_options,
    option_table,
    option_values,
    size_text,
)

#: Pannier's knobs as settings.toml declares them (the simulator's and the runtime's too).
KNOBS = knobs.load("pannier")
_D = KNOBS.defaults()

#: The paper's cache sizes in % of the working set (Fig. 6).
PAPER_SIZES = ("2.5%", "5%", "10%")

TIRE_OF = ("lru_plus", "s2lru_plus", "ripq_plus", "pannier")

#: The simple rivals the headline compares Pannier with: the strongest of them on the judged
#: traces (by mean read-hit ratio) is the one the summary and the README name.
RIVALS = ("lru_plus", "mq", "ripq_plus")

#: What runs on the held-out half (the tuning saw only the first half): the defaults and the
#: rivals, without and with TIRE at the run's target, beside `pannier_tuned`.
HOLDOUT = ("lru_plus", "mq", "ripq_plus", "pannier", "ripq_plus_tire", "pannier_tire")

#: What runs again without the RAM cache in front (FUE with and without it).
NO_RAM = ("lru_plus", "ripq_plus", "pannier")

#: The share of a trace the tuning sees (its first requests); the rest is the held-out half.
TUNING_FRACTION = 0.5


@dataclass(frozen=True)
class PannierSettings:
    """Everything `flashml pannier run` needs."""

    trace: Path | None = None
    format: str | None = None
    sample_ratio: float | None = None
    presets: tuple[str, ...] = ("prn0-like", "src11-like", "map-like", "web-like")
    requests: int | None = None
    seed: int = 0
    cache_sizes: tuple[str, ...] = PAPER_SIZES
    #: TIRE's target, erasures per erase block per day; None: half of Pannier's own rate
    lifespan_epbpd: float | None = _D["lifespan_epbpd"]
    page_bytes: int = 4096
    container_bytes: int = 2 * 1024 * 1024
    tire_slack: float = _D["tire_slack"]
    quantum_s: float = _D["quantum_s"]
    promotion_pct: float = _D["promotion_pct"]
    trials: int = 16
    #: charge the RAM open containers to the cache size (default: the paper's model)
    open_in_cache: bool = False
    #: the storage system's RAM cache (LRU) in front of the flash cache, in % of the flash
    #: cache's size (settings.toml: the paper's simulator, §4.3, puts 5% there; 0: none)
    ram_pct: float = _D["ram_pct"]

    def replace(self, **kw: Any) -> PannierSettings:
        return replace(self, **kw)

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> PannierSettings:
        from flashml.systems.pannier.blockgen import BLOCK_PRESETS

        v = option_values(OPTIONS, args)
        sizes = tuple(x.strip() for x in v["cache_size"].split(",") if x.strip())
        if not sizes:
            raise UserError("--cache-size: give at least one size, e.g. 10% or 256MiB")
        for x in sizes:
            _cache_bytes(x, 1 << 40)  # validates
        presets = tuple(x.strip() for x in v["presets"].split(",") if x.strip())
        bad = [p for p in presets if p not in BLOCK_PRESETS]
        if bad or not presets:
            raise UserError(f"--presets: unknown {bad[0] if bad else 'empty list'!r}; block "
                            f"presets: {', '.join(BLOCK_PRESETS)}")
        from flashml.simulation import parse_capacity

        try:
            container = parse_capacity(v["container_size"])[0]
        except ValueError as e:
            raise UserError(f"--container-size: {e}") from None
        page = v["page_bytes"]
        if container < page:
            raise UserError(f"--container-size ({container} bytes) is smaller than a block "
                            f"(--page-bytes {page})")
        if container % page:
            raise UserError(f"--container-size ({container} bytes) is not a whole number of "
                            f"{page}-byte blocks")
        return cls(trace=args.trace, format=args.format, sample_ratio=args.sample_ratio,
                   presets=presets, requests=v["requests"], seed=v["seed"],
                   cache_sizes=sizes, lifespan_epbpd=args.lifespan_epbpd,
                   page_bytes=page, container_bytes=container,
                   promotion_pct=args.promotion_pct, trials=v["trials"],
                   open_in_cache=v["open_in_cache"], ram_pct=args.ram_pct)


_D = PannierSettings()

#: `flashml pannier run`'s options (besides --trace, --format, --sample-ratio and --out;
#: Pannier's knobs are settings.toml's, `KNOBS`), each default the dataclass's.
OPTIONS = option_table(
    Option("cache_size", "--cache-size", str, ",".join(_D.cache_sizes), "flash cache sizes, "
           "comma-separated: bytes (256MiB, 1GB) or percentages of each trace's working set, "
           "by default the paper's", metavar="SIZE|PCT%"),
    Option("presets", "--presets", str, ",".join(_D.presets), "without --trace: the block "
           "presets to judge on (flashml/systems/pannier/blockgen.py)"),
    Option("requests", "--requests", Number(int, 1000, 10**9, unit="requests"), _D.requests,
           "without --trace: requests per preset trace (default: the preset's)"),
    Option("seed", "--seed", Number(int, 0, MAX_SEED), _D.seed, "seed of the preset traces"),
    Option("page_bytes", "--page-bytes", Number(int, 512, 1 << 30, unit="bytes"),
           _D.page_bytes, "block size: the unit of insert, read and invalidate"),
    Option("container_size", "--container-size", str, size_text(_D.container_bytes),
           "container = flash erase block"),
    Option("open_in_cache", "--open-in-cache", bool, _D.open_in_cache, "charge the RAM open "
           "containers to the cache size (sealed + open <= the cache's containers: Pannier's "
           "4 and RIPQ+'s 8 get no more cache than LRU+'s 1); default: RAM beside the flash, "
           "as in the paper's prototype"),
    Option("trials", "--trials", Number(int, 0, 10_000, unit="trials"), _D.trials,
           "Optuna trials per trace tuning Pannier's knobs under the lifespan target (0: no "
           "tuning; the paper's defaults ship)"),
)


def add_cli(p: argparse.ArgumentParser) -> None:
    p.epilog = ("examples:\n  flashml pannier run -o runs/pannier\n"
                "  flashml pannier run --trace prn0.csv --format msr --cache-size 10% "
                "--lifespan-epbpd 5 -o runs/prn0")
    add_options(p, "cache_size", options=OPTIONS)
    knobs.add_options(p, KNOBS, ("lifespan_epbpd",),
                      shown={"lifespan_epbpd": "half of Pannier's own rate without TIRE"})
    add_options(p, "presets", "requests", "seed", "page_bytes", "container_size",
                options=OPTIONS)
    knobs.add_options(p, KNOBS, ("promotion_pct",))
    add_options(p, "open_in_cache", options=OPTIONS)
    knobs.add_options(p, KNOBS, ("ram_pct",))
    add_options(p, "trials", options=OPTIONS)


def _cache_bytes(text: str, working_set: int) -> int:
    """'10%' of the working set, or a size ('256MiB'), in bytes."""
    if text.endswith("%"):
        try:
            v = float(text[:-1])
        except ValueError:
            raise UserError(f"--cache-size: cannot read {text!r}") from None
        if not 0.0 < v <= 100.0:
            raise UserError(f"--cache-size: a percentage must be in (0, 100], got {text!r}")
        return int(working_set * v / 100.0)
    from flashml.simulation import parse_capacity

    try:
        n, kind = parse_capacity(text)
    except ValueError as e:
        raise UserError(f"--cache-size: {e}") from None
    if kind != "bytes":
        raise UserError(f"--cache-size: {text!r} is an object count; give bytes or a %")
    return n
