"""`flashml mlcache run`'s settings: the policies, the defaults and `MlcacheSettings`
with its option table (`OPTIONS`; the command's options, with the knobs': `add_cli`). The
settings the simulator and the C runtime read too (the cache's pages, its interval, the page
size, the flash engine's interval) are declared once in settings.toml beside this file
(`KNOBS`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.config import DEFAULTS
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
from flashml.settings import OPTIONS as RUN_OPTIONS

#: MLCache's settings as settings.toml declares them (the simulator's and the runtime's too).
KNOBS = knobs.load("mlcache")

#: The paper's cache sizes (pages) for 2, 4 and 8 streams (Fig. 8a, §4.1).
PAPER_CAPACITY = {2: 220, 4: 260, 8: 680}

#: Seeds of the held-out mixes start here (training mixes: 0, 1, ...).
TEST_SEED = 10_000

#: --label -> the label's interval offset (systems/mlcache/model.py interval_dataset's `lead`).
LEADS = {"same": 0, "next": 1}

POLICIES = ("shared", "even", "static_optimal", "discrete_optimal", "previous_optimal",
            "mlcache")

#: What the job ships (--policy): the rule computed in C, or the trained network.
SHIPPED = ("previous_optimal", "network")

#: The rules a user could run without MLCache; the headline's rival is the better of them.
SIMPLE_RULES = ("shared", "even")

#: The default interval: this many requests the cache sees per page of the cache.
INTERVAL_PER_PAGE = 2

#: The paper's page size (other-seeds-notes §2.1: 8192 B pages): the generated mixes' page
#: (settings.toml's page_bytes).
PAGE_BYTES: int = KNOBS["page_bytes"].default

#: The generated mixes' duration (flashml/systems/mlcache/multistream.py generate_mix's
#: default), for --interval-s without a trace.
MIX_SECONDS = 3600.0


@dataclass(frozen=True)
class MlcacheSettings:
    """Everything `flashml mlcache run` needs."""

    trace: Path | None = None
    format: str | None = None
    sample_ratio: float | None = None
    stream_column: str = "namespace"
    page_bytes: int | None = None
    #: Streams per generated mix; None: --bundle's, else 4 (a trace brings its own).
    streams: int | None = None
    #: Pages; None: --cache-size, the bundle's, or the paper's size for the stream count
    #: (else 65 per stream).
    capacity: int | None = None
    #: Bytes (--cache-size): pages of the page size, or flash segments.
    cache_size: int | None = None
    #: Requests the cache sees per interval; None: INTERVAL_PER_PAGE x the cache's pages. The
    #: paper does not give its interval. Too short, and a partition that grows cannot fill
    #: before the next split: on a 4-host MSR-like trace at 16,384 pages, intervals of 1,000
    #: writes put previous_optimal 13% below one shared LRU, of 32,768 6% above it. Too long,
    #: and phases change within one (generated mixes: 95% of the oracle's gain at 1,000
    #: requests, 80-86% at 5,000); twice the pages (440-1,360 there) does as well as 1,000.
    interval: int | None = None
    #: Seconds of trace per interval (--interval-s), turned into requests at the judged
    #: trace's mean rate; None: `interval`.
    interval_s: float | None = None
    #: What ships: "previous_optimal" (no training) or "network" (module doc).
    policy: str = "previous_optimal"
    #: A compiled partition bundle to apply instead of training and compiling one.
    bundle: Path | None = None
    requests: int = 200_000
    #: 24 mixes gave the network 81% of the oracle's gain (4 streams), 96 gave 90%.
    train_mixes: int = 96
    #: Which interval's best split labels interval i's features: "same" (i: the network
    #: learns the monitor -> best split map, applied to the next interval) or "next" (i+1:
    #: what it will be judged on, but a noisier target). The paper leaves it open.
    label: str = "same"
    #: Held-out generated mixes judged; None: 6 without --trace, none with it.
    test_mixes: int | None = None
    permutations: int = 4
    #: Three layers of 256 ReLUs (the paper's text: two of 256; its figure: one). On 10
    #: held-out mixes (96 training mixes): one layer of 64 took 79% of the oracle's gain at 4
    #: streams, 256x256 88%, 512x512 88%, 128x128x128 90%, 256x256x256 91% (97% at 2
    #: streams, 92% at 8).
    hidden: tuple[tuple[int, ...], ...] = ((256, 256, 256),)
    #: Held-out-mix folds: they choose the shares' sharpness (and the hidden sizes if
    #: several are given); each costs a network.
    folds: int = 2
    max_iter: int = 300
    writes_only: bool = True
    seed: int = 0
    #: Flash mode (with a trace): the flash stage judges the split flash cache (module doc).
    flash: bool = False
    #: The same write rate of the flash stage: this fraction of shared's admit-all rate.
    flash_write_fraction: float = 0.5
    #: Flash cache size at full-node scale, GB (None: the simulator's default) unless
    #: --capacity or --cache-size gives it at trace scale.
    cache_gb: float | None = None
    #: Seconds at the start of the trace excluded from the DT statistics (None: the
    #: simulator's default, a day).
    warmup_s: float | None = None

    def replace(self, **kw: Any) -> MlcacheSettings:
        return replace(self, **kw)

    @property
    def held_out(self) -> int:
        """Generated held-out mixes to judge (module doc)."""
        if self.test_mixes is not None:
            return self.test_mixes
        return 0 if self.trace is not None else 6

    @property
    def trains(self) -> bool:
        """Whether this run trains a network (--policy network, no --bundle)."""
        return self.policy == "network" and self.bundle is None

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> MlcacheSettings:
        from flashml.features.partition import contract

        v = option_values(OPTIONS, args)
        top = contract().max_streams
        if v["streams"] is not None and not 2 <= v["streams"] <= top:
            raise UserError(f"--streams must be in 2..{top} (the partition contract's slots), "
                            f"got {v['streams']}")
        if v["capacity"] is not None and v["cache_size"] is not None:
            raise UserError("--capacity (pages) and --cache-size (bytes) both size the cache: "
                            "give one")
        if v["interval"] is not None and v["interval_s"] is not None:
            raise UserError("--interval (requests) and --interval-s (seconds) both set the "
                            "interval: give one")
        cache_size = None
        if v["cache_size"] is not None:
            from flashml.simulation import parse_capacity

            try:
                cache_size, kind = parse_capacity(v["cache_size"])
            except ValueError as e:
                raise UserError(f"--cache-size: {e}") from None
            if kind != "bytes":
                raise UserError(f"--cache-size: bytes with a unit (64MiB, 1GB, 8388608), got "
                                f"{v['cache_size']!r}; a count of pages is --capacity")
        interval = v["interval"]
        if interval is not None and v["requests"] < 2 * interval:
            raise UserError(f"--requests ({v['requests']}) must hold at least two intervals "
                            f"of --interval ({interval})")
        try:
            hidden = tuple(tuple(int(n) for n in h.split("x")) for h in v["hidden"].split(",")
                           if h.strip())
        except ValueError:
            raise UserError(f"--hidden: expected sizes like 64 or 64,256 or 128x64 (layers), "
                            f"got {v['hidden']!r}") from None
        if not hidden or any(n < 1 for h in hidden for n in h):
            raise UserError(f"--hidden: give at least one size >= 1, got {v['hidden']!r}")
        if v["flash"] and args.trace is None:
            raise UserError("--flash judges a trace's flash cache: give it with --trace FILE "
                            "(and --stream-column)")
        if not v["flash"]:
            for flag, name in (("--cache-gb", "cache_gb"), ("--warmup-s", "warmup_s")):
                if v[name] is not None:
                    raise UserError(f"{flag} is a flash-mode option: add --flash")
        if v["flash"] and v["cache_gb"] is not None and (
                v["capacity"] is not None or v["cache_size"] is not None):
            raise UserError("--cache-gb and --capacity/--cache-size all size the flash cache: "
                            "give one")
        if v["bundle"] is not None and v["policy"] is not None:
            raise UserError("--bundle applies a compiled policy and --policy chooses one to "
                            "build: give one")
        if v["bundle"] is not None and not Path(v["bundle"]).is_dir():
            raise UserError(f"--bundle {v['bundle']}: not a folder (a compiled bundle: "
                            "manifest.json and policy.so)")
        return cls(trace=args.trace, format=args.format, sample_ratio=args.sample_ratio,
                   stream_column=v["stream_column"], page_bytes=v["page_bytes"],
                   streams=v["streams"], capacity=v["capacity"], cache_size=cache_size,
                   interval=interval, interval_s=v["interval_s"],
                   policy=v["policy"] or cls.policy,
                   bundle=Path(v["bundle"]) if v["bundle"] is not None else None,
                   requests=v["requests"], train_mixes=v["train_mixes"],
                   test_mixes=v["test_mixes"], permutations=v["permutations"], hidden=hidden,
                   label=v["label"], folds=v["folds"], max_iter=v["max_iter"],
                   writes_only=not v["reads_and_writes"], seed=v["seed"],
                   flash=v["flash"], flash_write_fraction=v["flash_write_fraction"],
                   cache_gb=v["cache_gb"], warmup_s=v["warmup_s"])


_D = MlcacheSettings()

#: `flashml mlcache run`'s options (besides --trace, --format, --sample-ratio and --out),
#: each default the dataclass's (--policy's None: not given, so previous_optimal).
OPTIONS = option_table(
    Option("policy", "--policy", str, None, "what to ship: previous_optimal (default: each "
           "interval divided by the last one's best split, computed in the .so; no training) "
           "or network (the paper's network, trained on generated mixes; it did not beat "
           "previous_optimal on held-out mixes)", choices=SHIPPED),
    Option("bundle", "--bundle", Path, _D.bundle, "apply this compiled partition bundle (an "
           "earlier run's compiled/) instead of building one; its streams, cache size and "
           "monitor mode must match this run's", metavar="DIR"),
    Option("streams", "--streams", Number(int, 2, 64, unit="streams"), _D.streams,
           "streams per generated mix (default: --bundle's, else 4; with --trace: the trace's "
           "own count)"),
    Option("stream_column", "--stream-column", str, _D.stream_column,
           "with --trace: the canonical column whose values are the streams"),
    KNOBS["page_bytes"].option(
        default=_D.page_bytes, help=f"{KNOBS['page_bytes'].help} (unset: one page per access "
        f"of a trace, {KNOBS['page_bytes'].default} for generated mixes)"),
    KNOBS["capacity"].option(
        default=_D.capacity, metavar="PAGES", help=f"{KNOBS['capacity'].help} (unset: "
        f"--bundle's, else the paper's {'/'.join(map(str, PAPER_CAPACITY.values()))} for "
        f"{'/'.join(map(str, PAPER_CAPACITY))} streams, else 65 per stream; or --cache-size)"),
    Option("cache_size", "--cache-size", str, _D.cache_size, "cache size in bytes with a unit "
           "(128MiB, 1GB, 8388608): pages of --page-bytes (else the trace's block size; "
           f"{size_text(KNOBS['page_bytes'].default)} for generated mixes), or with --flash "
           "segments at trace scale. Or --capacity", metavar="SIZE"),
    KNOBS["interval"].option(
        default=_D.interval, help=f"{KNOBS['interval'].help} (unset: {INTERVAL_PER_PAGE} x "
        "the cache's pages, at most half the judged trace; or --interval-s)"),
    Option("interval_s", "--interval-s", Number(float, 0.0, 1e9, low_open=True, unit="s"),
           _D.interval_s, "seconds of trace per interval: S times the judged trace's mean "
           "rate of requests the cache sees, rounded (the runtime counts requests). Or "
           "--interval", metavar="S"),
    Option("requests", "--requests", Number(int, 1000, 10**9, unit="requests"), _D.requests,
           "requests per generated mix"),
    Option("train_mixes", "--train-mixes", Number(int, 2, 100_000, unit="mixes"),
           _D.train_mixes, "--policy network: generated mixes to train on (seeds 0..N-1)"),
    Option("test_mixes", "--test-mixes", Number(int, 0, 100_000, unit="mixes"), _D.test_mixes,
           f"generated held-out mixes to judge (seeds {TEST_SEED}..; default 6, or none with "
           "--trace: then they are reported apart from the trace)"),
    Option("label", "--label", str, _D.label, "--policy network: interval whose best split "
           "labels an interval's features: the same one (the network learns the monitor -> "
           "best split map) or the next one", choices=tuple(LEADS)),
    Option("permutations", "--permutations", Number(int, 1, 1000, unit="shuffles"),
           _D.permutations, "--policy network: stream-slot shuffles of every training row"),
    Option("hidden", "--hidden", str, ",".join("x".join(map(str, h)) for h in _D.hidden),
           "--policy network: hidden layer sizes to choose among by cross-validation: 64 (one "
           "layer), 64,256 (two candidates), 256x256 (two layers)"),
    Option("folds", "--folds", Number(int, 2, 1000, unit="folds"), _D.folds,
           "--policy network: cross-validation folds over the training mixes"),
    Option("max_iter", "--max-iter", Number(int, 1, 1_000_000, unit="epochs"), _D.max_iter,
           "--policy network: training epochs, at most"),
    Option("reads_and_writes", "--reads-and-writes", bool, not _D.writes_only,
           "cache and monitor reads too (default: writes only, the paper's Alg. 1)"),
    Option("seed", "--seed", Number(int, 0, MAX_SEED), _D.seed,
           "seed of the slot shuffles and the network's initialisation"),
    Option("flash", "--flash", bool, _D.flash, "with --trace: also judge the policies on "
           "Baleen's flash cache split per stream (peak DT and write rate; the network's pages "
           "= the flash cache's segments)"),
    Option("flash_write_fraction", "--flash-write-fraction",
           Number(float, 0.0, 1.0, low_open=True), _D.flash_write_fraction,
           "--flash: every policy is also judged at the same write rate, F (0 < F <= 1) of "
           "shared's admit-all rate (CoinFlip admission)", metavar="F"),
    Option("cache_gb", "--cache-gb", RUN_OPTIONS["cache_gb"].type, _D.cache_gb,
           f"--flash: flash cache size at full-node scale, GB of 2^30 bytes, scaled by the "
           f"trace's sample ratio (default {DEFAULTS.cache_gb:g}; or --capacity segments or "
           "--cache-size bytes at trace scale)", metavar="GB"),
    Option("warmup_s", "--warmup-s", Number(float, 0.0, 1e9, unit="s"), _D.warmup_s,
           f"--flash: seconds at the start excluded from the DT statistics (default "
           f"{DEFAULTS.warmup_s:g})", metavar="S"),
)


def add_cli(p: argparse.ArgumentParser) -> None:
    p.epilog = ("examples:\n  flashml mlcache run --streams 4 --out runs/mlc4\n"
                "  flashml mlcache run --trace msr.csv --format msr --stream-column "
                "src_hostname --page-bytes 8192 --cache-size 128MiB --interval-s 60\n"
                "  flashml mlcache run --trace msr.csv --format msr --stream-column "
                "src_hostname --page-bytes 8192 --bundle runs/mlc4/compiled\n"
                "  flashml mlcache run --trace region1.trace --stream-column namespace "
                "--flash --capacity 1000")
    add_options(p, options=OPTIONS)
