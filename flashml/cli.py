"""The one `flashml` command line."""

from __future__ import annotations

import argparse
import sys

from flashml import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashml", description=__doc__)
    p.add_argument("--version", action="version", version=f"flashml {__version__}")
    p.add_subparsers(dest="command", metavar="COMMAND")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
