"""The ``trio-durable`` command.

Subcommands:

- ``trio-durable simulate --seeds 1..N``: the deterministic simulation of
  the built-in workload (the same as ``python -m
  trio_durable.testing.simulate``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``trio-durable`` command; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="trio-durable", description="trio-durable tools")
    parser.add_argument("command", choices=["simulate"], help="what to do")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    known, rest = parser.parse_known_args(args[:1])
    if known.command == "simulate":
        from .testing.simulate import main as simulate_main

        return simulate_main([*rest, *args[1:]])
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
