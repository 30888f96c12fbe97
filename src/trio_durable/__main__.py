"""``python -m trio_durable``: the ``trio-durable`` command."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main(prog_name="python -m trio_durable"))
