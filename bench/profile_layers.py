"""Where a bench's CPU goes, per layer: py-spy samples summed by layer.

Usage: ``python bench/profile_layers.py [--rate 250] [--top 12] [--raw OUT]
-- bench/bench_engine.py --stores sqlite ...`` records the bench with py-spy
(``pip install py-spy`` into your venv; it is not a project dependency),
every thread of the bench's process (not its subprocesses: a broker bench's
worker process is left out, so the figures are the engine's side), then
prints the share of on-CPU samples per layer. ``--from-raw FILE``
summarizes a recording made before (``py-spy record --threads -f raw``).

Each sample counts for the layer of its innermost frame (the code running
then; a C function such as ``sqlite3``'s ``execute`` or ``json.dumps``
counts for the Python line that called it):

- serialization: json, cattrs, attrs' generated methods, the engine's
  ``_serde``/``_wire``/``_codec`` modules and the stores' row decoding
  (``_stores/_rows.py``);
- store: ``trio_durable/_stores/``, sqlite3, psycopg;
- trio scheduling: trio (its run loop, to_thread's hand-offs), outcome,
  selectors, threading;
- bridge: ``_brokers/_bridge.py``, trio-asyncio;
- broker client: nats-py, aio-pika/aiormq/pamqp, asyncio, the adapters in
  ``brokers/`` and the memory broker;
- engine: the rest of ``trio_durable``;
- other: the bench itself, the standard library's rest.

Samples taken while importing are left out (start-up, not per run). Also
printed: the top leaf functions, and the engine modules by inclusive share
(samples whose innermost ``trio_durable`` frame is in that module, callees
included). Profiles are for reading; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "serialization",
        (
            "json/",
            "cattrs/",
            "<attrs generated",
            "attr/",
            "attrs/",
            "trio_durable/_serde",
            "trio_durable/_wire",
            "trio_durable/_codec",
            "trio_durable/_stores/_rows",
            "trio_durable/_stores/_codec",
            "trio_durable/_brokers/_codec",
        ),
    ),
    ("bridge", ("trio_durable/_brokers/_bridge", "trio_asyncio/")),
    (
        "broker client",
        (
            "nats/",
            "aio_pika/",
            "aiormq/",
            "pamqp/",
            "asyncio/",
            "trio_durable_nats/",
            "trio_durable_rabbitmq/",
            "trio_durable/_brokers/",
        ),
    ),
    ("store", ("trio_durable/_stores/", "sqlite3/", "psycopg/", "psycopg_pool/")),
    (
        "trio scheduling",
        ("trio/", "outcome/", "sniffio/", "selectors.py", "threading.py", "queue.py"),
    ),
    ("engine", ("trio_durable/",)),
)


def layer_of(file: str) -> str:
    for name, markers in LAYERS:
        if any(marker in file for marker in markers):
            return name
    return "other"


def parse_frame(frame: str) -> tuple[str, str]:
    """(function, file) of a py-spy raw frame ``func (file:line)``."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    return match["func"], match["file"]


def summarize(raw: Path, top: int) -> list[str]:
    layers: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    startup = total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if any("importlib._bootstrap" in f for f in frames):
            startup += count
            continue
        thread = frames[0] if frames[0].startswith("thread (") else ""
        if thread:
            frames = frames[1:]
            threads[thread.partition(": ")[2] or "unnamed"] += count
        if not frames:
            continue
        total += count
        func, file = parse_frame(frames[-1])
        layers[layer_of(file)] += count
        leaves[f"{func} ({file})"] += count
        for frame in reversed(frames):
            _, frame_file = parse_frame(frame)
            if "trio_durable/" in frame_file:
                modules[frame_file.split("trio_durable/", 1)[1]] += count
                break
    if not total:
        return ["no samples"]
    out = [f"{total} samples on CPU ({startup} more while importing, left out)", "by layer:"]
    out += [f"  {name:16} {100 * n / total:5.1f}%" for name, n in layers.most_common()]
    out.append("threads:")
    out += [f"  {name[:60]:60} {100 * n / total:5.1f}%" for name, n in threads.most_common(6)]
    out.append(f"top {top} leaf functions:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in leaves.most_common(top)]
    out.append(f"top {top} engine modules (inclusive):")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in modules.most_common(top)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--raw", type=Path, default=None, help="keep the recording here")
    parser.add_argument("--from-raw", type=Path, default=None, help="summarize this recording")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- bench/SCRIPT.py ARGS")
    args = parser.parse_args()
    raw = args.from_raw
    if raw is None:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("give a bench to run after --, or --from-raw FILE")
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(spy).exists():
            print("py-spy is not installed here (pip install py-spy)", file=sys.stderr)
            return 2
        raw = args.raw or Path(tempfile.mkstemp(suffix=".txt", prefix="py-spy-")[1])
        record = [spy, "record", "--threads", "-f", "raw", "-r", str(args.rate), "-o", str(raw)]
        subprocess.run([*record, "--", sys.executable, *command], check=True)
    print("\n".join(summarize(raw, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
