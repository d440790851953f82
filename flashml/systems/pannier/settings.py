"""`flashml pannier run`'s settings: the paper's sizes, the policies judged and tuned, and
`PannierSettings` with its options (`add_cli`). Pannier's knobs (TIRE, S2LRU*, the sampler,
the RAM cache in front) are declared once in settings.toml beside this file (`KNOBS`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.errors import UserError
from flashml.settings import MAX_SEED, Number

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

        sizes = tuple(x.strip() for x in args.cache_size.split(",") if x.strip())
        if not sizes:
            raise UserError("--cache-size: give at least one size, e.g. 10% or 256MiB")
        for x in sizes:
            _cache_bytes(x, 1 << 40)  # validates
        presets = tuple(x.strip() for x in args.presets.split(",") if x.strip())
        bad = [p for p in presets if p not in BLOCK_PRESETS]
        if bad or not presets:
            raise UserError(f"--presets: unknown {bad[0] if bad else 'empty list'!r}; block "
                            f"presets: {', '.join(BLOCK_PRESETS)}")
        if args.requests is not None and args.requests < 1000:
            raise UserError(f"--requests must be >= 1000, got {args.requests}")
        from flashml.simulation import parse_capacity

        try:
            container = parse_capacity(args.container_size)[0]
        except ValueError as e:
            raise UserError(f"--container-size: {e}") from None
        if container < args.page_bytes:
            raise UserError(f"--container-size ({container} bytes) is smaller than a block "
                            f"(--page-bytes {args.page_bytes})")
        if container % args.page_bytes:
            raise UserError(f"--container-size ({container} bytes) is not a whole number of "
                            f"{args.page_bytes}-byte blocks")
        if args.trials < 0:
            raise UserError(f"--trials must be >= 0, got {args.trials}")
        return cls(trace=args.trace, format=args.format, sample_ratio=args.sample_ratio,
                   presets=presets, requests=args.requests, seed=args.seed,
                   cache_sizes=sizes, lifespan_epbpd=args.lifespan_epbpd,
                   page_bytes=args.page_bytes, container_bytes=container,
                   promotion_pct=args.promotion_pct, trials=args.trials,
                   open_in_cache=args.open_in_cache, ram_pct=args.ram_pct)


def add_cli(p: argparse.ArgumentParser) -> None:
    d = PannierSettings()
    p.epilog = ("examples:\n  flashml pannier run -o runs/pannier\n"
                "  flashml pannier run --trace prn0.csv --format msr --cache-size 10% "
                "--lifespan-epbpd 5 -o runs/prn0")
    p.add_argument("--cache-size", default=",".join(d.cache_sizes), metavar="SIZE|PCT%",
                   help="flash cache sizes, comma-separated: bytes (256MiB, 1GB) or a "
                   "percentage of each trace's working set (default: the paper's 2.5%%, 5%%, "
                   "10%%)")
    knobs.add_options(p, KNOBS, ("lifespan_epbpd",),
                      shown={"lifespan_epbpd": "half of Pannier's own rate without TIRE"})
    p.add_argument("--presets", default=",".join(d.presets),
                   help="without --trace: the block presets to judge on (flashml/systems/"
                   "pannier/blockgen.py)")
    p.add_argument("--requests", type=Number(int, 1000, 10**9, unit="requests"),
                   default=None,
                   help="without --trace: requests per preset trace (default: the preset's)")
    p.add_argument("--seed", type=Number(int, 0, MAX_SEED),
                   default=d.seed, help="seed of the preset traces")
    p.add_argument("--page-bytes", type=Number(int, 512, 1 << 30, unit="bytes"),
                   default=d.page_bytes,
                   help="block size: the unit of insert, read and invalidate")
    p.add_argument("--container-size", default="2MiB",
                   help="container = flash erase block (default 2MiB)")
    knobs.add_options(p, KNOBS, ("promotion_pct",))
    p.add_argument("--open-in-cache", action="store_true",
                   help="charge the RAM open containers to the cache size (sealed + open <= "
                   "the cache's containers: Pannier's 4 and RIPQ+'s 8 get no more cache than "
                   "LRU+'s 1); default: RAM beside the flash, as in the paper's prototype")
    knobs.add_options(p, KNOBS, ("ram_pct",))
    p.add_argument("--trials", type=Number(int, 0, 10_000, unit="trials"),
                   default=d.trials,
                   help="Optuna trials per trace tuning Pannier's knobs under the lifespan "
                   "target (0: no tuning; the paper's defaults ship)")


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
