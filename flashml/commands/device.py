"""`flashml device probe` and `flashml device check`: the simulator's disk model measured on a
real device, and its disk-head time (DT) checked against the device's busy time.

    flashml device probe /dev/loop7 --seconds 8 --out disk.json
    flashml device check --trace workload.trace --admission admitall --admission rejectx \\
        --bundle bundle/ -o device.json

`probe` times O_DIRECT reads of a block device (or a file on a file system that takes
O_DIRECT) at 4 KiB..2 MiB and fits `t_seek_s + bytes / bandwidth_bytes_per_s`; --out gets
those two SimConfig keys. `check` lays the trace's blocks out on a loop device throttled by
an io cgroup, probes it (or takes --disk), plays each window of the trace through
`flashrt mount` once per policy, and writes the device's measured busy time per window beside
the simulator's DT for the trace the mount recorded (flashml.device.check). It needs root,
loop devices, an io (or blkio) cgroup controller, /dev/fuse and a flashrt built with libfuse3;
without one it says which and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import tempfile
from pathlib import Path

from flashml.commands.argtypes import Number
from flashml.errors import UserError

#: Probe time: long enough for a few reads at each of the six sizes, short of a hang.
PROBE_SECONDS = Number(float, 0.05, 3600.0, unit="s")
SEED = Number(int, 0, 2**32 - 1)
FLASH_MIB = Number(int, 1, 1 << 20, unit="MiB")
DEVICE_MIB = Number(int, 64, 1 << 22, unit="MiB")
WINDOWS = Number(int, 1, 1000, unit="windows")
READ_IOPS = Number(int, 1, 10_000_000, unit="IOs/s")
READ_MIBPS = Number(float, 0.01, 100_000.0, unit="MiB/s")
ADMISSIONS = ("admitall", "rejectx", "rejectx_block", "coinflip")


def _probe_input(device: Path) -> None:
    """A block device or a regular file, named in the error when it is neither."""
    try:
        mode = os.stat(device).st_mode
    except FileNotFoundError:
        raise UserError(f"{device}: no such block device or file (DEVICE)") from None
    if not (stat.S_ISBLK(mode) or stat.S_ISREG(mode)):
        raise UserError(f"{device}: not a block device or a regular file (DEVICE)")


def cmd_probe(args: argparse.Namespace) -> int:
    from flashml.device.probe import probe, write_disk_config
    from flashml.files import check_outputs

    _probe_input(args.device)
    check_outputs({"--out": args.out}, {"DEVICE": args.device})
    r = probe(args.device, args.seconds, seed=args.seed)
    if args.out is not None:
        write_disk_config(r, args.out)
    print(json.dumps(r))
    return 0


def _policies(args: argparse.Namespace) -> dict[str, list[str]]:
    """Name -> `flashrt mount` policy arguments: each --admission, then each --bundle (named
    by its folder; the default is admitall and rejectx)."""
    out: dict[str, list[str]] = {}
    for name in args.admission or ([] if args.bundle else ["admitall", "rejectx"]):
        out[name] = ["--admission", name]
    for b in args.bundle or []:
        if not (b / "manifest.json").is_file():
            raise UserError(f"{b}: option --bundle: no manifest.json (a policy bundle folder "
                            "from `flashml compile`)")
        name = b.resolve().name or "bundle"
        while name in out:
            name += "_"
        out[name] = ["--bundle", str(b.resolve())]
    return out


def cmd_check(args: argparse.Namespace) -> int:
    from flashml.device.check import device_check
    from flashml.device.host import fuse_unavailable
    from flashml.device.throttled import unavailable
    from flashml.files import atomic_path, check_outputs
    from flashml.systems.kml.experiment import flashrt_binary

    try:
        mode = os.stat(args.trace).st_mode
    except FileNotFoundError:
        raise UserError(f"{args.trace}: option --trace: no such file") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{args.trace}: option --trace: not a regular file (a Tectonic trace)")
    inputs: dict[str, Path | None] = {"--trace": args.trace, "--disk": args.disk}
    inputs.update({f"--bundle {b}": b for b in args.bundle or []})
    check_outputs({"-o": args.out}, inputs)
    policies = _policies(args)
    disk = None
    if args.disk is not None:
        try:
            disk = json.loads(args.disk.read_text())
            disk = {k: float(disk[k]) for k in ("t_seek_s", "bandwidth_bytes_per_s")}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{args.disk}: option --disk: not a disk config with t_seek_s and "
                            f"bandwidth_bytes_per_s (`flashml device probe --out`): {e}") from None
        if not all(v > 0 and v < float("inf") for v in disk.values()):
            raise UserError(f"{args.disk}: option --disk: t_seek_s and bandwidth_bytes_per_s "
                            "must be finite and > 0")
    why = unavailable() or fuse_unavailable()
    if why:
        raise UserError(f"device check cannot run here: {why}")
    flashrt = flashrt_binary()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flashml-device-check-", dir=args.workdir) as tmp:
        r = device_check(Path(tmp), flashrt, args.trace, policies,
                         flash_bytes=args.flash_mib << 20, windows=args.windows,
                         device_bytes=args.device_mib << 20, read_iops=args.read_iops,
                         read_bps=int(args.read_mibps * (1 << 20)),
                         probe_s=args.probe_seconds, disk=disk)
    r["load_avg"] = os.getloadavg()
    with atomic_path(args.out) as t:
        Path(t).write_text(json.dumps(r, indent=1) + "\n")
    for name, p in r["policies"].items():
        err = p["peak_rel_error"]
        print(f"{name:16s} peak busy {p['peak_measured_s']:.3f} s, simulated DT "
              f"{p['peak_simulated_s']:.3f} s ({'n/a' if err is None else f'{err:+.1%}'}), "
              f"spearman {p['spearman']}")
    print(f"ranking by peak: measured {r['ranking_measured']}, simulated "
          f"{r['ranking_simulated']} ({'equal' if r['ranking_equal'] else 'NOT equal'})")
    print(f"wrote {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("device", help="the disk model measured on a real (throttled) device",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    dsub = p.add_subparsers(dest="device_command", metavar="COMMAND", required=True)

    pr = dsub.add_parser("probe", help="measure a device's seek time and bandwidth "
                         "(t_seek_s, bandwidth_bytes_per_s)",
                         description="Time O_DIRECT reads of DEVICE at 4 KiB..2 MiB and fit "
                         "the simulator's t_seek_s + bytes / bandwidth_bytes_per_s. Prints the "
                         "fit, the mean read time per size and the fit's error as JSON.",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  flashml device probe /dev/loop7 -o disk.json\n"
                         "  flashml device probe /dev/nvme0n1 --seconds 20 --seed 3")
    pr.add_argument("device", type=Path, metavar="DEVICE",
                    help="block device, or a file on a file system that takes O_DIRECT; only "
                    "read")
    pr.add_argument("-o", "--out", type=Path, default=None, metavar="FILE",
                    help="write {t_seek_s, bandwidth_bytes_per_s} here (a SimConfig override; "
                    "`device check --disk` and `sim run` read it)")
    pr.add_argument("--seconds", type=PROBE_SECONDS, default=8.0, metavar="S",
                    help=f"probe time, {PROBE_SECONDS.expected()} (default 8)")
    pr.add_argument("--seed", type=SEED, default=0, metavar="N",
                    help="seed of the random read offsets (default 0)")
    pr.set_defaults(func=cmd_probe)

    ck = dsub.add_parser("check", help="the simulator's DT beside a throttled device's "
                         "measured busy time, per window and policy (root, loop, FUSE)",
                         description=__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="examples:\n  flashml device check --trace workload.trace "
                         "-o device.json\n  flashml device check --trace workload.trace "
                         "--admission rejectx --bundle bundle/ --disk disk.json -o device.json")
    ck.add_argument("--trace", type=Path, required=True, metavar="FILE",
                    help="Tectonic trace whose GETs are played through the mount")
    ck.add_argument("-o", "--out", type=Path, required=True, metavar="FILE",
                    help="the comparison as JSON (written atomically)")
    ck.add_argument("--admission", action="append", choices=ADMISSIONS, default=None,
                    help="a built-in admission policy to run (repeatable; default admitall "
                    "and rejectx when no --bundle is given)")
    ck.add_argument("--bundle", action="append", type=Path, default=None, metavar="DIR",
                    help="a compiled policy bundle to run (repeatable)")
    for opt, kind, default, metavar, what in (
            ("--flash-mib", FLASH_MIB, 128, "MIB", "flash cache size"),
            ("--windows", WINDOWS, 12, "N", "windows the trace's time is cut into"),
            ("--device-mib", DEVICE_MIB, 16384, "MIB", "the loop device's size (a sparse file)"),
            ("--read-iops", READ_IOPS, 200, "IOPS", "the throttle's read IOPS"),
            ("--read-mibps", READ_MIBPS, 40.0, "MIBPS", "the throttle's read bandwidth"),
            ("--probe-seconds", PROBE_SECONDS, 8.0, "S", "probe time (not used with --disk)")):
        ck.add_argument(opt, type=kind, default=default, metavar=metavar,
                        help=f"{what}, {kind.expected()} (default {default:g})")
    ck.add_argument("--disk", type=Path, default=None, metavar="FILE",
                    help="a disk config (`device probe --out`) instead of probing")
    ck.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                    help="where the device's file and the flash files go (default: a "
                    "temporary folder; needs --device-mib of sparse space)")
    ck.set_defaults(func=cmd_check)
