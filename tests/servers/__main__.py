"""``python tests/servers start|stop [NAME ...] [--dir DIR]``.

``start`` starts each named server (all by default) under ``DIR``
(``/tmp/trio-durable-servers`` by default) and prints one ``export VAR=URL``
line per server, for a shell to ``eval``; ``stop`` stops them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servers import NAMES, module


def main() -> int:
    parser = argparse.ArgumentParser(prog="python tests/servers")
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {', '.join(NAMES)}")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/trio-durable-servers"))
    args = parser.parse_args()
    for name in args.names or NAMES:
        server = module(name)
        workdir = args.dir / name
        if args.action == "start":
            workdir.mkdir(parents=True, exist_ok=True)
            url = server.start(workdir)
            print(f"export {server.ENV}={url}")
        else:
            server.stop(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
