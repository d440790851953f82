"""flashml: learn flash-cache policies from storage traces and ship them as C shared objects."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys

from flashml import __version__

# Each name is a module in flashml.commands exposing `register(subparsers)`.
COMMAND_MODULES = ("trace", "sim", "episodes", "train", "compile", "systems", "regress", "ui",
                   "device")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashml", description=__doc__)
    p.add_argument("--version", action="version", version=f"flashml {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"flashml.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"flashml.commands.{name}":
                continue
            raise
        mod.register(sub)
    from flashml.commands.examples import apply

    apply(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "trace_opt"):  # the trace commands: FILE or --trace FILE, once
        if args.trace_opt is not None and args.trace is not None:
            parser.error("give the trace once: FILE or --trace FILE")
        args.trace = args.trace if args.trace is not None else args.trace_opt
        if args.trace is None:
            parser.error("the trace is required: FILE or --trace FILE")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    from flashml.errors import UserError

    try:
        rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:
        return _reader_gone()
    except UserError as e:
        print(f"flashml: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in _USER_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename is not None else ""
        print(f"flashml: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    return int(rc or 0)


#: Errors of the user's files and disks (a folder that cannot be written, a full disk): one
#: line naming the file, not a traceback.
_USER_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR,
                          errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG,
                          errno.ELOOP, errno.EEXIST})


def _reader_gone() -> int:
    """The reader of stdout went away (`flashml ... | head`): stop quietly, as a Unix tool
    killed by SIGPIPE would (exit 141), and keep the interpreter's final flush from
    failing again on the closed pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced stdout (tests)
        return 141
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return 141


def console() -> int:
    """The `flashml` command: `main` with Ctrl-C reported as one line and exit 130 (the shell's
    128 + SIGINT), not a traceback. `main` itself lets KeyboardInterrupt propagate, so a
    caller (a test, a job embedding the CLI) sees it and whatever cleanup ran on the way."""
    try:
        return main()
    except KeyboardInterrupt:
        print("\nflashml: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(console())
